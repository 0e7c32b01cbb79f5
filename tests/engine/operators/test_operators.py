"""Each derivative operator is one record: the records are the vocabulary, every record's definitions
pass on a smooth function, and a new record alone is enough for every backend and the reference."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gradci
from gradci import Expect, Scenario, namespace
from gradci.scenarios.contract import cell
from gradci.scenarios.operators import records as operators
from gradci.scenarios.operators.records import OPERATOR_RECORDS, Operator
from gradci.scenarios.reference.finite_differences import compute_references

# One backend of each kind of definition: functional reverse and forward (jitted and not),
# torch.autograd, and finite differences.
BACKENDS = ["jax-rev", "jax-rev-jit", "jax-fwd", "torch-rev", "torch-func-rev", "torch-func-fwd", "fd"]


def test_records_are_the_stored_vocabulary():
    assert operators.OPERATORS is cell.OPERATORS
    assert tuple(OPERATOR_RECORDS) == cell.OPERATORS
    for name, record in OPERATOR_RECORDS.items():
        assert record.name == name
        assert record.order in (1, 2) and record.input in ("scalar", "array", "pytree")
        assert not (record.takes_tangent and record.takes_cotangent), name


def smooth_scenario(record: Operator) -> Scenario:
    """A smooth function of the input and output kinds the record asks for."""
    scalar_in, scalar_out = record.input == "scalar", record.output == "scalar"
    x = 0.4 if scalar_in else np.array([0.3, -0.7, 1.1])

    def f(x):
        xp = namespace(x)
        if scalar_out:
            return xp.sum(xp.sin(x) * x)
        return xp.stack([xp.sin(x) * x, xp.exp(x * 0.5)]) if scalar_in else xp.sin(x) * x[0]

    return Scenario(f"smooth/{record.name}", record.name, f, x, xfail=TORCH_FUNC_UPCASTS if scalar_in else ())


# torch.func.jvp of ``x * 0.5`` for a 0-d float32 x answers a float64 tangent: the Python float's zero
# tangent loses its wrapped-number mark and wins type promotion between two 0-d tensors.
TORCH_FUNC_UPCASTS = [Expect("pytorch#90065: torch.func's forward mode upcasts a 0-d float32 x times a Python "
                             "float to float64", backend="torch-func-fwd", dtype="float32",
                             match="comes back in float64 for float32")]


def failing(report):
    return [(c.backend, c.dtype, c.status, c.message) for c in report.failing()]


@pytest.mark.parametrize("operator", gradci.OPERATORS)
def test_every_operator_passes_on_a_smooth_function(operator):
    report = gradci.check([smooth_scenario(OPERATOR_RECORDS[operator])], devices=["cpu"])
    assert report.ok, failing(report)
    declared = {(c.backend, c.dtype) for c in report.cells if c.status == "xfail"}
    assert declared <= {("torch-func-fwd", "float32")}, declared
    assert {c.status for c in report.cells} <= {"pass", "skip", "xfail"}


def _trace_of_jacobian(jacobian):
    # .diagonal().sum() is spelled alike on jax and torch arrays.
    return lambda vocabulary, f, x, t: jacobian(vocabulary, f, x).diagonal().sum()


def _fd_divergence(B, t):
    jac, err = B.jacobian_matrix()
    return B.full(np.trace(jac), np.trace(err))


# An operator gradci does not have: the divergence of f: Rⁿ -> Rⁿ, tr J (score matching, neural ODEs).
DIVERGENCE = Operator(
    "divergence", input="array", output="any", result="a number: the trace of the Jacobian",
    per_input_in_forward=True,
    reverse=_trace_of_jacobian(lambda T, f, x: T.jacrev(f)(x)),
    forward=_trace_of_jacobian(lambda T, f, x: T.jacfwd(f)(x)),
    autograd=_trace_of_jacobian(lambda A, f, x: A.jacobian(f, x)),
    finite_differences=_fd_divergence,
)


@pytest.fixture
def register(monkeypatch):
    """Adds an operator record for one test; the vocabulary is restored afterwards."""
    def add(record: Operator) -> None:
        monkeypatch.setitem(OPERATOR_RECORDS, record.name, record)

    return add


def test_a_new_operator_needs_only_its_record(register):
    register(DIVERGENCE)
    scenario = smooth_scenario(DIVERGENCE)
    report = gradci.check([scenario], backends=BACKENDS, devices=["cpu"], dtypes=["float64", "float32"])
    assert report.ok, failing(report)
    assert {c.backend for c in report.cells if c.status == "pass"} == set(BACKENDS)
    # What they agreed on is the divergence: for f_i = sin(x_i)·x₀, tr J = x₀·Σ cos(x_i) + sin(x₀).
    x = scenario.x
    _, (reference,) = compute_references(scenario)
    assert np.isclose(reference.full, x[0] * np.sum(np.cos(x)) + np.sin(x[0]), rtol=1e-12)


def test_a_new_operator_s_wrong_reverse_definition_fails_only_reverse_cells(register):
    register(dataclasses.replace(DIVERGENCE, reverse=lambda T, f, x, t: 1.001 * DIVERGENCE.reverse(T, f, x, t)))
    report = gradci.check([smooth_scenario(DIVERGENCE)], backends=BACKENDS, devices=["cpu"], dtypes=["float64"])
    assert {c.backend: c.status for c in report.cells} == {
        "jax-rev": "fail", "jax-rev-jit": "fail", "torch-func-rev": "fail",
        "jax-fwd": "pass", "torch-func-fwd": "pass", "torch-rev": "pass", "fd": "pass"}
