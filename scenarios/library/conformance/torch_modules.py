"""Every module of PyTorch's own ModuleInfo database, differentiated as a user does: through functional_call.

torch tests its modules with ``gradcheck`` on its own sample inputs. This family takes the same
modules and inputs (``torch.testing._internal.common_modules.module_db``, in eval mode) and checks them
as training sees them: the parameters and the inputs torch's sample differentiates (a loss's input,
not its target) are x, the rest of the call is fixed, the floating-point buffers
(running statistics) are state, and the loss is a fixed weighting of every floating-point output, so
that a module linear in x has a Hessian of exactly 0 (max-pooling modules get their inputs in the order
torch's sample gives them, evenly spaced: ``spaced``, so that no switch of the max is within the
reference's reach). Each module input becomes a gradient and an HVP
scenario, torch's backends only. Inputs past ``MAX_ELEMENTS`` differentiable elements, with complex
tensors, or that modify their input in place are left out (``gradci.scenarios.library.family`` lists
what it made).

Needs torch and ``expecttest`` (torch's test helpers import it): ``pip install 'gradci[modules]'``.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from gradci.scenarios.adapters import global_state
from gradci.scenarios.authoring.expectations import Expect
from gradci.scenarios.authoring.scenario import Scenario

FAMILY = "torch-modules"
OPERATORS = ("gradient", "hvp")
MAX_ELEMENTS = 2000  # differentiable elements (parameters and inputs) of one scenario
# Sample inputs kept per module, spread over its list: a few modules have hundreds (every combination of
# a loss's options), which would otherwise be most of the family.
MAX_SAMPLES = 12


@dataclasses.dataclass(frozen=True)
class Known:
    """A PyTorch bug or missing derivative that some cases of some modules meet, declared as an xfail.

    ``raises``/``match``: the exception the cells raise (a missing derivative), or None for a wrong
    value (a bug). ``applies``: which cases of the modules. A declared cell that passes is ``xpass``:
    the family then says PyTorch changed.
    """

    modules: tuple[str, ...]
    operators: tuple[str, ...]
    backend: str
    reason: str
    dtype: str = "*"
    raises: type[BaseException] | None = None
    match: str | None = None
    applies: Callable[[ModuleCase], bool] = lambda case: True


def _input_statistics(case: ModuleCase) -> bool:
    """Whether a normalisation layer normalises by the input's own statistics in eval mode (a non-empty one)."""
    uses_them = type(case.module).__name__ == "LayerNorm" or getattr(case.module, "running_mean", 1) is None
    return uses_them and all(np.size(a) for a in case.x.get("inputs", []))


def _mkldnn_lstm(case: ModuleCase) -> bool:
    return getattr(case.module, "proj_size", 0) == 0  # float32 LSTMs without projections run on oneDNN's kernel


def _python_function(case: ModuleCase) -> bool:
    return case.python_function  # the chunked loss, say: an old-style autograd.Function


def _mean_reduction(case: ModuleCase) -> bool:
    return getattr(case.module, "reduction", None) == "mean"


NORMS = ("nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d", "nn.InstanceNorm1d", "nn.InstanceNorm2d",
         "nn.InstanceNorm3d")
TRANSFORMERS = ("nn.Transformer", "nn.TransformerEncoder", "nn.TransformerEncoderLayer", "nn.TransformerDecoderLayer")
MARGIN_LOSSES = ("nn.MultiLabelMarginLoss", "nn.MultiMarginLoss")
NO_FORWARD_AD = "torch implements no forward-mode derivative here (NotImplementedError)"
NO_DOUBLE_BACKWARD = "torch implements no derivative of this backward (no second order in reverse mode)"
NO_FORWARD_OF_BACKWARD = ("torch implements no forward-mode derivative of this backward (no forward over reverse, "
                          "NotImplementedError)")
# The backends that run torch's forward-mode formulas: torch-func-fwd and torch-fwd at first order, and
# at second order torch-func-fwd (forward over forward), torch-func-rev-fwd (reverse over forward) and
# torch-fwd (forward over reverse: the formulas of the backward's ops).
FORWARD = "torch-*fwd"
NESTED_FORWARD = "torch-func-*fwd"  # forward-mode formulas differentiated again: torch-func-fwd, torch-func-rev-fwd
KNOWN: tuple[Known, ...] = (
    # Nested forward-mode AD through the normalisation kernels (their forward-mode formulas differentiated
    # again, forward or reverse) gives wrong second derivatives where they normalise by the input's own
    # statistics (eval mode with running statistics is affine, and right).
    Known(NORMS, ("hvp",), NESTED_FORWARD, "upstream: https://github.com/pytorch/pytorch/issues/196699 (nested "
          "forward-mode AD through batch_norm gives a wrong second derivative)", applies=_input_statistics),
    Known(("nn.LayerNorm",), ("hvp",), NESTED_FORWARD, "upstream: https://github.com/pytorch/pytorch/issues/196700 "
          "(nested forward-mode AD through layer_norm gives a wrong second derivative)", applies=_input_statistics),
    Known(TRANSFORMERS, OPERATORS, FORWARD, NO_FORWARD_AD, raises=NotImplementedError, match="forward AD"),
    Known(TRANSFORMERS, ("hvp",), "torch-*rev", NO_DOUBLE_BACKWARD, raises=RuntimeError, match="not implemented"),
    Known(MARGIN_LOSSES, OPERATORS, FORWARD, NO_FORWARD_AD, raises=NotImplementedError, match="forward AD"),
    Known(MARGIN_LOSSES, ("hvp",), "torch-*rev", NO_DOUBLE_BACKWARD, raises=RuntimeError, match="not implemented"),
    Known(("nn.SoftMarginLoss", "nn.GLU"), ("hvp",), "torch-func-fwd", NO_FORWARD_AD, raises=NotImplementedError,
          match="forward AD"),
    Known(("nn.SoftMarginLoss", "nn.HuberLoss"), ("hvp",), "torch-fwd", NO_FORWARD_OF_BACKWARD,
          raises=NotImplementedError, match="forward AD"),
    Known(("nn.GLU",), ("hvp",), "torch-func-rev-fwd", "torch implements no reverse-mode derivative of glu's "
          "forward-mode formula (no reverse over forward)", raises=RuntimeError, match="glu_jvp"),
    Known(("nn.MSELoss",), ("hvp",), "torch-fwd", "upstream: https://github.com/pytorch/pytorch/issues/123996 "
          "(fix proposed in #197723) forward over reverse through mse_loss with reduction='mean' raises 'ZeroTensors "
          "are immutable'", raises=RuntimeError, match="ZeroTensors are immutable", applies=_mean_reduction),
    Known(("nn.LSTM",), OPERATORS, FORWARD, NO_FORWARD_AD + " for oneDNN's float32 LSTM kernel",
          dtype="float32", raises=NotImplementedError, match="mkldnn", applies=_mkldnn_lstm),
    # Chunked LinearCrossEntropyLoss (where its sizes make it chunk) is an autograd.Function without
    # setup_context: torch.func refuses it in reverse mode, and first-order forward mode (torch.func or
    # dual numbers) silently returns a zero derivative (not yet filed).
    Known(("nn.LinearCrossEntropyLoss",), OPERATORS, "torch-func-rev", "torch.func needs setup_context on the "
          "chunked loss's autograd.Function", raises=RuntimeError, match="setup_context", applies=_python_function),
    Known(("nn.LinearCrossEntropyLoss",), OPERATORS, FORWARD, "forward mode through the chunked loss's "
          "autograd.Function (no jvp rule): torch.func.jvp and dual numbers return 0 instead of raising, a silent "
          "wrong derivative (not yet filed); second order raises", applies=_python_function),
    Known(("nn.LinearCrossEntropyLoss",), ("hvp",), "torch-rev", "the chunked loss's backward is computed without "
          "a graph: no second order", raises=RuntimeError, applies=_python_function),
)


class ModulesUnavailable(RuntimeError):
    """The family cannot be listed here: torch or its test helpers are missing."""


@functools.cache
def _module_db() -> list[Any]:
    """torch's module database, imported without letting its test harness change this process.

    Importing torch's test helpers freezes torch.backends' flags for the whole process (its test suite
    wants them set only in ``with`` blocks), which would break every later scenario that pins a
    precision: the freeze is undone, and the frameworks' global state restored, right after.
    """
    import torch.backends

    before = global_state.capture()
    frozen = torch.backends.flags_frozen()
    try:
        from torch.testing._internal.common_modules import module_db
    except ImportError as exc:
        raise ModulesUnavailable(f"the {FAMILY} family needs torch and expecttest ({exc}): "
                                 "pip install 'gradci[modules]'") from exc
    finally:
        # torch.backends is a wrapper module: the flag lives in its functions' own globals
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = not frozen
        global_state.restore(before, current=global_state.capture())
    return list(module_db)


@dataclasses.dataclass(frozen=True)
class ModuleCase:
    """One sample input of one module: the module, its x (parameters, inputs), its buffers, its call."""

    name: str
    module: Any
    x: dict[str, Any]
    buffers: dict[str, np.ndarray]
    call: Callable[..., Any]
    python_function: bool = False  # its graph goes through a Python torch.autograd.Function


def scenarios() -> list[Scenario]:
    """A gradient and an HVP scenario for each module input small enough and real-valued."""
    return [scenario for case in cases() for scenario in _scenarios_of(case)]


@functools.cache
def cases() -> list[ModuleCase]:
    """Every usable (module, sample input) of torch's module_db, built once per process."""
    import torch

    found = []
    for info in _module_db():
        with torch.random.fork_rng():  # the samples are random: the same ones every time, no global change
            torch.manual_seed(0)
            try:
                # requires_grad=True marks the tensors torch itself differentiates (a loss's input, not its target)
                samples = info.module_inputs_func(info, device="cpu", dtype=torch.float64, requires_grad=True,
                                                  training=False)
            except Exception:  # noqa: BLE001 -- a module whose samples torch cannot make here has no case
                continue
            for index in _spread_indices(len(samples), MAX_SAMPLES):
                case = _case(info, index, samples[index])
                if case is not None:
                    found.append(case)
    return found


def _spread_indices(count: int, most: int) -> list[int]:
    """At most ``most`` indices of ``count``, evenly spread, the first and the last among them."""
    if count <= most:
        return list(range(count))
    return sorted({round(i * (count - 1) / (most - 1)) for i in range(most)})


def _case(info: Any, index: int, sample: Any) -> ModuleCase | None:
    import torch
    from torch.utils._pytree import tree_flatten

    constructor, forward = sample.constructor_input, sample.forward_input
    if constructor.kwargs.get("inplace"):
        return None  # it writes into its input: a different contract from a function of x
    try:
        module = info.module_cls(*constructor.args, **constructor.kwargs).to(torch.float64).eval()
    except Exception:  # noqa: BLE001 -- not constructible here (a CUDA-only option, say): no case
        return None
    from torch.nn.modules.lazy import LazyModuleMixin

    if isinstance(module, LazyModuleMixin):
        return None  # its parameters exist only after a first call; its eager twin is in module_db
    leaves, spec = tree_flatten((forward.args, forward.kwargs))
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    if any(t.is_complex() for t in [*tensors, *module.parameters(), *module.buffers()]):
        return None
    inputs = [leaf.detach().numpy().copy() for leaf in leaves if _differentiable(leaf)]
    if (dimensions := _pooled_dimensions(module)) is not None:
        inputs = [spaced(a, dimensions) for a in inputs]
    template = [None if _differentiable(leaf) else _constant(leaf) for leaf in leaves]
    params = {name: p.detach().numpy().copy() for name, p in module.named_parameters()}
    buffers = {name: b.detach().numpy().copy() for name, b in module.named_buffers() if b.is_floating_point()}
    size = sum(a.size for a in [*inputs, *params.values()])
    if size == 0 or size > MAX_ELEMENTS:
        return None
    x = {**({"params": params} if params else {}), **({"inputs": inputs} if inputs else {})}
    call = _call(module, template, spec)
    try:
        value = call({key: _torch_tree(value, grad=True) for key, value in x.items()}, _torch_tree(buffers))
    except Exception:  # noqa: BLE001 -- a sample torch's own harness runs another way: no case
        return None
    if not bool(torch.isfinite(value)):
        return None
    return ModuleCase(f"{info.name}[{index}]", module, x, buffers, call, _through_python_function(value))


# Max pooling selects each output among its window's inputs by their order: f is piecewise linear, its
# pieces meeting where two inputs of a window tie, and its Hessian is 0 between them. torch's samples
# (uniform in ±9, about a thousand) put two inputs of a window within 1e-5 of each other: a second
# difference steps across that switch at every step large enough for float64's rounding to resolve the
# exact 0 (about 16·eps·|f| / h²), and no reference could decide the HVP (four samples' cells were
# "reference unreliable" or "noisy"). The inputs here keep the order torch's sample gives them within
# each channel's plane, evenly spaced SPACING apart: the nearest switch is then about SPACING / 5 away
# along the tangent and the probe (their elements differ by less than 5 between two inputs), beyond the
# steps the reference converges at. Windows never span channels or batch entries, so each plane is
# spaced on its own, which keeps x small, and so the reference's relative steps. At 0.05 apart the first
# steps (0.5) still crossed switches consistently enough to converge on a wrong curvature in two samples,
# and the small-step reference the verdict then takes could not decide; at 0.5 apart every max-pooling
# HVP's first reference decides (its error estimate at most 0.85 of the threshold, 2026-12-04).
MAX_POOLS = {"MaxPool1d": 1, "MaxPool2d": 2, "MaxPool3d": 3, "AdaptiveMaxPool1d": 1, "AdaptiveMaxPool2d": 2,
             "AdaptiveMaxPool3d": 3, "FractionalMaxPool2d": 2, "FractionalMaxPool3d": 3}
SPACING = 0.5


def _pooled_dimensions(module: Any) -> int | None:
    """How many trailing dimensions a max pooling module's windows span; None for any other module."""
    return MAX_POOLS.get(type(module).__name__)


def spaced(values: np.ndarray, dimensions: int) -> np.ndarray:
    """``values`` in the same order within each plane of their last ``dimensions`` axes, SPACING apart around 0."""
    planes = values.reshape(-1, int(np.prod(values.shape[values.ndim - dimensions:], dtype=int)))
    ranks = np.argsort(np.argsort(planes, axis=1, kind="stable"), axis=1, kind="stable")
    return ((ranks - (planes.shape[1] - 1) / 2) * SPACING).reshape(values.shape)


def _through_python_function(value: Any) -> bool:
    """Whether ``value``'s autograd graph has a node of a Python torch.autograd.Function."""
    import torch

    seen, stack = set(), [value.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            return True
        stack.extend(next_node for next_node, _ in node.next_functions)
    return False


def _differentiable(leaf: Any) -> bool:
    """What torch's own sample marks as differentiated: a loss's input, not its target or its labels."""
    import torch

    return isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.requires_grad


def _constant(leaf: Any) -> Any:
    import torch

    return leaf.detach() if isinstance(leaf, torch.Tensor) else leaf


def _torch_tree(tree: Any, grad: bool = False) -> Any:
    import torch

    if isinstance(tree, dict):
        return {key: _torch_tree(value, grad) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_torch_tree(value, grad) for value in tree]
    return torch.tensor(tree, requires_grad=grad)


def _call(module: Any, template: list[Any], spec: Any) -> Callable[..., Any]:
    """loss(x, buffers): the module called through functional_call on x's parameters and inputs."""
    def loss(x: dict[str, Any], buffers: dict[str, Any]) -> Any:
        from torch.func import functional_call
        from torch.utils._pytree import tree_unflatten

        inputs = iter(x.get("inputs", []))
        like = next(iter(_leaves(x)))
        leaves = [next(inputs) if slot is None else _beside(slot, like) for slot in template]
        args, kwargs = tree_unflatten(leaves, spec)
        return weighted_sum(functional_call(module, {**x.get("params", {}), **buffers}, tuple(args), kwargs))

    return loss


def _leaves(x: dict[str, Any]) -> list[Any]:
    return [*x.get("params", {}).values(), *x.get("inputs", [])]


def _beside(slot: Any, like: Any) -> Any:
    """A fixed argument on the device of the differentiated ones: a target in their dtype, indices as they are."""
    import torch

    if not isinstance(slot, torch.Tensor):
        return slot
    return slot.to(device=like.device, dtype=like.dtype if slot.is_floating_point() else slot.dtype)


def weighted_sum(out: Any) -> Any:
    """A fixed, nowhere-degenerate weighting of every floating-point output, summed: linear in the outputs."""
    import torch
    from torch.utils._pytree import tree_leaves

    total = None
    for leaf in tree_leaves(out):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            weights = torch.cos(torch.arange(leaf.numel(), dtype=leaf.dtype, device=leaf.device) * 0.7 + 0.3)
            term = (leaf * weights.reshape(leaf.shape)).sum()
            total = term if total is None else total + term
    if total is None:
        raise ValueError("the module returned no floating-point output")
    return total


def _scenarios_of(case: ModuleCase) -> list[Scenario]:
    module_name = case.name.split("[")[0]
    made = []
    for operator in OPERATORS:
        xfail = [Expect(known.reason, backend=known.backend, dtype=known.dtype, raises=known.raises, match=known.match)
                 for known in KNOWN if module_name in known.modules and operator in known.operators
                 and known.applies(case)]
        made.append(Scenario(
            name=f"{FAMILY}/{case.name}/{operator}", operator=operator, f={"torch": case.call}, x=case.x,
            contexts=(case.buffers,), state=(0,), xfail=xfail,
            tags=(FAMILY, "torch", f"module:{module_name}", *(("second-order",) if operator == "hvp" else ())),
        ))
    return made

