"""Declared xfail and skip: keyed by backend, device and dtype patterns, an xfail optionally naming
the exception it expects; and gradci.toml entries that name their scenario function."""
from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
import torch

import gradci
from gradci import Expect, Scenario
from gradci.scenarios.authoring.project import ProjectError, load_project, load_scenarios

X = np.array([0.3, -0.7, 1.1])


def _scaled_sin(backward_scale: float):
    """sin with a hand-written backward, wrong unless ``backward_scale`` is 1; no forward-mode rule,
    so torch.func's forward mode raises."""

    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.sin(x)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * torch.cos(x) * backward_scale

    return lambda x: torch.sum(Sin.apply(x))


def _statuses(scenario: Scenario, backends=("torch-rev",), dtypes=("float64", "float32")) -> dict:
    report = gradci.check([scenario], backends=list(backends), devices=["cpu"], dtypes=list(dtypes))
    return {(cell.backend, cell.dtype): (cell.status, cell.message) for cell in report.cells}


def _gradient(name: str, f, **declared) -> Scenario:
    return Scenario(name=name, operator="gradient", f={"torch": f}, x=X, **declared)


def test_an_xfail_keyed_by_dtype_covers_only_that_dtype():
    wrong = _gradient("wrong", _scaled_sin(1.01), xfail={("torch-rev", "cpu", "float32"): "known in float32"})
    statuses = _statuses(wrong)
    assert statuses[("torch-rev", "float32")][0] == "xfail"
    assert "known in float32" in statuses[("torch-rev", "float32")][1]
    assert statuses[("torch-rev", "float64")][0] == "fail"


def test_a_declared_failure_that_passes_is_xpass_with_the_reason():
    right = _gradient("right", _scaled_sin(1.0), xfail={("torch-*", "cpu*"): "thought broken"})
    statuses = _statuses(right)
    assert {status for status, _ in statuses.values()} == {"xpass"}
    assert all("thought broken" in message for _, message in statuses.values())


def test_an_xfail_on_another_device_does_not_apply():
    wrong = _gradient("wrong-cuda", _scaled_sin(1.01), xfail={("torch-rev", "cuda*"): "only on GPUs"})
    assert {status for status, _ in _statuses(wrong).values()} == {"fail"}


def test_an_xfail_naming_the_exception_is_met_only_by_that_exception():
    # torch.func's forward mode raises RuntimeError for an autograd.Function without a jvp rule.
    declared = [Expect("no forward rule", backend="torch-func-fwd", raises=RuntimeError)]
    right = _gradient("no-jvp", _scaled_sin(1.0), xfail=declared)
    assert _statuses(right, backends=["torch-func-fwd"])[("torch-func-fwd", "float64")][0] == "xfail"

    other = _gradient("no-jvp-other", _scaled_sin(1.0),
                      xfail=[Expect("no forward rule", backend="torch-func-fwd", raises=TypeError)])
    status, message = _statuses(other, backends=["torch-func-fwd"])[("torch-func-fwd", "float64")]
    assert status == "error" and "an xfail expects TypeError" in message


def test_a_wrong_value_does_not_meet_an_xfail_that_expects_an_exception():
    wrong = _gradient("wrong-value", _scaled_sin(1.01), xfail=[Expect("raises", raises=RuntimeError)])
    status, message = _statuses(wrong)[("torch-rev", "float64")]
    assert status == "fail" and "an xfail expects RuntimeError" in message


def test_a_skip_is_not_run_and_keeps_its_reason():
    calls = []

    def counted(x):
        calls.append(1)
        return torch.sum(torch.sin(x))

    skipped = _gradient("skipped", counted, skip={"torch-*": "crashes the driver"})
    statuses = _statuses(skipped)
    assert {status for status, _ in statuses.values()} == {"skip"}
    assert all("crashes the driver" in message for _, message in statuses.values())
    assert not calls  # neither the backend nor the reference evaluated f

    partly = _gradient("partly", counted, skip={("torch-rev", "*", "float32"): "slow"})
    statuses = _statuses(partly)
    assert statuses[("torch-rev", "float32")][0] == "skip" and statuses[("torch-rev", "float64")][0] == "pass"


@pytest.mark.parametrize("declared, expected", [
    ({("a", "b", "c", "d"): "r"}, "a tuple of up to 3 patterns"),
    ({"torch-*": ""}, "needs a reason"),
    ([Expect("r", raises=ValueError())], "raises= must be an exception class"),
    ("torch-rev", "must be a dict"),
])
def test_a_malformed_declaration_is_one_line_naming_the_scenario(declared, expected):
    with pytest.raises(TypeError) as caught:
        _gradient("malformed", _scaled_sin(1.0), xfail=declared)
    message = str(caught.value)
    assert expected in message and "'malformed'" in message and "\n" not in message


def test_a_skip_takes_no_exception():
    with pytest.raises(TypeError, match="skip takes no raises="):
        _gradient("skip-raises", _scaled_sin(1.0), skip=[Expect("r", raises=RuntimeError)])


@pytest.fixture(autouse=True)
def _forget_mypkg():
    yield
    for name in [name for name in sys.modules if name == "mypkg" or name.startswith("mypkg.")]:
        del sys.modules[name]


def _project(tmp_path, entry: str, body: str):
    (tmp_path / "gradci.toml").write_text(f'[scenarios]\nmodules = ["{entry}"]\n')
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "grad_scenarios.py").write_text(textwrap.dedent(body))
    return load_project(tmp_path)


MODULE = """
    import numpy as np
    import gradci                       # the package, not shadowed by the function below

    def all_scenarios():
        return [gradci.Scenario(name="mine/gradient", operator="gradient",
                                   f=lambda x: (x ** 2).sum(), x=np.ones(2))]
"""


def test_a_module_entry_may_name_its_function(tmp_path):
    found = load_scenarios(_project(tmp_path, "mypkg.grad_scenarios:all_scenarios", MODULE))
    assert [s.name for s in found] == ["mine/gradient"]


@pytest.mark.parametrize("entry, expected", [
    ("mypkg.grad_scenarios", "scenarios is nothing; expected a function"),  # the default factory, absent
    ("mypkg.grad_scenarios:missing", "missing is nothing; expected a function"),
    ("mypkg.grad_scenarios:np", "np is a module; expected a function"),
    ("mypkg grad:x", "is not \"package.module\" or \"package.module:function\""),
])
def test_a_wrong_module_entry_is_one_line(tmp_path, entry, expected):
    with pytest.raises(ProjectError) as caught:
        load_scenarios(_project(tmp_path, entry, MODULE))
    assert expected in str(caught.value) and "\n" not in str(caught.value)
