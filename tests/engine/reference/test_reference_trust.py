"""A reference is never trusted blindly: each claim with a planted case and its correct twin, on
functions nobody here wrote (torch.as_strided, binary cross-entropy) as well as small ones."""
from __future__ import annotations

import zlib

import numpy as np

import gradci
from gradci import Scenario
from gradci._testing.planted import wrong_by
from gradci.scenarios.numerics.tolerances import tolerance_for
from gradci.scenarios.reference.finite_differences import compute_references
from gradci.scenarios.verdict.against_reference import compare_arrays

TORCH = ["torch-rev", "torch-func-rev", "torch-func-fwd"]


def check(scenario, backends, dtypes=("float64",)):
    report = gradci.check([scenario], backends=backends, devices=["cpu"], dtypes=list(dtypes))
    return {(c.backend, c.dtype): c for c in report.cells}


def neighbour_products(x):
    """sum(x[i] * x[i+1]) through torch.as_strided, which reads the tensor's raw storage."""
    import torch

    n = x.shape[0]
    left = torch.as_strided(x, (n - 1,), (1,))
    right = torch.as_strided(x, (n - 1,), (1,), x.storage_offset() + 1)
    return (left * right).sum()


X6 = np.array([0.3, -1.2, 0.8, 2.0, -0.5, 1.1])


def test_as_strided_function_gets_a_true_reference_and_passes():
    s = Scenario("as-strided", "gradient", {"torch": neighbour_products}, X6)
    _, (reference,) = compute_references(s)
    expected = np.r_[X6[1], X6[:-2] + X6[2:], X6[-2]]
    np.testing.assert_allclose(reference.full, expected, rtol=1e-9)
    cells = check(s, TORCH, ("float64", "float32"))
    assert {c.status for c in cells.values()} == {"pass"}, [c.message for c in cells.values()]


def test_as_strided_function_with_a_planted_wrong_gradient_fails():
    s = Scenario("as-strided-bad", "gradient", {"torch": wrong_by(neighbour_products, 1e-4)}, X6)
    cells = check(s, ["torch-rev", "torch-func-rev"], ("float64",))
    assert {c.status for c in cells.values()} == {"fail"}


def bce(p, target):
    import torch.nn.functional as F

    return F.binary_cross_entropy(p, target)


P = np.array([0.13, 0.5, 0.92])
TARGET = np.array([0.0, 1.0, 1.0])


def test_function_that_raises_outside_its_domain_gets_a_reference():
    # torch's binary cross-entropy raises (not NaN) for p outside [0, 1]: the first step, 0.5, leaves it
    s = Scenario("bce", "gradient", {"torch": bce}, P, contexts=(TARGET,))
    cells = check(s, TORCH)
    assert {c.status for c in cells.values()} == {"pass"}, [c.message for c in cells.values()]


def test_function_that_raises_with_a_planted_wrong_gradient_fails():
    s = Scenario("bce-bad", "gradient", {"torch": wrong_by(bce, 1e-4)}, P, contexts=(TARGET,))
    assert {c.status for c in check(s, ["torch-rev", "torch-func-fwd"]).values()} == {"fail"}


def log_refusing_nonpositive(x):
    if np.any(x <= 0):
        raise ValueError("log of a non-positive number")
    return np.sum(np.log(x))


def test_domain_edge_closer_than_every_central_step_takes_one_sided_stencils():
    s = Scenario("log-edge", "gradient", {"numpy": log_refusing_nonpositive, "torch": lambda x: x.log().sum()},
                 np.array([1e-10, 2.0]))
    _, (reference,) = compute_references(s)
    np.testing.assert_allclose(reference.full, [1e10, 0.5], rtol=1e-6)


def test_function_raising_everywhere_says_what_it_raised():
    def always(x):
        if x[0] != 0.5:
            raise KeyError("no such point")
        return np.sum(x)

    cell = check(Scenario("raises", "gradient", {"numpy": always, "torch": lambda x: x.sum()},
                          np.array([0.5])), ["torch-rev"])[("torch-rev", "float64")]
    assert cell.status == "error" and "f raised at stencil points: KeyError" in cell.message


def rough(x):
    # x·x plus rounding-like noise of 1e-6 (deterministic in x's bits), as an iterative solver's
    # result carries: finite differences' error estimate stays above float64's tolerance at every step
    noise = np.random.default_rng(zlib.crc32(x.tobytes())).uniform(-1e-6, 1e-6)
    return np.sum(x * x) + noise


def test_reference_whose_error_cannot_decide_is_an_error_never_a_pass():
    s = Scenario("rough", "gradient", {"numpy": rough, "torch": lambda x: (x * x).sum()}, np.array([0.3, 0.7]))
    cell = check(s, ["torch-rev"])[("torch-rev", "float64")]
    assert cell.status == "error" and "reference unreliable" in cell.message
    assert "give an analytic reference" in cell.message
    # the correct twin: the same derivative against an analytic reference passes
    analytic = Scenario("rough-analytic", "gradient", {"numpy": rough, "torch": lambda x: (x * x).sum()},
                        np.array([0.3, 0.7]), reference=np.array([0.6, 1.4]))
    assert check(analytic, ["torch-rev"])[("torch-rev", "float64")].status == "pass"


def test_an_analytic_reference_given_as_a_function_serves_every_tangent():
    def log_sum(x):
        return np.log(x).sum() if isinstance(x, np.ndarray) else x.log().sum()

    x = np.array([3e-7, 2e-6, 8e-6])
    right = Scenario("log-tiny", "hvp", log_sum, x, reference=lambda x, v: -v / x ** 2)
    batched = gradci.library.with_batched_tangents(right)
    for scenario in (right, batched):
        assert check(scenario, ["torch-rev"])[("torch-rev", "float64")].status == "pass"
    # the planted twin: a wrong analytic Hessian fails the correct derivative, for every tangent
    wrong = Scenario("log-tiny-wrong", "hvp", log_sum, x, reference=lambda x, v: -v / x)
    assert check(wrong, ["torch-rev"])[("torch-rev", "float64")].status == "fail"
    assert check(gradci.library.with_batched_tangents(wrong), ["torch-rev"])[("torch-rev", "float64")].status \
        == "fail"


def test_an_unreliable_reference_does_not_set_the_tolerance_scale():
    tol = tolerance_for("float32")
    reference, result = np.array([1e4, 1.0]), np.array([1e4, 1.5])
    unreliable = compare_arrays(result, reference, np.array([1e3, 0.0]), tol)
    assert not unreliable.ok  # a huge reference value with a huge error cannot loosen atol to 2
    reliable = compare_arrays(result, reference, np.array([0.0, 0.0]), tol)
    assert reliable.ok  # the twin: a trusted 1e4 does set the scale


def test_refinement_rescues_a_reference_at_large_magnitude():
    s = Scenario("cubic-large", "hvp", lambda x: gradci.namespace(x).sum(x ** 3) / 3,
                 1e4 + np.array([0.3, -0.2, 0.9]), tangent=np.array([1.0, -2.0, 0.5]))
    _, (reference,) = compute_references(s)
    np.testing.assert_allclose(reference.full, 2 * s.x * s.tangent, rtol=1e-9)
    assert check(s, ["torch-rev"])[("torch-rev", "float64")].status == "pass"


def test_float32_cell_whose_function_computes_in_float64_says_so():
    import torch

    weights = torch.tensor([1.5, -0.5, 2.0], dtype=torch.float64)  # a float64 constant in the closure
    promoting = Scenario("promotes", "gradient", {"numpy": lambda x: np.sum(np.array([1.5, -0.5, 2.0]) * x ** 2),
                                                  "torch": lambda x: (weights * x ** 2).sum()},
                         np.array([0.1, 0.2, 0.3]))
    cell = check(promoting, ["torch-rev"], ("float32",))[("torch-rev", "float32")]
    assert cell.status == "pass" and "returns float64 for float32 inputs" in cell.message
    plain = Scenario("plain", "gradient", lambda x: gradci.namespace(x).sum(x ** 2), np.array([0.1, 0.2]))
    assert check(plain, ["torch-rev"], ("float32",))[("torch-rev", "float32")].message == ""
