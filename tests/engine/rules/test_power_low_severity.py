"""Detection power's edges: a δ-ladder rung that raises, state a plant leaves behind, a jitted rule.

Each claim with a rule that shows it (and fails without the fix it guards):
- a rung where the cell raises with the plant stops the ladder and is reported so, not as a miss;
- the programs compiled under a plant are not written to jax's persistent compilation cache, which a
  later run (another checkout's, on a shared cache folder) would read;
- a rule under a ``jax.jit`` whose trace was cached before the plant is re-traced with the plant.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

from gradci.scenarios.authoring.project import load_project, load_scenarios
from gradci.scenarios.check import check_scenario, resolve_backends
from gradci.scenarios.contract.cell import Cell
from gradci.scenarios.power.measure import measure_power
from gradci.scenarios.reference.answer import ReferenceCache
from gradci.scenarios.rules.power import CAUGHT, SCALE, summarize_power
from gradci.scenarios.rules.records import CellRules
from gradci.scenarios.rules.tracing import RuleTracer, tracing

OPS = '''
import jax
import jax.numpy as jnp
import torch

# Checked's backward raises when its incoming gradient drifts from 1 by less than this (and more than 0).
THRESHOLD = 3e-5


class Exact(torch.autograd.Function):
    """The identity: its backward passes the gradient on, to Checked's backward."""

    @staticmethod
    def forward(ctx, y):
        return y.clone()

    @staticmethod
    def backward(ctx, g):
        return g


class Checked(torch.autograd.Function):
    """x²; its backward asserts that the gradient it receives is exactly 1 or plainly not (a user's check)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        drift = float((g - 1).abs().max())
        if 0 < drift < THRESHOLD:
            raise FloatingPointError(f"the incoming gradient drifted by {drift:.1e}")
        return 2 * x * g


def chained(x):
    return Exact.apply(Checked.apply(x)).sum()


@jax.custom_vjp
def jsquare(x):
    return x * x


def jsquare_fwd(x):
    return x * x, x


def jsquare_bwd(x, g):
    return (2.0 * g * x,)


jsquare.defvjp(jsquare_fwd, jsquare_bwd)

# A jitted function the project holds where no module walk finds it (in a dict, as a registry would):
# its cache is not cleared per cell, only by jax.clear_caches().
KERNELS = {"square_sum": jax.jit(lambda v: jnp.sum(jsquare(v) * jnp.arange(1.0, 4.0)))}


def kernel_sum(x):
    return KERNELS["square_sum"](x)


@jax.jit
@jax.custom_vjp
def jitted_cube(x):
    return x ** 3


def jitted_cube_fwd(x):
    return x ** 3, x


def jitted_cube_bwd(x, g):
    return (3.0 * g * x * x,)


jitted_cube.__wrapped__.defvjp(jitted_cube_fwd, jitted_cube_bwd)
# Its gradient program compiled at import, before any plant (a module computing a constant so):
SLOPE = jax.grad(lambda v: jnp.sum(jitted_cube(v)))(jnp.arange(1.0, 4.0))


def jitted_cube_sum(x):
    return jnp.sum(jitted_cube(x) * jnp.arange(1.0, 4.0))
'''
SCENARIOS = '''
import numpy as np

from gradci import Scenario
from edgeops.ops import chained, jitted_cube_sum, kernel_sum


def scenarios():
    x = np.array([0.5, 1.0, 2.0])
    return [Scenario("chained/gradient", "gradient", {"torch": chained}, x),
            Scenario("kernel/gradient", "gradient", {"jax": kernel_sum}, x),
            Scenario("jitted/gradient", "gradient", {"jax": jitted_cube_sum}, x)]
'''


def write_project(root: Path) -> Path:
    (root / "edgeops").mkdir(parents=True)
    (root / "edgeops" / "__init__.py").write_text("")
    (root / "edgeops" / "ops.py").write_text(textwrap.dedent(OPS))
    (root / "edgeops" / "scenarios.py").write_text(textwrap.dedent(SCENARIOS))
    (root / "gradci.toml").write_text('[scenarios]\nmodules = ["edgeops.scenarios"]\n')
    return root


@pytest.fixture
def project(tmp_path):
    root = write_project(tmp_path / "project")
    scenarios = {s.name: s for s in load_scenarios(load_project(root))}
    yield root, scenarios
    for name in [name for name in sys.modules if name == "edgeops" or name.startswith("edgeops.")]:
        del sys.modules[name]


def measured(root: Path, scenario, backends: list[str]) -> tuple[list[Cell], dict, list]:
    tracer, references = RuleTracer(root), ReferenceCache()
    with tracing(tracer):
        cells = check_scenario(scenario, resolve_backends(backends), ["cpu"], ["float64"], references)
    rules = tracer.rules()
    records = {cell.key: CellRules.of(tracer.lines(cell.key), rules) for cell in cells}
    return cells, measure_power(scenario, cells, records, rules, root, resolve_backends(backends), references), rules


def exact_scale(powers, cell):
    return next(p for p in powers[cell.key].plants if p.rule.endswith("::Exact") and p.kind == SCALE)


def test_a_rung_that_raises_stops_the_ladder_and_is_not_a_miss(project):
    root, scenarios = project
    cells, powers, rules = measured(root, scenarios["chained/gradient"], ["torch-rev"])
    [cell] = cells
    scale = exact_scale(powers, cell)
    # caught at 1e-1 … 1e-4; at 1e-5 Checked's backward raised: neither a miss nor a catch
    assert scale.outcome == CAUGHT and scale.smallest_delta == pytest.approx(1e-4), scale
    assert scale.missed_delta is None and scale.stopped_delta == pytest.approx(1e-5), scale
    assert "the planted rule raised" in scale.note and "FloatingPointError" in scale.note
    assert any("at δ = 1e-05: the planted rule raised" in line for line in powers[cell.key].raised())
    assert not any("Exact" in line for line in powers[cell.key].missed())


def test_a_ladder_stopped_above_1_percent_is_not_reported_as_caught_by_no_cell(project):
    root, scenarios = project
    sys.modules["edgeops.ops"].THRESHOLD = 0.05  # it raises from δ = 1e-2 down: 1 % was never measured
    cells, powers, rules = measured(root, scenarios["chained/gradient"], ["torch-rev"])
    [cell] = cells
    scale = exact_scale(powers, cell)
    assert scale.smallest_delta == pytest.approx(0.1) and scale.stopped_delta == pytest.approx(0.01), scale
    [exact] = [rp for rp in summarize_power(rules, [(cell, powers[cell.key])]) if rp.rule.name == "Exact"]
    findings = exact.findings()
    assert any("is not known to be caught: the planted rule raised at δ = 0.01" in line for line in findings), findings
    assert not any("caught by no cell" in line and "scaled" not in line and "1 %" in line for line in findings)


def test_a_rule_under_a_jit_no_walk_finds_is_traced_with_the_plant_in_every_cell(project):
    """KERNELS' jax.jit keeps the trace the first cell made: the second cell must trace the plant itself.

    Coverage records each cell checked on its own (jax's caches cleared between them); the plant's
    re-run checks both cells in one go, as measure_power does.
    """
    import jax

    root, scenarios = project
    scenario, names = scenarios["kernel/gradient"], ["jax-rev", "jax-rev-jit"]
    tracer, references = RuleTracer(root), ReferenceCache()
    cells = []
    for name in names:
        jax.clear_caches()
        with tracing(tracer):
            cells += check_scenario(scenario, resolve_backends([name]), ["cpu"], ["float64"], references)
    rules = tracer.rules()
    records = {cell.key: CellRules.of(tracer.lines(cell.key), rules) for cell in cells}
    assert all(any(rule.endswith("::jsquare") for rule in records[c.key].rules) for c in cells)
    powers = measure_power(scenario, cells, records, rules, root, resolve_backends(names), references)
    for cell in cells:
        outcomes = {p.kind: (p.outcome, p.note) for p in powers[cell.key].plants}
        assert outcomes[SCALE][0] == CAUGHT and outcomes["sign"][0] == CAUGHT, (cell.backend, outcomes)


def test_a_jitted_custom_vjp_is_a_rule_and_each_cell_catches_its_plants(project):
    """``@jax.jit`` over ``@jax.custom_vjp``: the module holds the jitted function only."""
    root, scenarios = project
    cells, powers, rules = measured(root, scenarios["jitted/gradient"], ["jax-rev", "jax-rev-jit"])
    assert "jitted_cube" in [rule.name for rule in rules]
    for cell in cells:
        scale = next(p for p in powers[cell.key].plants if p.rule.endswith("::jitted_cube") and p.kind == SCALE)
        assert scale.outcome == CAUGHT and scale.smallest_delta is not None and scale.smallest_delta <= 1e-5, scale


PERSISTENT_CACHE = '''
import sys
from pathlib import Path

import jax

from gradci.scenarios.authoring.project import load_project, load_scenarios
from gradci.scenarios.check import check_scenario, resolve_backends
from gradci.scenarios.power.measure import measure_power
from gradci.scenarios.reference.answer import ReferenceCache
from gradci.scenarios.rules.records import CellRules
from gradci.scenarios.rules.tracing import RuleTracer, tracing

root, cache = Path(sys.argv[1]), Path(sys.argv[2])
scenario = {s.name: s for s in load_scenarios(load_project(root))}["jitted/gradient"]
backends, references, tracer = resolve_backends(["jax-rev-jit"]), ReferenceCache(), RuleTracer(root)
with tracing(tracer):
    cells = check_scenario(scenario, backends, ["cpu"], ["float64"], references)
assert jax.config.jax_compilation_cache_dir == str(cache)  # GRADCI_JAX_CACHE_DIR, read by the adapter
rules = tracer.rules()
records = {cell.key: CellRules.of(tracer.lines(cell.key), rules) for cell in cells}
before = {p.name for p in cache.rglob("*") if p.is_file()}
powers = measure_power(scenario, cells, records, rules, root, backends, references)
assert [p.outcome for p in powers[cells[0].key].plants if p.kind == "scale"] == ["caught"], powers
print(len(before), len({p.name for p in cache.rglob("*") if p.is_file()} - before))
'''


def test_no_program_compiled_under_a_plant_is_left_in_the_persistent_cache(tmp_path):
    """A later run reads jax's persistent cache: a planted program must not be there for it to read."""
    root = write_project(tmp_path / "project")
    cache = tmp_path / "jax-cache"
    script = tmp_path / "persistent.py"
    script.write_text(PERSISTENT_CACHE)
    env = {**os.environ, "GRADCI_JAX_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, str(script), str(root), str(cache)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    before, added = (int(n) for n in done.stdout.split()[-2:])
    assert before > 0  # the cache is on: the plain check wrote its programs
    assert added == 0, f"{added} programs compiled under plants were written to the persistent cache"
