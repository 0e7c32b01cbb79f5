"""A float32 result is compared entry by entry with its backend's passing float64 result.

A 1 % error in one entry of a 2,000-element float32 gradient hides below float32's allowance on
random probes; where the rule is wrong in float32 only (a kernel path taken in that precision), the
float64 cell passes and, without a forward mode to cross-check, the float32 cell passed too. The
entrywise comparison with float64, settled by a reference along the disagreement, fails it; its
twin passes in both precisions, and a float32 cell with no float64 beside it is judged as before.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci._testing.planted import torch_elementwise
from gradci.scenarios.reference.answer import ReferenceCache

torch = pytest.importorskip("torch")
SIZE = 2000


def wrong_in_float32(planted: bool):
    """A backward scale of 1, but 1.01 in entry 7 of a float32 gradient (where ``planted``)."""
    def scale(x):
        s = torch.ones_like(x)
        if planted and x.dtype == torch.float32:
            s[7] = 1.01
        return s
    return scale


def loss(planted: bool) -> Scenario:
    sin = torch_elementwise(torch.sin, torch.cos, backward_scale=wrong_in_float32(planted), jvp_rule=False)
    return Scenario(f"float32-entry-{planted}", "gradient", {"torch": lambda x: torch.sum(sin(x))},
                    np.linspace(-1.3, 1.1, SIZE))


@pytest.mark.parametrize("planted, float32", [(False, "pass"), (True, "fail")])
def test_one_wrong_float32_entry_fails_beside_a_passing_float64_cell(planted, float32):
    cells = gradci.check([loss(planted)], backends=["torch-rev"], devices=["cpu"], dtypes=["float64", "float32"],
                         references=ReferenceCache()).cells
    by_dtype = {c.dtype: c for c in cells}
    assert by_dtype["float64"].status == "pass", by_dtype["float64"].message
    assert by_dtype["float32"].status == float32, by_dtype["float32"].message
    if planted:
        assert "float32 one wrong" in by_dtype["float32"].message and "element 7" in by_dtype["float32"].message


def test_without_a_float64_cell_the_probe_alone_judges_float32():
    (cell,) = gradci.check([loss(True)], backends=["torch-rev"], devices=["cpu"], dtypes=["float32"],
                           references=ReferenceCache()).cells
    assert cell.status == "pass"  # what the probes alone can see: the reason for the entrywise check
