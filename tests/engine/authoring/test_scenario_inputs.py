"""Scenarios for real functions: framework arrays and non-float contexts as given, pytree Jacobians
and Hessians in jax.jacrev's block convention, ``wrt=`` for functions of several arguments, one-line
errors. Each claim with a planted wrong derivative that must be caught and a correct twin that passes."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario, namespace
from gradci._testing import planted
from gradci._testing.planted import one_element_wrong, torch_tanh
from gradci.scenarios.adapters import get_framework
from gradci.scenarios.numerics.tolerances import tolerance_for
from gradci.scenarios.operators.blocks import block_matrix, matrix_blocks
from gradci.scenarios.reference.finite_differences import compute_references
from gradci.scenarios.verdict.against_reference import compare_to_reference

TORCH = ["torch-rev", "torch-func-rev", "torch-func-fwd"]
JAX = ["jax-rev", "jax-rev-jit", "jax-fwd"]
EVERY = JAX + TORCH + ["fd"]


def statuses(scenario, backends=EVERY):
    report = gradci.check([scenario], backends=backends, devices=["cpu"], dtypes=["float64"])
    return {c.backend: (c.status, c.message) for c in report.cells}


def verdicts(scenario, backends=EVERY):
    return {backend: status for backend, (status, _) in statuses(scenario, backends).items()}


def all_pass(scenario, backends=EVERY):
    """Every cell passes; fd may skip an input too large for its full results (probes check it)."""
    got = statuses(scenario, backends)
    wrong = {backend: cell for backend, cell in got.items()
             if cell[0] != "pass" and not (backend == "fd" and "input too large" in cell[1])}
    assert not wrong, got


# -- contexts that are not floating point pass through unchanged ------------------------------------
X = np.array([0.3, -0.7, 1.1, 0.5, -0.2])
INDEX = np.array([4, 0, 0, 2])


def gather_loss(x, index, count):
    """Indexes with an integer array and slices with an integer count: a cast to float breaks both
    (torch refuses float indices; jax refuses a traced slice bound under jit)."""
    xp = namespace(x)
    return xp.sum(xp.sin(xp.take(x, index, axis=0)) * x[:count] ** 2)


def test_index_array_and_count_contexts_stay_integers_and_pass_every_backend():
    s = Scenario("ctx/index", "gradient", gather_loss, X, contexts=(INDEX, 4))
    assert s.contexts[0].dtype == np.int64 and s.contexts[1] == 4 and type(s.contexts[1]) is int
    all_pass(s)


def test_index_array_context_with_a_planted_wrong_backward_fails():
    s = Scenario("ctx/index-bad", "gradient", {"torch": planted.wrong_by(gather_loss, 1e-4)}, X,
                 contexts=(INDEX, 4))
    assert verdicts(s, ["torch-rev", "torch-func-rev"]) == {"torch-rev": "fail", "torch-func-rev": "fail"}


def masked_loss(x, mask, mode, nothing):
    xp = namespace(x)
    assert nothing is None and mode in ("square", "cube")
    power = 2 if mode == "square" else 3
    return xp.sum(xp.where(mask, x ** power, xp.sin(x)))


MASK = np.array([True, False, True, True, False])


def test_bool_mask_string_and_none_contexts_pass_every_backend():
    s = Scenario("ctx/mask", "gradient", masked_loss, X, contexts=(MASK, "cube", None))
    assert s.contexts[0].dtype == np.bool_ and s.contexts[1:] == ("cube", None)
    all_pass(s)


def test_bool_mask_context_with_a_planted_wrong_backward_fails():
    s = Scenario("ctx/mask-bad", "gradient", {"torch": planted.wrong_by(masked_loss, 1e-4)}, X,
                 contexts=(MASK, "cube", None))
    assert verdicts(s, ["torch-rev", "torch-func-fwd"]) == {"torch-rev": "fail", "torch-func-fwd": "fail"}


def test_float_contexts_are_cast_to_the_cell_dtype_and_integer_ones_are_not():
    seen = []

    def f(x, weights, index):
        seen.append((str(weights.dtype), str(index.dtype)))
        return (x[index] * weights).sum()

    s = Scenario("ctx/dtypes", "gradient", {"torch": f}, X, contexts=(np.array([1.0, 2.0, 3.0, 4.0]), INDEX))
    report = gradci.check([s], backends=["torch-func-rev"], devices=["cpu"], dtypes=["float32"])
    assert report.ok, report.failing()
    # the float32 cell's evaluations, and the float64 reference's (taken through torch here)
    assert set(seen) == {("torch.float32", "torch.int64"), ("torch.float64", "torch.int64")}


# -- framework arrays as x and contexts ---------------------------------------------------------------
def test_torch_and_jax_arrays_as_x_and_contexts_are_taken_once_as_numpy():
    import jax.numpy as jnp
    import torch

    x = torch.tensor([0.3, -0.7, 1.1, 0.5, -0.2], dtype=torch.float32, requires_grad=True)
    s = Scenario("ctx/frameworks", "gradient", gather_loss, x * 1, contexts=(jnp.asarray(INDEX), 4))
    assert isinstance(s.x, np.ndarray) and s.x.dtype == np.float64
    np.testing.assert_array_equal(s.x, x.detach().numpy().astype(np.float64))
    assert isinstance(s.contexts[0], np.ndarray) and s.contexts[0].dtype.kind == "i"
    all_pass(s)


def test_framework_arrays_with_a_planted_wrong_derivative_fail():
    import torch

    s = Scenario("ctx/frameworks-bad", "gradient", {"torch": planted.wrong_by(gather_loss, 1e-4)},
                 torch.tensor(X), contexts=(torch.tensor(INDEX), 4))
    assert verdicts(s, ["torch-rev"]) == {"torch-rev": "fail"}


def test_a_bfloat16_tensor_and_a_jax_float_are_floats():
    import jax.numpy as jnp
    import torch

    s = Scenario("ctx/narrow", "gradient", lambda p: namespace(p["a"]).sum(p["a"] * p["b"]),
                 {"a": torch.tensor([1.5, -2.0], dtype=torch.bfloat16), "b": jnp.asarray([0.5, 0.25])})
    assert s.x["a"].dtype == s.x["b"].dtype == np.float64 and s.x["a"].tolist() == [1.5, -2.0]


# -- pytree Jacobians and Hessians: jax.jacrev's blocks on every backend -------------------------------
def tree_point(size: int = 3):
    g = np.random.default_rng(size)
    return {"a": g.normal(size=size), "b": (g.normal(size=(2, 2)), np.asarray(0.4))}


def vector_function(sin):
    def f(p):
        xp = namespace(p["a"])
        w, s = p["b"]
        return {"u": sin(p["a"]) * s, "v": w @ w[0] * xp.sum(p["a"] ** 2)}

    return f


def scalar_function(sin):
    def f(p):
        xp = namespace(p["a"])
        w, s = p["b"]
        return xp.sum(sin(p["a"]) * s ** 2) + xp.sum(w ** 3) * xp.sum(p["a"] ** 2)

    return f


def implementations(make, torch_sin=None, jax_sin=None):
    import jax.numpy as jnp
    import torch

    return {"numpy": make(np.sin), "torch": make(torch_sin or torch.sin), "jax": make(jax_sin or jnp.sin)}


@pytest.mark.parametrize("size", [3, 12])  # a full reference, and probes (over 16 elements)
def test_pytree_jacobian_passes_every_backend(size):
    all_pass(Scenario(f"tree/jacobian/{size}", "jacobian", implementations(vector_function), tree_point(size)))


@pytest.mark.parametrize("size", [3, 12])
def test_pytree_jacobian_with_one_wrong_block_fails_where_the_rule_is_used(size):
    f = implementations(vector_function, planted.torch_sin(backward_scale=1.01), planted.jax_sin_vjp(scale=0.99))
    cells = statuses(Scenario(f"tree/jacobian-bad/{size}", "jacobian", f, tree_point(size)))
    got = {backend: status for backend, (status, _) in cells.items()}
    assert got == {"torch-rev": "fail", "torch-func-rev": "fail", "torch-func-fwd": "pass",
                   "jax-rev": "fail", "jax-rev-jit": "fail", "jax-fwd": "error",  # custom_vjp: no forward mode
                   "fd": "pass" if size == 3 else "skip"}, cells


@pytest.mark.parametrize("size", [1, 6])  # a full reference (4 elements at most), and probes
def test_pytree_hessian_passes_every_backend(size):
    point = {"a": tree_point(size)["a"], "b": (np.array([[0.2]]), np.asarray(0.4))} if size == 1 else tree_point(size)
    all_pass(Scenario(f"tree/hessian/{size}", "hessian", implementations(scalar_function), point))


@pytest.mark.parametrize("size", [1, 6])
def test_pytree_hessian_with_a_wrong_rule_fails_where_the_rule_is_used(size):
    point = {"a": tree_point(size)["a"], "b": (np.array([[0.2]]), np.asarray(0.4))} if size == 1 else tree_point(size)
    # 10% wrong in jax: a single probe dilutes 1% of one term below float64's tolerance, and jax-fwd,
    # which cannot run a custom_vjp, leaves no forward-mode result to cross-check against
    f = implementations(scalar_function, planted.torch_sin(jvp_scale=1.01), planted.jax_sin_vjp(scale=0.9))
    cells = statuses(Scenario(f"tree/hessian-bad/{size}", "hessian", f, point))
    got = {backend: status for backend, (status, _) in cells.items()}
    # jacfwd of jacfwd uses only the jvp rule; torch.func.jacrev of jacrev and torch.autograd only backward
    assert got == {"torch-rev": "pass", "torch-func-rev": "pass", "torch-func-fwd": "fail",
                   "jax-rev": "fail", "jax-rev-jit": "fail", "jax-fwd": "error",
                   "fd": "pass" if size == 1 else "skip"}, cells


def test_pytree_jacobian_reference_has_jax_jacrev_s_blocks():
    import jax

    get_framework("jax")  # x64, as the engine runs jax
    point = tree_point()
    s = Scenario("tree/jacobian-layout", "jacobian", implementations(vector_function), point)
    _, (reference,) = compute_references(s)
    expected = jax.jacrev(s.f["jax"])(jax.tree_util.tree_map(np.asarray, point))
    assert jax.tree_util.tree_structure(reference.full) == jax.tree_util.tree_structure(expected)
    for got, want in zip(jax.tree_util.tree_leaves(reference.full), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)
    assert reference.full["u"]["b"][0].shape == (3, 2, 2)  # f(x)["u"].shape + x["b"][0].shape


def test_single_array_jacobian_keeps_its_shape():
    s = Scenario("jacobian/array", "jacobian", lambda x: namespace(x).sin(x)[:2, None] * x, np.array([0.1, 0.2, 0.3]))
    _, (reference,) = compute_references(s)
    assert reference.full.shape == (2, 3, 3)
    all_pass(s)


def test_blocks_and_matrix_are_inverse_and_a_transposed_block_does_not_fit():
    rows = {"u": np.zeros((2, 3)), "v": np.zeros(())}
    columns = (np.zeros(4), np.zeros((1, 2)))
    matrix = np.arange(7 * 6, dtype=float).reshape(7, 6)
    blocks = matrix_blocks(matrix, rows, columns)
    assert blocks["u"][1].shape == (2, 3, 1, 2) and blocks["v"][0].shape == (4,)
    np.testing.assert_array_equal(block_matrix(blocks, columns), matrix)
    blocks["u"] = (blocks["u"][0], blocks["u"][1].reshape(2, 3, 2, 1))
    with pytest.raises(ValueError, match="do not end in x's leaf shapes"):
        block_matrix(blocks, columns)


def test_a_wrong_block_layout_fails_against_probes():
    # A backend answering the flat (rows, columns) matrix instead of blocks: same numbers, wrong layout.
    import jax

    get_framework("jax")

    def flat_jacobian(p):
        xp = namespace(p["a"])
        return p["a"] * xp.sum(p["c"])

    point = {"a": np.linspace(0.1, 1.0, 9), "c": np.linspace(-1.0, 1.0, 9)}
    s = Scenario("tree/jacobian-probes", "jacobian", flat_jacobian, point)
    _, (reference,) = compute_references(s)
    assert not reference.is_full
    good = jax.jacrev(flat_jacobian)(point)
    flat = np.concatenate([np.asarray(good["a"]), np.asarray(good["c"])], axis=1)
    tol = tolerance_for("float64")
    assert compare_to_reference(good, reference, tol, "jacobian", x=s.x).ok
    scrambled = {"a": flat.reshape(-1)[:81].reshape(9, 9), "c": flat.reshape(-1)[81:].reshape(9, 9)}
    assert not compare_to_reference(scrambled, reference, tol, "jacobian", x=s.x).ok


def test_forward_and_reverse_disagreeing_in_one_block_element_fail_the_wrong_mode_only():
    # float32, a backward 1% wrong in one element of the [y][a] block of an 80×80 Jacobian: a probe
    # dilutes it, the elementwise agreement of the modes does not, and the reference taken along the
    # disagreeing element (found in the blocks' own layout) decides which mode is wrong.
    tanh = torch_tanh(backward_scale=one_element_wrong)

    def make(tanh):
        return lambda p: {"y": tanh(p["a"]) * (1 + p["b"][0]), "z": p["b"] ** 2}

    point = {"a": np.linspace(-1, 1, 40), "b": np.linspace(0.5, 1.5, 40)}
    s = Scenario("tree/jacobian-modes", "jacobian", {"numpy": make(np.tanh), "torch": make(tanh)}, point)
    report = gradci.check([s], backends=["torch-rev", "torch-func-fwd"], devices=["cpu"], dtypes=["float32"])
    got = {c.backend: (c.status, c.message) for c in report.cells}
    assert {backend: status for backend, (status, _) in got.items()} == {"torch-rev": "fail",
                                                                         "torch-func-fwd": "pass"}, got
    assert "finds this one wrong" in got["torch-rev"][1]


# -- wrt: several positional arguments, some held fixed -------------------------------------------------
A, B, C = np.array([0.3, -0.7, 1.1]), np.array([0.5, 2.0, -1.0]), np.array([1.2, 0.4, -0.6])


def torch_product(grad_a_scale: float = 1.0, grad_b_scale: float = 1.0):
    """sin(a)·b elementwise as an autograd.Function whose backward for a, or for b, can be wrong."""
    import torch

    class SinTimes(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(a, b):
            return torch.sin(a) * b

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)
            ctx.save_for_forward(*inputs)

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            return grad * torch.cos(a) * b * grad_a_scale, grad * torch.sin(a) * grad_b_scale

        @staticmethod
        def jvp(ctx, ta, tb):
            a, b = ctx.saved_tensors
            ta = 0 if ta is None else ta * torch.cos(a) * b * grad_a_scale
            tb = 0 if tb is None else tb * torch.sin(a) * grad_b_scale
            return ta + tb

    def f(a, b, c, offset):
        return (SinTimes.apply(a, b) * c).sum() + offset

    return f


def numpy_product(a, b, c, offset):
    return np.sum(np.sin(a) * b * c) + offset


def product(a, b, c, offset):
    xp = namespace(a)
    return xp.sum(xp.sin(a) * b * c) + offset


def test_wrt_differentiates_the_chosen_arguments_and_holds_the_others():
    s = Scenario("wrt/ac", "gradient", {"numpy": numpy_product, "torch": torch_product()}, (A, B, C),
                 contexts=(0.5,), wrt=(0, 2))
    assert isinstance(s.x, tuple) and len(s.x) == 2
    np.testing.assert_array_equal(s.x[1], C)
    all_pass(s, TORCH + ["fd"])
    _, (reference,) = compute_references(s)
    np.testing.assert_allclose(reference.full[0], np.cos(A) * B * C, rtol=1e-8)
    np.testing.assert_allclose(reference.full[1], np.sin(A) * B, rtol=1e-8)


def test_wrt_a_planted_wrong_derivative_in_a_differentiated_argument_fails():
    s = Scenario("wrt/a-bad", "gradient", {"numpy": numpy_product, "torch": torch_product(grad_a_scale=1.001)},
                 (A, B, C), contexts=(0.5,), wrt=(0, 2))
    assert verdicts(s, TORCH) == {"torch-rev": "fail", "torch-func-rev": "fail", "torch-func-fwd": "fail"}


def test_wrt_a_wrong_derivative_in_a_held_argument_does_not_matter():
    s = Scenario("wrt/b-bad", "gradient", {"numpy": numpy_product, "torch": torch_product(grad_b_scale=1.5)},
                 (A, B, C), contexts=(0.5,), wrt=(0, 2))
    all_pass(s, TORCH)
    # ...while differentiating with respect to b itself finds it
    s_b = Scenario("wrt/b-bad-chosen", "gradient", {"numpy": numpy_product, "torch": torch_product(grad_b_scale=1.5)},
                   (A, B, C), contexts=(0.5,), wrt=1)
    assert isinstance(s_b.x, np.ndarray)
    assert verdicts(s_b, TORCH) == {"torch-rev": "fail", "torch-func-rev": "fail", "torch-func-fwd": "fail"}


def test_wrt_holds_index_arrays_as_integers_on_every_backend():
    def f(x, index, weights):
        xp = namespace(x)
        return xp.sum(xp.take(x, index, axis=0) * weights)

    s = Scenario("wrt/index", "vjp", lambda x, index, w: namespace(x).take(x, index, axis=0) * w ** 2,
                 (X, INDEX, np.array([1.0, 2.0, 3.0, 4.0])), wrt=(0, 2))
    assert s.contexts[0].dtype == np.int64
    all_pass(s)
    all_pass(Scenario("wrt/index-gradient", "gradient", f, (X, INDEX, np.ones(4)), wrt=0))


def test_wrt_is_in_the_fingerprint_and_a_copy_keeps_it():
    import dataclasses

    first = Scenario("wrt/fp", "gradient", product, (A, A, A), contexts=(0.5,), wrt=0)
    second = Scenario("wrt/fp", "gradient", product, (A, A, A), contexts=(0.5,), wrt=1)
    again = Scenario("wrt/fp", "gradient", product, (A, A, A), contexts=(0.5,), wrt=0)
    assert first.fingerprint() != second.fingerprint() and first.fingerprint() == again.fingerprint()
    copy = dataclasses.replace(first, name="wrt/fp-copy")
    assert copy.implementation("numpy")(copy.x, *copy.contexts) == product(A, A, A, 0.5)


def test_wrt_reference_callable_takes_every_argument():
    def reference(a, b, c, offset):
        return np.sin(a) * c

    s = Scenario("wrt/analytic", "gradient", product, (A, B, C), contexts=(0.5,), wrt=1, reference=reference)
    all_pass(s, ["fd", "torch-rev", "jax-rev"])
    wrong = Scenario("wrt/analytic-bad", "gradient", product, (A, B, C), contexts=(0.5,), wrt=1,
                     reference=lambda a, b, c, offset: np.sin(a) * c * 1.001)
    assert verdicts(wrong, ["fd"]) == {"fd": "fail"}


# -- one-line errors naming what was given and what was expected ---------------------------------------
@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(operator="jacobian", x=np.arange(3)),
     "jacobian needs x to be a float array or a pytree of float arrays; got int64 array of shape (3,)"),
    (dict(operator="gradient", x={"a": np.ones(2), "n": np.array([1, 2])}),
     "gradient needs x to be a float array or a pytree of float arrays; got int64 array of shape (2,) at x['n']"),
    (dict(operator="gradient", x=[np.ones(2), "abc"]),
     "got str 'abc' at x[1]"),
    (dict(operator="derivative", x=np.ones(3)),
     "derivative needs x to be a scalar (a float or a 0-d float array); got float64 array of shape (3,)"),
    (dict(operator="derivative", x=True), "got bool True"),
    (dict(operator="gradient", x={}), "got an empty dict"),
    (dict(operator="jvp", x=np.ones(2), tangent=np.array([1, 0])),
     "jvp needs the tangent to be float arrays shaped like x; got int64 array of shape (2,)"),
    (dict(operator="gradiant", x=np.ones(2)), "unknown operator 'gradiant'; expected one of derivative,"),
    (dict(operator="gradient", x=np.ones(2), f={"tensorflow": np.sum}),
     "f has unknown framework keys ['tensorflow']; expected some of jax, torch, numpy"),
    (dict(operator="gradient", x=np.ones(2), f={"torch": "sum"}), "f['torch'] must be a callable"),
    (dict(operator="gradient", x=np.ones(2), f=3), "f must be a callable (or f a dict of callables by "
                                                      "framework); got int 3"),
    (dict(operator="gradient", x=(A, B), wrt=2), "wrt=2 names positions in x; 2 is not one of 0..1"),
    (dict(operator="gradient", x=(A, B), wrt=(0, 0)), "wrt=(0, 0) names an argument twice"),
    (dict(operator="gradient", x=(A, B), wrt=()), "wrt must be an argument's position or a non-empty tuple"),
    (dict(operator="gradient", x=A, wrt=0), "wrt=0 needs x to be the tuple of f's positional arguments; "
                                            "got float64 array of shape (3,)"),
    (dict(operator="gradient", x=(A, np.arange(3)), wrt=(0, 1)), "got int64 array of shape (3,) at x[1]"),
    (dict(operator="gradient", x=A, contexts=np.ones(2)), "contexts must be a tuple of f's arguments after x; "
                                                          "got float64 array of shape (2,)"),
])
def test_errors_are_one_line_with_the_name_what_was_given_and_what_was_expected(kwargs, says):
    kwargs = {"f": np.sum, **kwargs}
    with pytest.raises((ValueError, TypeError)) as raised:
        Scenario("broken/one", **kwargs)
    message = str(raised.value)
    assert message.startswith("scenario 'broken/one': ") and "\n" not in message
    assert says in message, message


def test_a_python_int_in_x_is_a_float():
    s = Scenario("int-x", "derivative", lambda x: x ** 3, 2)
    assert s.x.dtype == np.float64 and s.x.shape == ()
