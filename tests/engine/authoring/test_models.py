"""Models as scenarios: a torch.nn.Module or an equinox module as x (its parameters differentiated),
and a captured module that follows each cell's dtype."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci.scenarios.contract.errors import ScenarioInputError

torch = pytest.importorskip("torch")
TORCH_BACKENDS = ["torch-rev", "torch-func-rev", "torch-func-fwd", "torch-fwd"]
RNG = np.random.default_rng(0)
INPUTS, TARGETS = RNG.normal(size=(5, 3)), RNG.normal(size=(5, 1))


def mse(model, inputs, targets):
    return torch.mean((model(inputs) - targets) ** 2)


class ScaledTanh(torch.nn.Module):
    """tanh whose backward is scaled by ``scale`` (1: correct), through an autograd.Function."""

    def __init__(self, scale: float):
        super().__init__()

        class Tanh(torch.autograd.Function):
            @staticmethod
            def forward(x):
                return torch.tanh(x)

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(output)
                ctx.save_for_forward(output)

            @staticmethod
            def backward(ctx, grad):
                (y,) = ctx.saved_tensors
                return grad * scale * (1 - y ** 2)

            @staticmethod
            def jvp(ctx, tangent):
                (y,) = ctx.saved_tensors
                return tangent * scale * (1 - y ** 2)

            @staticmethod
            def vmap(info, in_dims, x):
                return Tanh.apply(x), in_dims[0]

        self.function = Tanh

    def forward(self, x):
        return self.function.apply(x)


def mlp(scale: float = 1.0):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), ScaledTanh(scale), torch.nn.Linear(4, 1))


def cells(scenario, backends=TORCH_BACKENDS):
    return gradci.check([scenario], backends=backends, devices=["cpu"], dtypes=["float64", "float32"]).cells


def test_a_torch_module_as_x_is_checked_with_respect_to_its_parameters():
    scenario = Scenario("mlp", "gradient", mse, mlp(), contexts=(INPUTS, TARGETS))
    assert sorted(scenario.x) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    found = cells(scenario)
    assert len(found) == 8 and all(c.status == "pass" for c in found), [(c.backend, c.status, c.message) for c in found]


def test_a_wrong_rule_inside_a_module_fails_on_every_backend():
    found = cells(Scenario("mlp/wrong", "gradient", mse, mlp(scale=1.3), contexts=(INPUTS, TARGETS)))
    assert all(c.status == "fail" for c in found), [(c.backend, c.status, c.message) for c in found]


def test_the_users_model_is_left_as_it_was():
    model = mlp()
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    cells(Scenario("mlp", "gradient", mse, model, contexts=(INPUTS, TARGETS)), backends=["torch-rev"])
    assert all(torch.equal(before[name], p) and p.dtype == torch.float32 for name, p in model.state_dict().items())


MODEL = mlp()  # a module-level model, as a scenario module holds one, captured through a global


def test_a_captured_module_follows_each_cells_dtype():
    """float32 weights in a float64 cell (the reference too) would fail with a dtype error, or
    promote a float32 cell to float64: each cell gets the model in its own dtype."""
    closure_model = mlp()
    by_closure = Scenario("closure", "gradient", {"torch": lambda x: torch.sum(closure_model(x) ** 2)}, INPUTS)
    by_global = Scenario("global", "gradient", {"torch": lambda x: torch.sum(MODEL(x) ** 2)}, INPUTS)
    for scenario in (by_closure, by_global):
        for cell in cells(scenario, backends=["torch-rev", "torch-func-rev", "torch-fwd"]):
            assert cell.status == "pass", (scenario.name, cell.backend, cell.dtype, cell.message)
            assert "float64" not in cell.warnings, cell.warnings
    assert MODEL[0].weight.dtype == torch.float32 and closure_model[0].weight.dtype == torch.float32


def test_an_equinox_module_as_x():
    eqx = pytest.importorskip("equinox")
    import jax
    import jax.numpy as jnp

    model = eqx.nn.MLP(3, 1, 4, 1, key=jax.random.PRNGKey(0))

    def loss(m, inputs, targets):
        return jnp.mean((jax.vmap(m)(inputs) - targets) ** 2)

    scenario = Scenario("eqx", "gradient", {"jax": loss}, model, contexts=(INPUTS, TARGETS))
    assert all(name.startswith(".layers[") for name in scenario.x)
    found = cells(scenario, backends=["jax-rev", "jax-fwd", "jax-rev-jit"])
    assert len(found) == 6 and all(c.status == "pass" for c in found), [(c.backend, c.status, c.message) for c in found]


def test_a_module_without_parameters_is_a_one_line_error():
    with pytest.raises(ScenarioInputError, match="no trainable floating-point parameters"):
        Scenario("empty", "gradient", mse, torch.nn.Tanh(), contexts=(INPUTS, TARGETS))


class Recompute(torch.autograd.Function):
    """A rule that runs the model again in its backward, with the parameters the model holds then
    (as torchdiffeq's adjoint and activation checkpointing do)."""

    @staticmethod
    def forward(ctx, module, x, *params):
        ctx.module = module
        ctx.save_for_backward(x, *params)
        with torch.no_grad():
            return module(x)

    @staticmethod
    def backward(ctx, grad):
        x, *params = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            out = ctx.module(x)
            grads = torch.autograd.grad(out, (x, *params), grad, allow_unused=True)
        return (None, *grads)


def test_a_rule_that_runs_the_model_again_in_its_backward_is_checked_with_respect_to_the_parameters():
    def loss(model, inputs):
        return torch.sum(Recompute.apply(model, inputs, *model.parameters()) ** 2)

    torch.manual_seed(0)
    found = cells(Scenario("recompute", "gradient", loss, torch.nn.Linear(3, 2), contexts=(INPUTS,)),
                  backends=["torch-rev"])
    assert all(c.status == "pass" for c in found), [(c.dtype, c.message) for c in found]
