"""Framework quirks that used to make correct derivatives error: torch's ZeroTensor gradients, dtype
promotion inside the function, seeded randomness under vmap. Each with a planted wrong twin."""
from __future__ import annotations

import numpy as np

import gradci
from gradci import Scenario
from gradci._testing.planted import wrong_by

TORCH = ["torch-rev", "torch-func-rev", "torch-func-fwd"]


def statuses(scenario, backends, dtypes=("float64",)):
    report = gradci.check([scenario], backends=backends, devices=["cpu"], dtypes=list(dtypes))
    return {c.backend: (c.status, c.message) for c in report.cells}


def signs(x):
    import torch

    return torch.sgn(x).sum()  # its gradient is a ZeroTensor, which .numpy() refuses


def test_zero_tensor_gradient_passes():
    got = statuses(Scenario("sgn", "gradient", {"torch": signs}, np.array([0.3, -0.5])), TORCH)
    assert {s for s, _ in got.values()} == {"pass"}, got


def test_zero_tensor_gradient_planted_wrong_fails():
    got = statuses(Scenario("sgn-bad", "gradient", {"torch": wrong_by(signs, 1e-4)}, np.array([0.3, -0.5])),
                   ["torch-rev", "torch-func-rev"])
    assert {s for s, _ in got.values()} == {"fail"}


def promoting_scenario(eps: float = 0.0):
    import jax.numpy as jnp
    import torch

    w = np.array([1.5, -0.5, 2.0])
    torch_w, jax_w = torch.tensor(w, dtype=torch.float64), jnp.asarray(w, dtype=jnp.float64)
    torch_f = (lambda x: torch.sin(torch_w * x))
    return Scenario("promotes/vjp", "vjp", {
        "numpy": lambda x: np.sin(w * x),
        "torch": torch_f if not eps else lambda x: torch_f(x) + eps * (x - x.detach()),
        "jax": lambda x: jnp.sin(jax_w * x)}, np.array([0.1, 0.2, 0.3]))


def test_function_promoting_float32_to_float64_passes_in_every_mode():
    # a float32 cotangent meets a float64 output (reverse) or Jacobian (forward)
    got = statuses(promoting_scenario(), TORCH + ["jax-rev", "jax-fwd"], ("float32",))
    assert {s for s, _ in got.values()} == {"pass"}, got
    assert all("returns float64 for float32 inputs" in m for _, m in got.values())


def test_function_promoting_float32_with_a_planted_wrong_vjp_fails():
    got = statuses(promoting_scenario(eps=1e-2), TORCH, ("float32",))
    assert {s for s, _ in got.values()} == {"fail"}, got


def seeded_noise(x):
    import torch

    generator = torch.Generator().manual_seed(0)
    noise = torch.rand(x.shape, generator=generator, dtype=x.dtype)
    return (x * x * (1 + noise)).sum()


def test_seeded_randomness_passes_under_forward_mode_vmap():
    got = statuses(Scenario("seeded", "gradient", {"torch": seeded_noise}, np.array([0.3, -0.5, 1.0])), TORCH)
    assert {s for s, _ in got.values()} == {"pass"}, got


def test_seeded_randomness_planted_wrong_fails():
    got = statuses(Scenario("seeded-bad", "gradient", {"torch": wrong_by(seeded_noise, 1e-4)},
                            np.array([0.3, -0.5, 1.0])), TORCH)
    assert {s for s, _ in got.values()} == {"fail"}, got
