"""The built-in scenario library's claims: size, coverage, naming, identical weights across frameworks,
derived variants, well-placed input points, and a representative subset passing the engine."""
from __future__ import annotations

import collections
import subprocess
import sys

import numpy as np
import optree
import pytest

import gradci
from gradci import OPERATORS, Tangents
from gradci.scenarios.library import default, everything, mlp_100k, select
from gradci.scenarios.library._common import evaluate
from gradci.scenarios.library.nn import layer_scenario
from gradci.scenarios.library.nn_layers import LAYERS, MLP_100K

FAMILIES = ("elementary", "pytree", "nn", "linalg", "control-flow", "delicate", "sparse", "complex")
FLUX_LAYERS = {"dense", "chain", "scale", "skip-connection", "conv1d", "conv2d", "conv-meanpool", "maxout",
               "bilinear", "conv-transpose", "rnn", "lstm", "gru", "layer-norm", "batch-norm", "attention"}
VARIANTS = {"closure", "batched"}


@pytest.fixture(scope="module")
def library():
    return default()


@pytest.fixture(scope="module")
def by_name(library):
    return {s.name: s for s in library}


def _is_base(scenario):
    return not any(tag.startswith("variant:") for tag in scenario.tags)


def test_library_is_large_and_names_are_unique(library):
    assert len(library) >= 150
    names = [s.name for s in library]
    assert len(set(names)) == len(names), [n for n, k in collections.Counter(names).items() if k > 1]


def test_names_say_family_what_operator_variant(library):
    for s in library:
        parts = s.name.split("/")
        assert len(parts) in (3, 4), s.name
        family, _, operator, *variant = parts
        assert family in FAMILIES and family in s.tags, s.name
        assert operator == s.operator, s.name
        assert all(v in VARIANTS and f"variant:{v}" in s.tags for v in variant), s.name


def test_every_operator_and_family_is_covered(library):
    assert {s.operator for s in library} == set(OPERATORS)
    assert set(collections.Counter(s.name.split("/")[0] for s in library)) == set(FAMILIES)
    elementary = {s.operator for s in library if s.tags[0] == "elementary" and s.x.ndim == 0}
    assert elementary == set(OPERATORS), "number inputs meet every operator"


def test_select_filters_by_tags(library):
    nn = select("nn")
    assert nn and all("nn" in s.tags for s in nn)
    assert {s.name for s in select("nn", scenarios=library)} < {s.name for s in library}
    second_order_base = select(["linalg", "second-order"], exclude="variant:batched")
    assert second_order_base and all(s.operator in ("hvp", "hessian") and "variant:batched" not in s.tags
                                     for s in second_order_base)
    assert [s.name for s in select("large")] == [s.name for s in everything() if "large" in s.tags] != []
    assert not any("large" in s.tags for s in library)


def test_pytree_inputs_meet_every_pytree_operator(library):
    tree_inputs = {(type(s.x).__name__, s.operator) for s in library if not isinstance(s.x, np.ndarray)}
    for operator in ("gradient", "value_and_gradient", "jvp", "vjp", "hvp"):
        assert {kind for kind, op in tree_inputs if op == operator} >= {"dict", "list", "tuple"}, operator


def test_every_flux_layer_is_a_gradient_scenario_in_torch_and_jax(library):
    nn = {s.name.split("/")[1]: s for s in library if s.tags[0] == "nn" and s.operator == "gradient"
          and _is_base(s)}
    assert set(nn) >= FLUX_LAYERS
    for name, s in nn.items():
        assert set(s.f) == {"torch", "jax"}, name
        assert isinstance(s.x, dict) and all(leaf.dtype == np.float64 for leaf in s.x.values()), name
        assert sum(leaf.size for leaf in s.x.values()) <= 500, f"{name}: keep the family small"


@pytest.mark.parametrize("layer", LAYERS + (MLP_100K,), ids=lambda layer: layer.name)
def test_torch_and_jax_losses_agree_at_float64(layer):
    # "Identical weights": one parameter draw, both frameworks, the same loss to rounding.
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    from gradci.scenarios.adapters import get_framework

    s = layer_scenario(layer)
    values, shapes = {}, {}
    for framework in ("torch", "jax"):
        adapter = get_framework(framework)
        params, inputs, *rest = [adapter.to_framework(t, "float64", "cpu") for t in (s.x, *s.contexts)]
        buffers = rest[1] if len(rest) > 1 else {}
        shapes[framework] = tuple(getattr(layer, framework)(params, inputs, buffers).shape)
        values[framework] = float(adapter.to_numpy(s.f[framework](params, inputs, *rest)))
    assert shapes["torch"] == shapes["jax"] == layer.output_shape
    assert values["torch"] == pytest.approx(values["jax"], rel=1e-10, abs=1e-12)
    assert np.isfinite(values["torch"]) and values["torch"] > 0


def test_large_mlp_has_about_100k_parameters():
    s = mlp_100k()
    count = sum(leaf.size for leaf in optree.tree_leaves(s.x))
    assert 90_000 <= count <= 110_000 and "large" in s.tags and s.operator == "gradient"


def test_every_scenario_evaluates_finitely_in_float64(library):
    for s in library:
        leaves = optree.tree_leaves(evaluate(s))
        assert leaves and all(np.all(np.isfinite(leaf)) for leaf in leaves), s.name


def test_scalar_output_operators_get_0d_outputs(library):
    for s in library:
        if s.operator in ("gradient", "value_and_gradient", "hvp", "hessian"):
            assert np.shape(evaluate(s)) == (), s.name


def test_closure_twins_compute_what_their_context_twins_compute(library, by_name):
    closures = [s for s in library if "variant:closure" in s.tags]
    with_contexts = [s for s in library if s.contexts and _is_base(s)]
    assert {s.name for s in closures} == {f"{s.name}/closure" for s in with_contexts}
    for closed in closures:
        base = by_name[closed.name.removesuffix("/closure")]
        assert closed.contexts == () and closed.operator == base.operator
        got, want = evaluate(closed), evaluate(base)
        optree.tree_map(lambda a, b: np.testing.assert_array_equal(a, b, err_msg=closed.name), got, want)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.slow
def test_closures_cast_captured_data_like_the_input(library, by_name, framework):
    # Captured numpy float64 constants must follow x into float32: otherwise torch raises on mixed
    # dtypes and jax silently promotes the result to float64.
    pytest.importorskip(framework)
    from gradci.scenarios.adapters import get_framework

    adapter = get_framework(framework)
    closures = [s for s in library if "variant:closure" in s.tags and s.implementation(framework)]
    for closed in closures:
        base = by_name[closed.name.removesuffix("/closure")]
        x32 = adapter.to_framework(closed.x, "float32", "cpu")
        contexts32 = [adapter.to_framework(c, "float32", "cpu") for c in base.contexts]
        got = closed.implementation(framework)(x32)
        want = base.implementation(framework)(x32, *contexts32)
        for a, b in zip(optree.tree_leaves(got), optree.tree_leaves(want)):
            assert str(a.dtype).endswith("float32"), closed.name
            np.testing.assert_allclose(adapter.to_numpy(a), adapter.to_numpy(b), rtol=1e-6, err_msg=closed.name)


def test_batched_twins_carry_three_tangents_shaped_like_one(library, by_name):
    batched = [s for s in library if "variant:batched" in s.tags]
    takes_tangent = [s for s in library if s.operator in ("jvp", "vjp", "hvp") and _is_base(s)]
    assert {s.name for s in batched} == {f"{s.name}/batched" for s in takes_tangent}
    for s in batched:
        assert isinstance(s.tangent, Tangents) and len(s.tangent) == 3, s.name
        like = s.x if s.operator != "vjp" else evaluate(by_name[s.name.removesuffix("/batched")])
        want = optree.tree_structure(like), [np.shape(leaf) for leaf in optree.tree_leaves(like)]
        for t in s.tangent:
            assert (optree.tree_structure(t), [np.shape(leaf) for leaf in optree.tree_leaves(t)]) == want, s.name
        first, second = (np.concatenate([np.ravel(leaf) for leaf in optree.tree_leaves(t)]) for t in s.tangent[:2])
        assert first.size == 0 or not np.allclose(first, second), s.name  # tangents of no elements are all alike


def test_library_is_deterministic():
    first, second = default(), default()
    assert [s.fingerprint() for s in first] == [s.fingerprint() for s in second]


def test_derived_functions_keep_fingerprints_tied_to_their_code(library):
    # Generic wrappers (sum of an elementwise function, square loss of a layer, closures) must not all
    # hash alike, or editing one function would leave a stale cached reference. The code hash covers
    # the source and what the closure captured (xp.sin and xp.cos share one lambda, not one name).
    import inspect

    from gradci.scenarios.authoring.fingerprints import fingerprint_of

    def code_hash(fn):
        return fingerprint_of(fn)[0]

    unary = [s for s in library if "unary" in s.tags]
    assert len({code_hash(s.f) for s in unary}) == len(unary)
    losses = [s for s in library if s.tags[0] == "nn" and s.operator == "gradient" and _is_base(s)]
    assert len({inspect.getsource(s.f["torch"]) for s in losses}) > len(losses) // 2


def test_maxout_inputs_are_not_at_ties():
    # max is not differentiable where two pieces tie; finite differences need a clear winner.
    layer = next(layer for layer in LAYERS if layer.name == "maxout")
    s = layer_scenario(layer)
    pieces = np.einsum("bi,koi->kbo", s.contexts[0], s.x["w"]) + s.x["b"][:, None, :]
    top_two = np.sort(pieces, axis=0)[-2:]
    assert np.min(top_two[1] - top_two[0]) > 0.05
    assert len(set(np.argmax(pieces, axis=0).ravel())) > 1, "every piece should win somewhere"


def test_spectral_scenarios_have_distinct_eigen_and_singular_values(library):
    from gradci.scenarios.library.linalg import spd, spread_symmetric

    for s in library:
        if s.name.startswith(("linalg/eigvalsh/", "linalg/eigh-vectors/")):
            gaps = np.diff(np.linalg.eigvalsh(spread_symmetric(s.x)))
            assert gaps.min() > 1.0, s.name
        if s.name.startswith(("linalg/svdvals/", "linalg/qr/")):
            singular = np.linalg.svd(s.x, compute_uv=False)
            assert np.diff(-singular).min() > 0.3 and singular.min() > 0.3, s.name
        if s.name.startswith(("linalg/solve/", "linalg/det/", "linalg/cholesky")):
            assert np.linalg.cond(spd(s.x)) < 100, s.name


def test_kinked_functions_are_evaluated_away_from_their_kinks(library):
    kinked = ("abs", "relu", "sign-times-square", "reciprocal", "where", "where-sum")
    for s in library:
        what = s.name.split("/")[1]
        if what in kinked:  # complex x is kept as pairs: its kink is at |z| = 0
            magnitude = np.abs(s.complex_parts.joined(s.x) if s.complex_parts else s.x)
            assert np.min(magnitude) > 0.1, s.name
        if what in ("maximum", "minimum", "atan2"):
            assert np.min(np.abs(s.x[0] - s.x[1])) > 0.1, s.name
        if what == "sort":
            assert np.min(np.diff(np.sort(s.x))) > 0.1, s.name


def test_where_trick_is_expected_to_fail_only_in_reverse_mode(by_name):
    trick = by_name["delicate/sinc-where/gradient"]
    assert 0.0 in trick.x and [expected.backend for expected in trick.xfail] == ["*-rev*"]
    assert not by_name["delicate/sinc-double-where/gradient"].xfail
    assert not by_name["delicate/sinc-where/jvp"].xfail


@pytest.mark.slow
def test_sinc_hessians_have_an_exact_reference_that_decides_every_cell(by_name):
    import jax
    import jax.numpy as jnp

    from gradci.scenarios.library.delicate import sinc_hvp

    jax.config.update("jax_enable_x64", True)
    x, v = np.array([0.0, 0.3, -2.0, 5.0]), np.array([1.0, -1.0, 0.5, 3.0])
    second = jax.vmap(jax.grad(jax.grad(lambda t: jnp.sinc(t / jnp.pi))))(x)
    np.testing.assert_allclose(sinc_hvp(x, v), np.asarray(second) * v, rtol=1e-12, atol=1e-15)
    tiny = np.array([1e-4, -3e-4])  # where the closed form cancels (jax's too): the series
    np.testing.assert_allclose(sinc_hvp(tiny, np.ones(2)), -1 / 3 + tiny ** 2 / 10 - tiny ** 4 / 280, rtol=1e-15)
    # Finite differences straddling the where-trick's zero reached ~1e-8: the batched hvp's fd cell
    # was "reference unreliable" (an error in the built-in library) before the exact reference.
    names = [f"delicate/{what}/hvp{variant}" for what in ("sinc-where", "sinc-double-where")
             for variant in ("", "/batched")]
    cells = gradci.check([by_name[name] for name in names], backends=["fd", "jax-rev", "torch-rev"],
                            devices=["cpu"], dtypes=["float64"]).cells
    assert {(c.backend, c.status) for c in cells} == {("fd", "pass"), ("jax-rev", "xfail"), ("torch-rev", "xfail")}


def test_library_imports_without_torch_or_jax():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['jax'] = None\n"
            "from gradci.scenarios import library as L\n"
            "s = L.default(); assert len(s) >= 150; print(len(s))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


# One scenario per family, plus each variant: the library and the engine agree on all of them.
REPRESENTATIVE = (
    "elementary/num-to-mat/second_derivative",
    "elementary/vec-to-vec-affine/jvp/closure",
    "pytree/dict-to-list/vjp/batched",
    "pytree/dict-to-num/gradient",
    "nn/bilinear/gradient",
    "nn/scale/gradient/closure",
    "linalg/eigh-vectors/gradient/closure",
    "control-flow/scan-states/vjp",
    "control-flow/cond/jvp",
    "delicate/sinc-where/gradient",
    "delicate/sinc-double-where/gradient",
)


@pytest.mark.slow
def test_representative_subset_passes_the_engine(by_name):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    report = gradci.check([by_name[name] for name in REPRESENTATIVE], devices=["cpu"],
                             dtypes=["float64", "float32"])
    counts = report.counts()
    bad = [f"{c.scenario} {c.backend} {c.dtype}: {c.status} {c.message}" for c in report.failing()]
    assert not bad, "\n".join(bad)
    assert counts["pass"] > 0.8 * len(report.cells)
    trick = [c for c in report.cells if c.scenario == "delicate/sinc-where/gradient"]
    assert {c.status for c in trick if c.mode == "reverse"} == {"xfail"}
    assert {c.status for c in trick if c.mode != "reverse"} <= {"pass", "skip"}
