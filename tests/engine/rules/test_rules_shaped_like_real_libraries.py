"""Rules written as real libraries write them, which rule coverage and detection power must see as rules.

Found by running gradci on entmax, jaxopt and others as their own repositories
(bench/real_libraries/as_repositories.py): entmax's loss Functions share their base class's
``backward`` (a subclass no scenario calls was counted as exercised, its base's lines having run for
another subclass); jaxopt's ``custom_root`` makes its ``jax.custom_vjp`` inside a function, anew on
each call (it was in no module, so no rule was found, and no plant could reach it).
"""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

from gradci.scenarios.authoring.project import load_project, load_scenarios
from gradci.scenarios.check import check_scenario, resolve_backends
from gradci.scenarios.power.measure import measure_power
from gradci.scenarios.reference.answer import ReferenceCache
from gradci.scenarios.rules.discovery import CUSTOM_VJP
from gradci.scenarios.rules.power import CAUGHT, NOT_PLANTED, SCALE, output_name
from gradci.scenarios.rules.records import CellRules
from gradci.scenarios.rules.summary import NOT_EXERCISED, summarize
from gradci.scenarios.rules.tracing import RuleTracer, tracing

OPS = '''
import jax
import torch


class _GenericLoss(torch.autograd.Function):
    """entmax's _GenericLossFunction: the subclasses' forward calls it; their backward is this one."""

    @classmethod
    def forward(cls, ctx, x, power):
        ctx.save_for_backward(x)
        ctx.power = power
        return (x ** power).sum()

    @classmethod
    def backward(cls, ctx, grad):
        (x,) = ctx.saved_tensors
        return (grad * ctx.power * x ** (ctx.power - 1),) + (None,) * cls.n_fwd_args  # the subclass's


class SquareLoss(_GenericLoss):
    n_fwd_args = 0

    @classmethod
    def forward(cls, ctx, x):
        return super().forward(ctx, x, 2.0)


class CubeLoss(_GenericLoss):  # no scenario calls it
    n_fwd_args = 0

    @classmethod
    def forward(cls, ctx, x):
        return super().forward(ctx, x, 3.0)


def square_loss(x):
    return SquareLoss.apply(x)


class Stitch(torch.autograd.Function):
    """torchdiffeq's _StitchGradient: its forward runs inside a solve made under no_grad."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g


def solved_square(x):
    with torch.no_grad():
        correction = Stitch.apply(x) * 0.0
    return (x * x + correction).sum()


@jax.custom_jvp
def softplus(x):
    return jax.numpy.logaddexp(x, 0.0)


@softplus.defjvp
def softplus_jvp(primals, tangents):
    """optax's and lineax's custom_jvp rules: jax transposes them for reverse mode."""
    (x,), (t,) = primals, tangents
    return softplus(x), t * jax.nn.sigmoid(x)


def softplus_sum(x):
    return (softplus(x) * jax.numpy.arange(1.0, 4.0)).sum()


def per_call_square_sum(x):
    """jaxopt's custom_root: the custom_vjp is made inside the function, anew on each call."""

    @jax.custom_vjp
    def square(v):
        return v * v

    def square_fwd(v):
        return v * v, v

    def square_bwd(v, g):
        return (2.0 * g * v,)

    square.defvjp(square_fwd, square_bwd)
    return square(x).sum()
'''
SCENARIOS = '''
import numpy as np

from gradci import Scenario
from realshapes.ops import per_call_square_sum, softplus_sum, solved_square, square_loss


def scenarios():
    x = np.array([0.5, 1.0, 2.0])
    return [Scenario("loss/gradient", "gradient", {"torch": square_loss}, x),
            Scenario("percall/gradient", "gradient", {"jax": per_call_square_sum}, x),
            Scenario("jvprule/gradient", "gradient", {"jax": softplus_sum}, x),
            Scenario("nograd/gradient", "gradient", {"torch": solved_square}, x)]
'''
OPS_FILE = "realshapes/ops.py"


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    (root / "realshapes").mkdir(parents=True)
    (root / "realshapes" / "__init__.py").write_text("")
    (root / "realshapes" / "ops.py").write_text(textwrap.dedent(OPS))
    (root / "realshapes" / "scenarios.py").write_text(textwrap.dedent(SCENARIOS))
    (root / "gradci.toml").write_text('[scenarios]\nmodules = ["realshapes.scenarios"]\n')
    scenarios = {s.name: s for s in load_scenarios(load_project(root))}
    yield root, scenarios
    for name in [name for name in sys.modules if name == "realshapes" or name.startswith("realshapes.")]:
        del sys.modules[name]


def check(root: Path, scenario, backends: list[str], tracer: RuleTracer, references: ReferenceCache | None = None):
    with tracing(tracer):
        return check_scenario(scenario, resolve_backends(backends), ["cpu"], ["float64"],
                              references or ReferenceCache())


def test_an_inherited_backward_counts_only_for_the_subclass_that_ran_it(project):
    root, scenarios = project
    tracer = RuleTracer(root)
    cells = check(root, scenarios["loss/gradient"], ["torch-rev"], tracer)
    rules = {rule.name: rule for rule in tracer.rules()}
    cube, square = rules["CubeLoss"], rules["SquareLoss"]
    backward = cube.method("backward")
    assert backward is not None and backward.inherited and not cube.method("forward").inherited
    records = {cell.key: tracer.take(cell.key, list(rules.values())) for cell in cells}
    [record] = records.values()
    assert record.rules[square.id] == ["forward", "backward"]
    assert cube.id not in record.rules  # its base's backward ran, for SquareLoss
    findings = {f.rule.name: f.text for f in summarize(list(rules.values()), [(c, records[c.key]) for c in cells])
                .findings()}
    assert findings.get("CubeLoss") == NOT_EXERCISED and "SquareLoss" not in findings
    # the base class ran its own forward (through super()): it is exercised, as the code it holds is
    assert "_GenericLoss" not in findings


def test_a_custom_vjp_made_on_each_call_is_a_rule_and_its_cells_record_it(project):
    root, scenarios = project
    tracer = RuleTracer(root)
    cells = check(root, scenarios["percall/gradient"], ["jax-rev", "jax-rev-jit"], tracer)
    rules = [rule for rule in tracer.rules() if rule.kind == CUSTOM_VJP]
    assert [(r.name, r.file, [m.name for m in r.methods]) for r in rules] == [
        ("per_call_square_sum.<locals>.square", OPS_FILE, ["fun", "fwd", "bwd"])]
    for cell in cells:
        ran = tracer.take(cell.key, rules).rules.get(rules[0].id, [])
        assert {"fwd", "bwd"} <= set(ran), (cell.backend, ran)  # reverse mode runs fwd, not fun


def test_a_plant_reaches_a_custom_vjp_made_on_each_call(project):
    root, scenarios = project
    tracer, references = RuleTracer(root), ReferenceCache()
    backends = resolve_backends(["jax-rev", "jax-rev-jit"])
    cells = check(root, scenarios["percall/gradient"], ["jax-rev", "jax-rev-jit"], tracer, references)
    rules = tracer.rules()
    records = {cell.key: CellRules.of(tracer.lines(cell.key), rules) for cell in cells}
    powers = measure_power(scenarios["percall/gradient"], cells, records, rules, root, backends, references)
    for cell in cells:
        scale = next(p for p in powers[cell.key].plants if p.kind == SCALE)
        assert scale.outcome == CAUGHT and scale.smallest_delta is not None and scale.smallest_delta <= 1e-5, \
            (cell.backend, scale)
        assert all(p.outcome != NOT_PLANTED for p in powers[cell.key].plants)


def test_a_custom_jvp_rule_planted_stays_linear_and_reverse_mode_cells_catch_it(project):
    """A plant whose changed entry depends on the tangent is not linear: jax cannot transpose it."""
    root, scenarios = project
    tracer, references = RuleTracer(root), ReferenceCache()
    names = ["jax-rev", "jax-fwd", "jax-rev-jit"]
    cells = check(root, scenarios["jvprule/gradient"], names, tracer, references)
    rules = tracer.rules()
    records = {cell.key: CellRules.of(tracer.lines(cell.key), rules) for cell in cells}
    powers = measure_power(scenarios["jvprule/gradient"], cells, records, rules, root, resolve_backends(names),
                           references)
    for cell in cells:
        outcomes = {p.kind: (p.outcome, p.note[:200]) for p in powers[cell.key].plants}
        assert outcomes[SCALE][0] == CAUGHT and outcomes["sign"][0] == CAUGHT, (cell.backend, outcomes)
        scale = next(p for p in powers[cell.key].plants if p.kind == SCALE)
        assert scale.smallest_delta is not None and scale.smallest_delta <= 1e-5, (cell.backend, scale)


def test_an_output_past_the_tenth_is_named_once():
    """torchdiffeq's adjoint backward returns 16 gradients: "`backward`'s output #15 output" read badly."""
    assert output_name("backward", 14, 16) == "`backward`'s output #15"
    assert output_name("backward", 1, 16) == "`backward`'s second output"
    assert output_name("bwd", 0, 1) == "`bwd`'s output"


def test_a_cell_that_ran_no_derivative_method_gets_no_power_record(project):
    """A forward-mode cell of a rule with no jvp ran its forward only: there is nothing to plant in it."""
    root, scenarios = project
    tracer, references = RuleTracer(root), ReferenceCache()
    names = ["torch-rev", "torch-fwd"]
    cells = check(root, scenarios["loss/gradient"], names, tracer, references)
    rules = tracer.rules()
    records = {cell.key: CellRules.of(tracer.lines(cell.key), rules) for cell in cells}
    by_backend = {cell.backend: cell for cell in cells}
    assert records[by_backend["torch-fwd"].key].rules  # it ran SquareLoss's forward, then raised: no jvp
    powers = measure_power(scenarios["loss/gradient"], cells, records, rules, root, resolve_backends(names), references)
    assert by_backend["torch-fwd"].key not in powers
    assert powers[by_backend["torch-rev"].key].plants


EQX_OPS = '''
import equinox as eqx
import jax
import jax.numpy as jnp


@jax.custom_jvp
def asarray(x):
    return jnp.asarray(x)


@asarray.defjvp
def asarray_jvp(primals, tangents):
    return asarray(primals[0]), tangents[0]


@eqx.filter_jit
def solve(x):
    """lineax's linear_solve: an eqx.filter_jit entry point over a custom_jvp."""
    return jnp.sum(jnp.sin(asarray(x)) * jnp.arange(1.0, 4.0))
'''


def test_a_rule_under_an_equinox_filter_jit_is_recorded_in_every_cell(tmp_path):
    """equinox keeps filter_jit's trace in its own jax.jit: each jax cell must trace through it anew."""
    pytest.importorskip("equinox")
    root = tmp_path / "eqxproject"
    (root / "eqxshapes").mkdir(parents=True)
    (root / "eqxshapes" / "__init__.py").write_text("")
    (root / "eqxshapes" / "ops.py").write_text(textwrap.dedent(EQX_OPS))
    (root / "eqxshapes" / "scenarios.py").write_text(
        "import numpy as np\nfrom gradci import Scenario\nfrom eqxshapes.ops import solve\n\n\ndef scenarios():\n"
        "    return [Scenario('solve/gradient', 'gradient', {'jax': solve}, np.array([0.5, 1.0, 2.0]))]\n")
    (root / "gradci.toml").write_text('[scenarios]\nmodules = ["eqxshapes.scenarios"]\n')
    try:
        [scenario] = load_scenarios(load_project(root))
        tracer = RuleTracer(root)
        cells = check(root, scenario, ["jax-rev", "jax-rev-jit", "jax-fwd"], tracer)
        rules = tracer.rules()
        for cell in cells:
            assert tracer.take(cell.key, rules).rules.get("eqxshapes/ops.py::asarray", []) == ["fun", "jvp"], \
                cell.backend
    finally:
        for name in [name for name in sys.modules if name == "eqxshapes" or name.startswith("eqxshapes.")]:
            del sys.modules[name]


EQX_VJP = '''
import equinox as eqx
import jax.numpy as jnp


@eqx.filter_custom_vjp
def scaled(x, w):
    """diffrax's BacksolveAdjoint: an eqx.filter_custom_vjp (its vjp_arg first)."""
    return x * w


@scaled.def_fwd
def scaled_fwd(perturbed, x, w):
    return x * w, None


@scaled.def_bwd
def scaled_bwd(residuals, grad_out, perturbed, x, w):
    return grad_out * w


def energy(x):
    return jnp.sum(scaled(x, jnp.arange(1.0, 4.0)) ** 2)
'''


def test_an_equinox_filter_custom_vjp_is_a_rule_recorded_and_planted(tmp_path):
    pytest.importorskip("equinox")
    root = tmp_path / "eqxvjp"
    (root / "eqxvjp").mkdir(parents=True)
    (root / "eqxvjp" / "__init__.py").write_text("")
    (root / "eqxvjp" / "ops.py").write_text(textwrap.dedent(EQX_VJP))
    (root / "eqxvjp" / "scenarios.py").write_text(
        "import numpy as np\nfrom gradci import Scenario\nfrom eqxvjp.ops import energy\n\n\ndef scenarios():\n"
        "    return [Scenario('energy/gradient', 'gradient', {'jax': energy}, np.array([0.5, 1.0, 2.0]))]\n")
    (root / "gradci.toml").write_text('[scenarios]\nmodules = ["eqxvjp.scenarios"]\n')
    try:
        [scenario] = load_scenarios(load_project(root))
        tracer, references, names = RuleTracer(root), ReferenceCache(), ["jax-rev", "jax-rev-jit"]
        cells = check(root, scenario, names, tracer, references)
        rules = tracer.rules()
        assert [(r.kind, r.name, [m.name for m in r.methods]) for r in rules] == [
            (CUSTOM_VJP, "scaled", ["fun", "fwd", "bwd"])]
        records = {cell.key: CellRules.of(tracer.lines(cell.key), rules) for cell in cells}
        assert all("bwd" in records[c.key].rules.get("eqxvjp/ops.py::scaled", []) for c in cells)
        powers = measure_power(scenario, cells, records, rules, root, resolve_backends(names), references)
        for cell in cells:
            scale = next(p for p in powers[cell.key].plants if p.kind == SCALE)
            assert scale.outcome == CAUGHT and scale.smallest_delta is not None and scale.smallest_delta <= 1e-5, \
                (cell.backend, scale)
    finally:
        for name in [name for name in sys.modules if name == "eqxvjp" or name.startswith("eqxvjp.")]:
            del sys.modules[name]


def test_a_base_class_classmethod_backward_is_planted_bound_to_the_subclass(project):
    """entmax's _GenericLossFunction.backward reads cls.n_fwd_args: a plant must not bind it to the base."""
    root, scenarios = project
    tracer, references = RuleTracer(root), ReferenceCache()
    cells = check(root, scenarios["loss/gradient"], ["torch-rev"], tracer, references)
    rules = tracer.rules()
    records = {cell.key: CellRules.of(tracer.lines(cell.key), rules) for cell in cells}
    powers = measure_power(scenarios["loss/gradient"], cells, records, rules, root, resolve_backends(["torch-rev"]),
                           references)
    [cell] = cells
    for rule in ("realshapes/ops.py::_GenericLoss", "realshapes/ops.py::SquareLoss"):
        outcomes = {p.kind: (p.outcome, p.note[:120]) for p in powers[cell.key].plants if p.rule == rule}
        assert outcomes.get(SCALE, ("",))[0] == CAUGHT and outcomes["sign"][0] == CAUGHT, (rule, outcomes)
    ops = sys.modules["realshapes.ops"]
    assert isinstance(vars(ops._GenericLoss)["backward"], classmethod) and "backward" not in vars(ops.SquareLoss)


def test_a_forward_run_by_reverse_cells_under_no_grad_gets_a_hint_that_says_so(project):
    """Asking for "a reverse-mode cell" when torch-rev cells already ran the forward sends the user astray."""
    root, scenarios = project
    tracer = RuleTracer(root)
    cells = check(root, scenarios["nograd/gradient"], ["torch-rev"], tracer)
    rules = tracer.rules()
    summary = summarize(rules, [(cell, tracer.take(cell.key, rules)) for cell in cells])
    [finding] = [f for f in summary.findings() if f.rule.name == "Stitch"]
    assert finding.text == NOT_EXERCISED
    assert "ran in torch-rev cells" in finding.hint and "no_grad" in finding.hint, finding.hint
    assert "a reverse-mode cell (torch-rev" not in finding.hint
