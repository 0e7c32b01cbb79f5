"""Reductions, scans, sorting and strided views: torch functions whose backward gathers or scatters."""
from __future__ import annotations

from ._table import FULL, JACOBIAN, JVP, LOSS, SCALAR, SECOND, VJP, Row, on_every, signed, spread

AREA = "torch-reductions"


def with_a_zero(g, shape):
    """Away from zero but for one exact zero: prod and cumprod take a separate backward path there."""
    x = g.choice([-1.0, 1.0], size=shape) * g.uniform(0.3, 1.5, size=shape)
    x.flat[len(x.flat) // 2] = 0.0
    return x


def sum_in_float64(f, x):
    """A sum that promotes to float64: for float32 inputs the backward must cast the gradient back."""
    import torch

    return f(x * x, dtype=torch.float64)


ROWS = (
    Row("torch.sum", (2, 3), (-1, 1), JACOBIAN, kwargs={"dim": 1}),
    Row("torch.sum", (5,), (-1, 1), VJP + ("gradient",), label="float64", call=sum_in_float64),
    Row("torch.mean", (2, 3), (-1, 1), FULL, kwargs={"dim": 1}),
    Row("torch.prod", (5,), signed(0.3, 1.5), FULL),
    Row("torch.prod", (4,), signed(0.3, 1.5), SECOND, label="4"),
    Row("torch.prod", (5,), with_a_zero, JVP + ("gradient",), label="zero"),
    Row("torch.std", (5,), (-1, 1), FULL),
    Row("torch.std", (2, 3), (-1, 1), VJP, label="dim", kwargs={"dim": 1, "correction": 0}),
    Row("torch.var", (4,), (-1, 1), SECOND + ("jvp",)),
    Row("torch.var_mean", (2, 3), (-1, 1), JVP, kwargs={"dim": 1}),
    Row("torch.std_mean", (2, 3), (-1, 1), VJP, kwargs={"dim": 1}),
    Row("torch.norm", (5,), (-1, 1), JVP),
    Row("torch.logsumexp", (2, 3), (-2, 2), JACOBIAN, kwargs={"dim": 1}),
    Row("torch.amax", (2, 4), spread(-2, 2), FULL, kwargs={"dim": 1}),
    Row("torch.amin", (2, 4), spread(-2, 2), VJP, kwargs={"dim": 1}),
    Row("torch.max", (2, 4), spread(-2, 2), JVP, call=lambda f, x: f(x, dim=1).values),
    Row("torch.min", (2, 4), spread(-2, 2), VJP, call=lambda f, x: f(x, dim=1).values),
    Row("torch.aminmax", (2, 4), spread(-2, 2), JVP, call=lambda f, x: f(x, dim=0).max),
    Row("torch.cumsum", (6,), (-1, 1), JACOBIAN, kwargs={"dim": 0}),
    Row("torch.cumprod", (6,), signed(0.3, 1.5), FULL, kwargs={"dim": 0}),
    Row("torch.cumprod", (6,), with_a_zero, JACOBIAN, label="zero", kwargs={"dim": 0}),
    # cumprod's forward-mode formula, differentiated in reverse at a zero factor, is NaN.
    Row("torch.cumprod", (4,), with_a_zero, SECOND, label="zero-4", kwargs={"dim": 0},
        xfail=on_every(SECOND, {"torch-func-rev-fwd": "upstream: not yet filed (nearest: "
                                                      "https://github.com/pytorch/pytorch/issues/196701) reverse "
                                                      "over forward through cumprod at a zero factor is NaN"})),
    Row("torch.cummax", (6,), spread(-2, 2), VJP, call=lambda f, x: f(x, dim=0).values),
    Row("torch.cummin", (6,), spread(-2, 2), JVP, call=lambda f, x: f(x, dim=0).values),
    # Reverse mode builds a jvp by differentiating the vjp at a zero cotangent (as
    # torch.autograd.functional.jvp does); logcumsumexp's backward takes the log of that cotangent.
    Row("torch.logcumsumexp", (6,), (-2, 2), FULL, kwargs={"dim": 0},
        xfail={"jvp": {"torch-*rev": "upstream: not yet filed (nearest: "
                                     "https://github.com/pytorch/pytorch/issues/196705) logcumsumexp's backward "
                                     "is NaN when differentiated at a zero gradient"}}),
    Row("torch.median", (5,), spread(-2, 2), VJP),
    Row("torch.nanmedian", (2, 3), spread(-2, 2), JVP, call=lambda f, x: f(x, dim=1).values),
    Row("torch.nanmean", (6,), (-1, 1), VJP),
    Row("torch.nansum", (6,), (-1, 1), LOSS),
    Row("torch.trace", (3, 3), (-1, 1), FULL),
    Row("torch.kthvalue", (5,), spread(-2, 2), JVP, call=lambda f, x: f(x, 2).values),
    Row("torch.topk", (6,), spread(-2, 2), JACOBIAN, call=lambda f, x: f(x, 2).values),
    Row("torch.sort", (5,), spread(-2, 2), FULL, call=lambda f, x: f(x).values),
    Row("torch.msort", (3, 2), spread(-2, 2), VJP),
    Row("torch.quantile", (5,), spread(-2, 2), JVP, kwargs={"q": 0.3}),
    Row("torch.nanquantile", (5,), spread(-2, 2), VJP, kwargs={"q": 0.7}),
    Row("torch.diff", (6,), (-1, 1), FULL),
    Row("torch.trapezoid", (6,), (-1, 1), LOSS + ("jvp",)),
    Row("torch.cumulative_trapezoid", (6,), (-1, 1), JVP),
    Row("torch.dist", (2, 3), (-1, 1), ("gradient",), call=lambda f, x: f(x[0], x[1])),
    Row("torch.renorm", (2, 3), signed(0.7, 1.5), VJP, kwargs={"p": 2, "dim": 0, "maxnorm": 1.0}),
    Row("torch.einsum", (3, 2), (-1, 1), JACOBIAN, call=lambda f, x: f("ij,kj->ik", x, x)),
    Row("torch.tensordot", (2, 3), (-1, 1), JVP, call=lambda f, x, y: f(x, y, dims=1), contexts=(((3, 2), (-1, 1)),)),
    # Overlapping windows of one storage: the backward must add up every window that reads an element.
    Row("torch.as_strided", (5,), (-1, 1), FULL, call=lambda f, x: f(x, (3, 3), (1, 1))),
    Row("torch.as_strided", (6,), (-1, 1), VJP, label="offset", call=lambda f, x: f(x, (2, 3), (2, 1), 1)),
    Row("torch.Tensor.unfold", (6,), (-1, 1), JVP, call=lambda f, x: f(x, 0, 3, 1)),
    # sgn's derivative is zero everywhere it exists (autograd returns a ZeroTensor).
    Row("torch.sgn", (), signed(0.3, 2), SCALAR, call=lambda f, x: f(x) * x * x),
    Row("torch.sgn", (5,), signed(0.3, 2), VJP, label="vector", call=lambda f, x: f(x) * x),
)
