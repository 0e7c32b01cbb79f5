"""Messages a user can act on: where in their code an exception came from, and which element of
which block of a pytree failed."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci._testing.planted import torch_old_style_power
from gradci.scenarios.verdict.against_reference import element_name

PROJECT = Path(__file__).resolve().parent.parent.parent / "data" / "projects" / "user_frames"


@pytest.fixture
def user_model(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(PROJECT))  # as the runner puts a repository's root first
    monkeypatch.delitem(sys.modules, "pkg", raising=False)
    monkeypatch.delitem(sys.modules, "pkg.model", raising=False)
    from pkg import model
    return model


def test_an_exception_in_the_reference_names_the_users_file_and_line(user_model):
    report = gradci.check([Scenario("bad", "gradient", user_model.loss, np.array([1.0, 2.0]))],
                          backends=["torch-rev"], devices=["cpu"], dtypes=["float64"])
    (cell,) = report.cells
    assert cell.status == "error"
    assert cell.message.startswith("reference failed: IndexError")
    assert "(at pkg/model.py:6 in helper)" in cell.message, cell.message


def test_a_failing_element_is_named_by_its_block_and_index():
    tree = {"bias": np.zeros(2), "weight": np.zeros((2, 3))}
    assert element_name(tree, 0) == "element 0 of block ['bias']"
    assert element_name(tree, 2 + 4) == "element (1, 1) of block ['weight']"
    assert element_name(np.zeros(3), 2) == "element 2"
    assert element_name((np.zeros(()), np.zeros(2)), 0) == "the value of block [0]"


def test_a_wrong_gradient_of_a_dict_input_names_the_key():
    torch = pytest.importorskip("torch")

    scaled = torch_old_style_power(2, backward_scale=1.5)  # the weight's gradient is off by 1.5x

    def f(params):
        return torch.sum(scaled(params["weight"])) + torch.sum(params["bias"] ** 2)

    x = {"bias": np.array([0.1, 0.2]), "weight": np.array([[0.5, -0.3], [0.2, 0.9]])}
    (cell,) = gradci.check([Scenario("dict", "gradient", {"torch": f}, x)], backends=["torch-rev"], devices=["cpu"],
                           dtypes=["float64"]).cells
    assert cell.status == "fail"
    assert "of block ['weight']" in cell.message, cell.message


def test_a_float32_cell_that_computed_in_float64_says_so_in_both_frameworks():
    torch = pytest.importorskip("torch")
    import jax.numpy as jnp

    def torch_promoted(x):  # computes in float64 inside, returns float32
        return torch.sum(torch.sin(x.to(torch.float64) * 1.5).to(x.dtype))

    def jax_promoted(x):
        return jnp.sum(jnp.sin(x * jnp.asarray(1.5, dtype=jnp.float64)).astype(x.dtype))

    def torch_clean(x):
        return torch.sum(torch.sin(x * 1.5))

    def jax_clean(x):
        return jnp.sum(jnp.sin(x * 1.5))

    x = np.array([0.1, 0.2, 0.3])
    promoted = Scenario("promoted", "gradient", {"torch": torch_promoted, "jax": jax_promoted}, x)
    clean = Scenario("clean", "gradient", {"torch": torch_clean, "jax": jax_clean}, x)
    cells = gradci.check([promoted, clean], backends=["torch-rev", "jax-rev"], devices=["cpu"], dtypes=["float32"]).cells
    for cell in cells:
        warned = "f computes in float64 for float32 inputs" in cell.warnings
        assert warned == (cell.scenario == "promoted"), cell
        assert cell.status == "pass", cell


def test_a_tuple_x_for_a_function_of_several_arguments_is_a_hint_when_the_scenario_is_built():
    from gradci.scenarios.contract.errors import ScenarioInputError

    def f(a, b):
        return (a * b).sum()

    x = (np.ones(2), np.full(2, 2.0))
    with pytest.raises(ScenarioInputError, match=r"pass wrt=\(0, 1\)"):
        Scenario("pair", "gradient", f, x)
    Scenario("pair", "gradient", f, x, wrt=(0, 1))                      # the fix the hint names
    Scenario("pair", "gradient", lambda pair: (pair[0] * pair[1]).sum(), x)  # one argument taking the tuple
    Scenario("pair", "gradient", f, np.ones(2), contexts=(np.ones(2),))     # the rest given as contexts


def test_a_single_framework_scenario_makes_no_cells_for_the_other_frameworks_backends():
    """A jax-only scenario whose reference fails: its jax cells are errors; torch's backends make no
    cell of it, only a count. Asked for one anyway (a job planned by an older planner), the torch
    cell is a skip decided before the reference is made, so the failing reference is not charged to it."""
    pytest.importorskip("torch")
    import jax.numpy as jnp

    from gradci.scenarios.backends import get_backend
    from gradci.scenarios.check import check_scenario
    from gradci.scenarios.reference.answer import ReferenceCache

    def broken_reference(x):
        raise ValueError("no closed form here")

    s = Scenario("jax-only", "gradient", {"jax": lambda x: jnp.sum(x ** 2)}, np.array([1.0, 2.0]),
                 reference=broken_reference)
    report = gradci.check([s], backends=["jax-rev", "torch-rev", "torch-func-rev"], devices=["cpu"],
                          dtypes=["float64", "float32"])
    assert {c.backend for c in report.cells} == {"jax-rev"}
    assert all(c.status == "error" and "no closed form here" in c.message for c in report.cells)
    assert report.omitted == 2 * 2  # two torch backends × two dtypes

    both = Scenario("both", "gradient", {"jax": lambda x: jnp.sum(x ** 2), "torch": lambda x: (x ** 2).sum()},
                    np.array([1.0, 2.0]))
    twin = gradci.check([both], backends=["jax-rev", "torch-rev"], devices=["cpu"], dtypes=["float64"])
    assert {c.backend: c.status for c in twin.cells} == {"jax-rev": "pass", "torch-rev": "pass"}
    assert twin.omitted == 0

    asked = check_scenario(s, [get_backend("jax-rev"), get_backend("torch-rev")], ["cpu"], ["float64"],
                           ReferenceCache())
    cells = {c.backend: c for c in asked}
    assert cells["jax-rev"].status == "error"
    assert cells["torch-rev"].status == "skip" and "no torch implementation" in cells["torch-rev"].message


def test_a_framework_error_that_does_not_say_what_to_do_gets_a_hint():
    torch = pytest.importorskip("torch")

    class OldStyle(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    s = Scenario("old", "gradient", {"torch": lambda x: torch.sum(OldStyle.apply(x))}, np.array([1.0]))
    (cell,) = gradci.check([s], backends=["torch-func-rev"], devices=["cpu"], dtypes=["float64"]).cells
    assert cell.status == "error"
    assert "setup_context" in cell.message and "[[expect]] in gradci.toml" in cell.message, cell.message


def test_a_non_finite_probed_result_names_its_elements():
    from gradci.scenarios.numerics.reference_values import Probe
    from gradci.scenarios.numerics.tolerances import tolerance_for
    from gradci.scenarios.verdict.against_reference import compare_probes

    result = np.array([1.0, np.nan, 2.0, np.inf])
    probe = Probe(u=np.full(4, 0.5), w=None, value=1.5, error=1e-12)
    comparison = compare_probes(result, [probe], tolerance_for("float64"), 4)
    assert not comparison.ok
    assert "2 of 4 elements are NaN or infinite (the first is element 1)" in comparison.message
    assert "where the reference is finite" in comparison.message


def test_an_error_cell_keeps_the_whole_exception_text_bounded():
    def raises(x):
        raise ValueError("the first line\n" + "\n".join(f"the reason, line {i}" for i in range(2000)))

    (cell,) = gradci.check([Scenario("multi-line", "gradient", raises, np.array([1.0]))], backends=["fd"],
                           devices=["cpu"], dtypes=["float64"]).cells
    assert cell.status == "error" and "the first line" in cell.message and "line 3" not in cell.message
    assert cell.detail.startswith("ValueError: the first line\nthe reason, line 0\nthe reason, line 1")
    assert len(cell.detail) <= 4096 and cell.detail.endswith("(truncated)")
