"""The engine's correctness claims, each with a planted bug that must be caught and a twin that must pass."""
from __future__ import annotations

import inspect
import types

import numpy as np
import pytest

import gradci
from gradci import Scenario, Tangents, namespace
from gradci._testing import planted
from gradci._testing.planted import one_element_wrong, torch_tanh

TORCH = ["torch-rev", "torch-func-rev", "torch-func-fwd"]
JAX = ["jax-rev", "jax-rev-jit", "jax-fwd"]


def statuses(report):
    return {cell.backend: cell.status for cell in report.cells}


def run(scenario, backends, dtypes=("float64",)):
    return gradci.check([scenario], backends=backends, devices=["cpu"], dtypes=list(dtypes))


def test_public_names():
    assert gradci.OPERATORS == ("derivative", "second_derivative", "gradient", "value_and_gradient",
                                   "jacobian", "jvp", "vjp", "hvp", "hessian")
    assert set(gradci.backend_names()) >= {"jax-rev", "jax-fwd", "jax-rev-jit", "torch-rev", "torch-func-rev",
                                       "torch-func-fwd", "fd"}
    modes = {name: gradci.get_backend(name).mode for name in gradci.backend_names()}
    assert modes["fd"] == "finite" and modes["jax-fwd"] == "forward" and modes["torch-rev"] == "reverse"


def test_correct_torch_function_passes_every_torch_backend():
    report = run(planted.scenario("sin/torch", "torch", planted.torch_sin()), TORCH)
    assert statuses(report) == {b: "pass" for b in TORCH}


def test_wrong_torch_backward_fails_reverse_and_is_caught_at_1e_4():
    # gradcheck's rtol=1e-3 lets this through; gradci's float64 tolerance must not.
    report = run(planted.scenario("sin/torch-bad-bwd", "torch", planted.torch_sin(backward_scale=1 + 1e-4)), TORCH)
    got = statuses(report)
    assert got["torch-rev"] == "fail" and got["torch-func-rev"] == "fail"
    assert got["torch-func-fwd"] == "pass"


def test_gradcheck_misses_what_gradci_catches():
    import torch

    sin = planted.torch_sin(backward_scale=1 + 1e-4)
    x = torch.tensor(planted.X, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: (sin(t) * t).sum(), (x,), fast_mode=True)


def test_bug_only_in_jvp_rule_fails_forward_and_passes_reverse():
    report = run(planted.scenario("sin/torch-bad-jvp", "torch", planted.torch_sin(jvp_scale=1.01), "jvp"), TORCH)
    got = statuses(report)
    assert got["torch-func-fwd"] == "fail"
    assert got["torch-rev"] == "pass" and got["torch-func-rev"] == "pass"


def test_function_without_jvp_rule_is_an_error_in_forward_mode():
    report = run(planted.scenario("sin/torch-no-jvp", "torch", planted.torch_sin(jvp_rule=False)), TORCH)
    got = statuses(report)
    assert got["torch-func-fwd"] == "error" and got["torch-rev"] == "pass"


def test_custom_vjp_correct_twin_and_wrong_rule():
    good = statuses(run(planted.scenario("sin/jax-vjp", "jax", planted.jax_sin_vjp()), JAX))
    bad = statuses(run(planted.scenario("sin/jax-vjp-bad", "jax", planted.jax_sin_vjp(scale=0.99)), JAX))
    assert good == {"jax-rev": "pass", "jax-rev-jit": "pass", "jax-fwd": "error"}  # no forward mode: error
    assert bad == {"jax-rev": "fail", "jax-rev-jit": "fail", "jax-fwd": "error"}


def test_custom_jvp_wrong_rule_fails_everywhere_jax_uses_it():
    good = statuses(run(planted.scenario("sin/jax-jvp", "jax", planted.jax_sin_jvp(), "jvp"), JAX))
    bad = statuses(run(planted.scenario("sin/jax-jvp-bad", "jax", planted.jax_sin_jvp(scale=1.001), "jvp"), JAX))
    assert set(good.values()) == {"pass"}
    assert set(bad.values()) == {"fail"}  # jax transposes the jvp rule for reverse mode too


def where_trick(x):
    xp = namespace(x)
    return xp.sum(xp.where(x == 0, 1.0, xp.sin(x) / x))


def test_nan_gradient_where_true_derivative_is_finite_fails():
    x = np.array([0.0, 0.5])
    report = run(Scenario("where-trick", "gradient", where_trick, x), JAX + TORCH)
    got = statuses(report)
    for backend in ("jax-rev", "jax-rev-jit", "torch-rev", "torch-func-rev"):
        assert got[backend] == "fail", backend
    assert got["jax-fwd"] == "pass" and got["torch-func-fwd"] == "pass"
    messages = [c.message for c in report.cells if c.backend == "torch-rev"]
    assert "non-finite" in messages[0]


def test_xfail_and_xpass():
    x = np.array([0.0, 0.5])
    s = Scenario("where-trick", "gradient", where_trick, x, xfail={"*-rev*": "NaN through the unselected branch"})
    got = statuses(run(s, ["torch-rev", "torch-func-fwd", "jax-rev-jit"]))
    assert got == {"torch-rev": "xfail", "torch-func-fwd": "pass", "jax-rev-jit": "xfail"}
    s2 = Scenario("sq", "gradient", lambda x: namespace(x).sum(x * x), x, xfail={"torch-rev": "not really"})
    report = run(s2, ["torch-rev"])
    assert statuses(report) == {"torch-rev": "xpass"} and not report.ok


def test_value_and_gradient_checks_the_value():
    def wrong_value(x):
        import torch

        class Shifted(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return (x * x).sum() + 1e-3  # value off, gradient right

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * 2 * x

        return Shifted.apply(x)

    s = Scenario("vg", "value_and_gradient", {"numpy": lambda x: np.sum(x * x), "torch": wrong_value},
                 np.array([1.0, 2.0]), dtypes=("float64",))
    cell = run(s, ["torch-rev"]).cells[0]
    assert cell.status == "fail" and "value" in cell.message


def test_mutated_context_is_reported_as_undeclared_state():
    def mutating(x, c):
        c.mul_(2.0)  # a function that scribbles on a context
        return (x * x).sum()

    s = Scenario("mut", "gradient", {"numpy": lambda x, c: np.sum(x * x), "torch": mutating},
                 np.array([1.0, 2.0]), contexts=(np.array([1.0]),))
    got = {c.backend: c for c in run(s, ["torch-rev", "torch-func-rev"]).cells}
    assert got["torch-rev"].status == "error" and "updates context 0 in place" in got["torch-rev"].message
    assert "state=(0,)" in got["torch-rev"].message
    # torch.func refuses the write itself, and says so; the cell names the cause all the same
    assert got["torch-func-rev"].status == "error" and "updates a context in place" in got["torch-func-rev"].message


def test_forward_and_reverse_disagreement_beyond_probes_fails_the_wrong_mode_only():
    # In float32, a backward 1% wrong in one element of 2000: random probes dilute it below the
    # float32 tolerance, the elementwise forward/reverse agreement check does not.
    tanh = torch_tanh(backward_scale=one_element_wrong)
    x = np.linspace(-1, 1, 2000)
    s = Scenario("tanh2000", "gradient", {"numpy": lambda x: np.sum(np.tanh(x)),
                                         "torch": lambda x: tanh(x).sum()}, x)
    report = run(s, ["torch-rev", "torch-func-fwd"], dtypes=("float32",))
    # the reference along the disagreement decides: the backward rule is wrong, forward mode right
    assert statuses(report) == {"torch-rev": "fail", "torch-func-fwd": "pass"}
    wrong = report.cells[0] if report.cells[0].backend == "torch-rev" else report.cells[1]
    assert "forward and reverse modes disagree" in wrong.message and "finds this one wrong" in wrong.message


def test_pytree_inputs_and_batched_tangents():
    x = {"w": np.array([[0.5, -0.2], [0.1, 0.3]]), "b": [np.array([0.1, -0.4])]}

    def f(p):
        xp = namespace(p)
        return xp.tanh(p["w"] @ p["b"][0] + p["b"][0])

    tangents = Tangents(({"w": np.ones((2, 2)), "b": [np.array([1.0, 0.0])]},
                         {"w": np.eye(2), "b": [np.array([0.0, 2.0])]}))
    for operator, tangent in (("jvp", tangents), ("vjp", Tangents((np.array([1.0, 2.0]), np.array([0.0, 1.0]))))):
        report = gradci.check([Scenario(f"tree/{operator}", operator, f, x, tangent=tangent)], devices=["cpu"])
        assert report.ok, [(c.backend, c.status, c.message) for c in report.failing()]


def test_wrong_pytree_structure_fails():
    x = {"a": np.array([1.0, 2.0]), "b": np.array([3.0])}
    s = Scenario("tree/swap", "gradient", {"numpy": lambda p: np.sum(p["a"] ** 2) + np.sum(p["b"]),
                                          "torch": lambda p: (p["a"] ** 2).sum() + p["b"].sum()}, x,
                 reference={"a": np.array([2.0, 4.0]), "c": np.array([1.0])})
    cell = run(s, ["torch-rev"]).cells[0]
    assert cell.status == "fail" and "structure" in cell.message


def test_cuda_cells_skip_with_a_reason_without_gpu():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    s = Scenario("sq", "gradient", lambda x: namespace(x).sum(x * x), np.array([1.0, 2.0]))
    report = gradci.check([s], backends=["torch-rev", "jax-rev"], devices=["cuda:0"])
    assert {c.status for c in report.cells} == {"skip"}
    assert all("cuda" in c.message.lower() for c in report.cells)


def test_float32_cells_use_float32_and_looser_tolerance():
    s = Scenario("sq", "gradient", lambda x: namespace(x).sum(namespace(x).exp(x)), np.array([1.0, 2.0]))
    cells = {c.dtype: c for c in run(s, ["torch-rev"], dtypes=("float64", "float32")).cells}
    assert cells["float32"].status == cells["float64"].status == "pass"
    assert cells["float32"].max_abs_err > 1e-8 > cells["float64"].max_abs_err  # really ran in float32
    assert cells["float32"].rtol > cells["float64"].rtol


def test_analytic_reference_is_used_and_fd_backend_checks_it():
    s = Scenario("cube", "derivative", lambda x: x ** 3, 2.0, reference=np.array(12.0 * 1.0001))
    got = statuses(run(s, ["fd", "torch-rev"]))
    assert got == {"fd": "fail", "torch-rev": "fail"}
    s_ok = Scenario("cube-ok", "derivative", lambda x: x ** 3, 2.0, reference=np.array(12.0))
    assert set(statuses(run(s_ok, ["fd", "torch-rev"])).values()) == {"pass"}


def test_custom_compare_is_used():
    calls = []

    def compare(result, reference, rtol, atol):
        calls.append(rtol)
        return False, 1.0, 1.0

    s = Scenario("sq", "gradient", lambda x: namespace(x).sum(x * x), np.array([1.0]), compare=compare)
    assert statuses(run(s, ["torch-rev"])) == {"torch-rev": "fail"} and calls


def test_broken_scenario_is_an_error_cell_not_a_crash():
    def broken(x):
        raise RuntimeError("boom")

    report = run(Scenario("broken", "gradient", broken, np.array([1.0])), ["torch-rev"])
    assert report.cells[0].status == "error" and "boom" in report.cells[0].message


def test_timings_recorded():
    s = Scenario("sq", "gradient", lambda x: namespace(x).sum(x * x), np.array([1.0, 2.0]))
    cell = run(s, ["jax-rev-jit"]).cells[0]
    assert cell.first_call_ms > cell.time_ms > 0  # the first call includes compilation


def test_reference_near_a_domain_edge_takes_smaller_steps():
    s = Scenario("log-tiny", "gradient", lambda x: namespace(x).sum(namespace(x).log(x)), np.array([1e-7, 2e-6]))
    assert statuses(run(s, ["torch-rev", "fd"])) == {"torch-rev": "pass", "fd": "pass"}


def test_a_non_finite_finite_difference_is_no_reference():
    # sqrt'(0) is infinite: a backend answering inf must not pass against an "inf" guessed by
    # finite differences; an analytic reference may say inf, and then it passes.
    def sqrt_sum(x):
        return namespace(x).sum(namespace(x).sqrt(x))

    cell = run(Scenario("sqrt0", "gradient", sqrt_sum, np.array([0.0, 1.0])), ["torch-rev"]).cells[0]
    assert cell.status == "error" and "analytic reference" in cell.message
    analytic = Scenario("sqrt0-analytic", "gradient", sqrt_sum, np.array([0.0, 1.0]),
                        reference=np.array([np.inf, 0.5]))
    assert statuses(run(analytic, ["torch-rev"])) == {"torch-rev": "pass"}


def test_forward_mode_skips_per_input_operators_on_huge_inputs():
    s = Scenario("big", "gradient", lambda x: namespace(x).sum(x * x), np.linspace(0, 1, 5000))
    got = {c.backend: c for c in run(s, ["torch-func-fwd", "torch-func-rev"]).cells}
    assert got["torch-func-fwd"].status == "skip" and "one JVP per input element" in got["torch-func-fwd"].message
    assert got["torch-func-rev"].status == "pass"


def test_fingerprint_sees_data_captured_in_a_closure():
    def make(weights):
        def f(x):
            return namespace(x).sum(x * weights)
        return f

    x = np.array([1.0, 2.0])
    a = Scenario("closure", "gradient", make(np.array([1.0, 2.0])), x)
    b = Scenario("closure", "gradient", make(np.array([1.0, 3.0])), x)
    c = Scenario("closure", "gradient", make(np.array([1.0, 2.0])), x)
    assert a.fingerprint() != b.fingerprint() and a.fingerprint() == c.fingerprint()


def _torch_layer(seed: int):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2).double()


def _weight_total(held) -> float:
    """The sum of the layer weights ``held`` holds, however it holds them."""
    if isinstance(held, types.SimpleNamespace):
        held = held.layer
    if inspect.ismethod(held):
        held = held.__self__
    held = getattr(held, "weight", held)
    return float(np.asarray(held.detach() if hasattr(held, "detach") else held).sum())


@pytest.mark.parametrize("capture", ["module", "bound method", "tensor", "jax array", "object"])
def test_fingerprint_sees_weights_held_by_framework_objects(capture):
    # Two closures with the same source over different weights must never share a reference (the
    # reference cache and the shared evaluations are keyed by fingerprints): a stale reference
    # makes correct code fail, or wrong code pass.
    import jax.numpy as jnp
    import torch

    from gradci.scenarios.reference import finite_differences as reference

    def make(seed):
        layer = _torch_layer(seed)
        held = {"module": layer, "bound method": layer.forward, "tensor": layer.weight.detach().clone(),
                "jax array": jnp.asarray(layer.weight.detach().numpy()), "object": types.SimpleNamespace(layer=layer)}
        captured = held[capture]

        def f(x):
            return torch.sum(torch.tanh(x)) * _weight_total(captured)
        return f

    x = np.array([0.3, -0.2, 0.7])
    a, b, c = (Scenario("same-name", "gradient", {"torch": make(seed)}, x) for seed in (0, 1, 0))
    assert a.fingerprint() != b.fingerprint() and a.fingerprint() == c.fingerprint()
    assert a.function_fingerprint() != b.function_fingerprint()
    reference_of = {s: reference.compute_references(s)[1][0].full for s in (a, b)}
    assert not np.allclose(reference_of[a], reference_of[b])  # so sharing them would be wrong


@pytest.mark.parametrize(("returns", "says"), [
    (lambda x: x * 2, "gradient needs f(x) to be a scalar; it returned shape (3,)"),
    (lambda x: (x * float("nan")).sum(), "f(x) is not finite at the scenario's point"),
    (lambda x: "not an array", "f must return numbers, an array or a pytree of arrays; it returned str"),
])
def test_a_function_returning_the_wrong_thing_is_an_error_on_every_backend(returns, says):
    # Finite differences of a vector-valued "gradient" function used to pass against a Jacobian reference.
    report = gradci.check([Scenario("wrong-output", "gradient", returns, np.array([0.3, -0.2, 0.7]))],
                             backends=["fd", "torch-rev", "jax-rev"], dtypes=["float64"])
    assert {(cell.status, says in cell.message) for cell in report.cells} == {("error", True)}
