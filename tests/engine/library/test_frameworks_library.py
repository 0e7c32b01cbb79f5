"""The framework conformance family: several hundred scenarios over torch's and jax's own public
functions, every operator and area covered, kept out of the demo suite; run whole on the CPU, no
correct derivative fails and every known framework bug is an xfail naming its upstream issue; a
deliberately wrong derivative of a framework function fails."""
from __future__ import annotations

import collections
import math
import re

import numpy as np
import optree
import pytest

import gradci
from gradci import OPERATORS
from gradci._testing.planted import torch_elementwise
from gradci.scenarios.backends import registry
from gradci.scenarios.library import default, family
from gradci.scenarios.library.conformance import AREAS, FAMILY
from gradci.scenarios.library.conformance._table import FIRST, Row
from gradci.scenarios.library.conformance._table import scenarios as table_scenarios

UPSTREAM_URL = re.compile(r"https://github\.com/(pytorch/pytorch|jax-ml/jax)/(issues|pull)/\d+")
MAX_ELEMENTS = 12  # full references, never random probes


@pytest.fixture(scope="module")
def conformance():
    return family(FAMILY)


def test_family_is_large_and_names_are_unique(conformance):
    assert len(conformance) >= 300
    names = [s.name for s in conformance]
    assert len(set(names)) == len(names), [n for n, k in collections.Counter(names).items() if k > 1]
    per_framework = collections.Counter(s.tags[1] for s in conformance)
    assert set(per_framework) == {"torch", "jax"} and min(per_framework.values()) >= 0.35 * len(conformance)


def test_every_operator_meets_both_frameworks_and_every_area_is_represented(conformance):
    for framework in ("torch", "jax"):
        assert {s.operator for s in conformance if s.tags[1] == framework} == set(OPERATORS), framework
    assert {s.tags[2] for s in conformance} == set(AREAS)
    assert set(AREAS) >= {"torch.nn.functional", "torch.special", "torch.linalg", "torch-reductions",
                          "jax.numpy", "jax.nn", "jax.scipy.special", "jax.lax"}


def test_names_tags_and_implementations_say_one_framework_function(conformance):
    for s in conformance:
        family_name, framework, function, operator = s.name.split("/")
        assert (family_name, operator) == (FAMILY, s.operator), s.name
        assert function.startswith(f"{framework}.") and s.tags[:2] == (FAMILY, framework), s.name
        assert set(s.f) == {framework}, s.name


def test_inputs_are_small_enough_for_full_references(conformance):
    for s in conformance:
        size = sum(np.size(leaf) for leaf in optree.tree_leaves(s.x))
        limit = 4 if s.operator in ("hvp", "hessian") else MAX_ELEMENTS
        assert size <= limit, f"{s.name}: {size} elements"


def test_the_family_is_not_part_of_the_demo_suite():
    assert not [s.name for s in default() if s.name.startswith(f"{FAMILY}/")]


def test_every_xfail_names_its_upstream_issue(conformance):
    reasons = [expect.reason for s in conformance for expect in s.xfail]
    assert reasons, "the library records the framework bugs it finds"
    assert all(UPSTREAM_URL.search(reason) for reason in reasons), [r for r in reasons if not UPSTREAM_URL.search(r)]


# What `gradci check --family frameworks` runs: every default backend. The opt-in jax-rev is left
# out, as there: it runs jax op by op, the same rules jax-rev-jit checks compiled, and costs more
# than the rest of the family together on a 2-core machine.
BACKENDS = sorted(name for name, backend in registry().items() if backend.default)


@pytest.mark.slow
def test_the_whole_family_passes_on_cpu_in_both_dtypes(conformance):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    report = gradci.check(conformance, backends=BACKENDS, devices=["cpu"], dtypes=["float64", "float32"])
    bad = [f"{c.scenario} {c.backend} {c.dtype}: {c.status} {c.message}" for c in report.failing()]
    assert not bad, f"{len(bad)} failing cells:\n" + "\n".join(bad[:40])
    counts = report.counts()
    assert {c.backend for c in report.cells if c.status == "pass"} == set(BACKENDS)
    assert counts["xfail"] > 0 and counts["pass"] > 10 * counts["xfail"]


# ---- the planted twin: a framework function with a wrong derivative must fail ------------------------

def erf_with_wrong_backward(erf, x):
    """torch.special.erf whose backward is off by 1% (a custom autograd.Function)."""
    import torch

    def derivative(v):
        return 2 / math.sqrt(math.pi) * torch.exp(-v * v)

    return torch_elementwise(erf, derivative, backward_scale=1.01, jvp_rule=False)(x)


def erf_with_wrong_vjp(erf, x):
    """jax.scipy.special.erf whose custom vjp is off by 1%."""
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def wrong(v):
        return erf(v)

    wrong.defvjp(lambda v: (erf(v), v), lambda v, g: (g * 1.01 * 2 / math.sqrt(math.pi) * jnp.exp(-v * v),))
    return wrong(x)


@pytest.mark.parametrize("function, call, backends", [
    ("torch.special.erf", erf_with_wrong_backward, ["torch-rev", "torch-func-rev"]),
    ("jax.scipy.special.erf", erf_with_wrong_vjp, ["jax-rev", "jax-rev-jit"]),
], ids=["torch", "jax"])
def test_a_wrong_derivative_of_a_framework_function_fails(function, call, backends):
    framework = function.split(".")[0]
    pytest.importorskip(framework)
    rows = (Row(function, (5,), (-1.5, 1.5), FIRST),
            Row(function, (5,), (-1.5, 1.5), FIRST, call=call, label="wrong"))
    report = gradci.check(table_scenarios("planted", rows), backends=backends, devices=["cpu"], dtypes=["float64"])
    statuses = collections.defaultdict(set)
    for cell in report.cells:
        statuses["wrong" if "[wrong]" in cell.scenario else "right"].add(cell.status)
    assert statuses == {"right": {"pass"}, "wrong": {"fail"}}
