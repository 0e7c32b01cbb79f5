"""Backends that run a framework's own differentiation (torch, jax): the shared cell preparation."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import optree
from array_api_compat import is_jax_array, is_torch_array

from gradci.scenarios.adapters import FrameworkUnavailable, get_framework
from gradci.scenarios.adapters.adapter import arrays_apart
from gradci.scenarios.authoring.scenario import Tangents, map_tangents
from gradci.scenarios.backends.base import Backend, CellSkipped, ComputedPattern, Prepared, ReturnedPrimal
from gradci.scenarios.backends.complex_cells import ComplexCell
from gradci.scenarios.contract.devices import CPU, execution_device
from gradci.scenarios.operators.records import OPERATOR_RECORDS, WithPrimal
from gradci.scenarios.operators.vocabulary import Transforms
from gradci.scenarios.rules.tracing import kept_program

# Forward mode builds some operators (``Operator.per_input_in_forward``) from one JVP per input
# element, all at once, vectorised: past this many elements that is too much memory and time to be
# worth it (a 100k-parameter gradient would ask for tens of GB); such cells are skipped with the reason.
FORWARD_INPUT_LIMIT = 4096

# Compiled computations kept for later cells. A compiler caches by the function object (jax.jit), so a
# fresh closure per cell would be traced, lowered and compiled anew where an earlier cell built the same
# program: the same function, operator and contexts at another point, or in a check run again in one
# process. Few are kept: a kept jitted computation holds its jaxprs, lowered modules and executables
# (about 1.7 MB each on the CPU, measured), and a check's cells rarely repeat a program (another dtype
# is another program). f's traced value dtypes, which every backend and operator of a function and
# dtype share, cost next to nothing to keep.
PROGRAMS_KEPT = 64
VALUE_DTYPES_KEPT = 4096


class KeptPrograms:
    """A bounded map of reusable values, the least recently used dropped first."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()

    def get_or_make(self, key: Hashable | None, make: Callable[[], Any]) -> Any:
        """The value kept under ``key``, else ``make()``, kept (a None key: made, not kept)."""
        if key is None:
            return make()
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        value = self._entries[key] = make()
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries


PROGRAMS = KeptPrograms(PROGRAMS_KEPT)  # (backend, operator, batched, function key) -> compiled computation
VALUE_DTYPES = KeptPrograms(VALUE_DTYPES_KEPT)  # (framework, function key, input shapes and dtypes) -> value_dtypes


class FrameworkBackend(Backend):
    """Converts inputs to the framework on the device and dtype, then applies ``operator_fn``.

    Subclasses give ``operator_fn(operator, f, x, tangent)`` and may wrap the whole computation
    (``compile``), e.g. in ``jax.jit``.
    """

    requires_grad = False
    # Which of an operator record's definitions ``operator_fn`` runs ("reverse", "forward",
    # "autograd"): the record's ``primal_from`` names the transform that returned the primal.
    definition = ""
    # What most likely made a transform's primal differ from f(x), for the cell's message.
    primal_culprit = "a custom derivative rule whose forward pass returns another value than the function?"
    # Why it has no cells of complex x (None: it has, ``complex_cells``).
    complex_refused: str | None = None

    @property
    def adapter(self):
        return get_framework(self.framework)

    def unavailable(self) -> str | None:
        try:
            get_framework(self.framework)
        except FrameworkUnavailable as exc:
            return str(exc)
        return None

    def device_unavailable(self, device: str) -> str | None:
        return self.adapter.device_unavailable(device)

    def dtype_unavailable(self, device: str, dtype: str) -> str | None:
        return self.adapter.dtype_unavailable(device, dtype)

    def operator_fn(self, operator: str, f: Callable, x: Any, tangent: Any) -> Any:
        raise NotImplementedError

    def transforms(self) -> Transforms | None:
        """The functional transforms ``operator_fn`` runs, or None where it runs none."""
        return None

    def primal_source(self, operator: str) -> str:
        """The transform that returned the primal of ``operator``'s cells, as its message names it."""
        template = OPERATOR_RECORDS[operator].primal_from.get(self.definition, "the transform returned")
        transforms = self.transforms()
        return template.format(T=transforms.name if transforms else "")

    def cell_operator(self, scenario) -> tuple[Callable, Callable[[], ComputedPattern | None]]:
        """The operator function a cell of ``scenario`` runs, and the sparsity pattern it computed from.

        ``operator_fn``, and no pattern, but for a sparse backend (``sparse_backends``).
        """
        return self.operator_fn, lambda: None

    def compile(self, computation: Callable) -> Callable:
        return computation

    def compiles(self) -> bool:
        """Whether ``compile`` compiles: its first call traces and compiles, later ones run the program."""
        return False

    def result_ready(self, result: Any) -> Any:
        """Wait until the result is computed (asynchronous dispatch), return it."""
        return result

    def prepare(self, scenario, tangent, device, dtype) -> Prepared:
        operator = scenario.operator
        if not self.computes(operator):
            raise CellSkipped(f"{self.name} computes no {operator}")
        fn = scenario.implementation(self.framework, dtype, execution_device(device))
        if fn is None:
            raise CellSkipped(f"the scenario has no {self.framework} implementation")
        if self.mode == "forward" and OPERATOR_RECORDS[operator].per_input_in_forward:
            size = sum(leaf.size for leaf in optree.tree_leaves(scenario.x, none_is_leaf=True))
            if size > FORWARD_INPUT_LIMIT:
                raise CellSkipped(f"forward mode needs one JVP per input element: {size} elements is over "
                                  f"{FORWARD_INPUT_LIMIT} (the reverse-mode cells check this operator)")
        operator_fn, computed_pattern = self.cell_operator(scenario)
        adapter = self.adapter
        complex_cell = self._complex_cell(scenario, dtype)
        if complex_cell is not None:
            fn = complex_cell.function(fn)

        def converted(x, tangent):
            if complex_cell is not None:
                x, tangent = complex_cell.inputs(x, tangent)
            fx = adapter.to_framework(x, dtype, device, requires_grad=self.requires_grad)
            ft = map_tangents(lambda t: adapter.to_framework(t, dtype, device), tangent)
            # a plain tuple: compilers (jax.jit) accept only their own pytree types
            return fx, tuple(ft) if isinstance(ft, Tangents) else ft

        fx, ft = converted(scenario.x, tangent)
        fcontexts = adapter.to_framework(tuple(scenario.contexts), dtype, device)
        batched = isinstance(tangent, Tangents)
        with_state = _state_resetter(adapter, scenario.state)
        context_arrays, contexts_with = arrays_apart(fcontexts)

        def computation(x_, tangent_, arrays_):
            contexts_ = contexts_with(arrays_)

            def f(z):
                return fn(z, *with_state(contexts_))

            if batched:
                return tuple(operator_fn(operator, f, x_, t) for t in tangent_)
            return operator_fn(operator, f, x_, tangent_)

        traced = getattr(adapter, "value_dtypes_traced", False)
        function = _function_key(fn, scenario.state, fcontexts) if self.compiles() or traced else None
        reusable = None if function is None or not self.compiles() else (self, operator, batched, function)
        if reusable is not None:  # a reused program runs its trace's rules without their Python
            kept_program(reusable, made=reusable not in PROGRAMS)
        compiled = PROGRAMS.get_or_make(reusable, lambda: self.compile(computation))
        ready = self.result_ready
        # Decided once, not per timed call: a simulated GPU computes on the CPU, with nothing to wait for.
        sync = (lambda: adapter.synchronize(device)) if execution_device(device) != CPU else (lambda: None)

        last_primal: list[Any] = [None]

        def call_at(x_, tangent_):
            def call():
                result = ready(compiled(x_, tangent_, context_arrays))
                sync()
                result, last_primal[0] = _primal_apart(result, batched)
                return result
            return call

        def returned_primal() -> ReturnedPrimal | None:
            if last_primal[0] is None:
                return None
            return ReturnedPrimal(adapter.to_numpy(last_primal[0]), self.primal_source(operator), self.primal_culprit)

        def value_dtypes():  # shared where f's trace decides them: by f and its inputs' shapes and dtypes
            key = (None if not traced or function is None else
                   (self.framework, function, _shapes_and_dtypes(fx), _shapes_and_dtypes(context_arrays)))
            return VALUE_DTYPES.get_or_make(key, lambda: adapter.value_dtypes(
                lambda z: fn(z, *with_state(fcontexts)), fx))

        to_numpy, result_dtypes = adapter.to_numpy, adapter.result_dtypes
        if complex_cell is not None:
            to_numpy, result_dtypes = complex_cell.to_numpy(to_numpy), complex_cell.result_dtypes(result_dtypes)
        return Prepared(call=call_at(fx, ft), to_numpy=to_numpy, inputs=(fx, ft, fcontexts),
                        value_dtypes=value_dtypes, result_dtypes=result_dtypes, compiled=self.compiles(),
                        returned_primal=returned_primal, computed_pattern=computed_pattern,
                        at=lambda x, tangent: call_at(*converted(x, tangent)),
                        convention=complex_cell.convention if complex_cell is not None else "")

    def _complex_cell(self, scenario, dtype: str) -> ComplexCell | None:
        """How a cell of complex x runs here (``complex_cells``); None for a real x."""
        if scenario.complex_parts is None:
            return None
        if self.complex_refused:
            raise CellSkipped(self.complex_refused)
        return ComplexCell(scenario, self.framework, self.definition, dtype)


def _primal_apart(result: Any, batched: bool) -> tuple[Any, Any]:
    """(the derivative, the primal its transform returned, or None), one of each per tangent where batched."""
    if not batched:
        return (result.derivative, result.primal) if isinstance(result, WithPrimal) else (result, None)
    parts = [_primal_apart(one, batched=False) for one in result]
    primals = tuple(primal for _, primal in parts)
    return tuple(derivative for derivative, _ in parts), (None if any(p is None for p in primals) else primals)


# Leaves whose repr tells their values apart (0.0 from -0.0, 1 from True, with the type beside it).
_LITERALS = (bool, int, float, complex, str, bytes, type(None), np.generic)


def _function_key(fn: Callable, state: tuple[int, ...], contexts: Any) -> Hashable | None:
    """The key a cell's computation is reused under, besides its arrays' shapes and dtypes.

    The compiler's own cache tells shapes and dtypes apart. The key holds the function, by identity,
    the state positions, and the contexts' structure with their non-array leaves. None where a
    non-array leaf is not a literal (an object, a numpy array of strings): the computation is then
    never reused.
    """
    leaves, spec = optree.tree_flatten(contexts, none_is_leaf=True)
    constants = []
    for leaf in leaves:
        if is_jax_array(leaf) or is_torch_array(leaf):
            continue
        if not isinstance(leaf, _LITERALS):
            return None
        constants.append((type(leaf), repr(leaf)))
    try:
        key = (Same(fn), state, spec, tuple(constants))
        hash(key)
    except TypeError:
        return None
    return key


class Same:
    """An object as part of a key, by identity (held, so that no other object takes its id)."""

    __slots__ = ("held",)

    def __init__(self, held: Any):
        self.held = held

    def __hash__(self) -> int:
        return id(self.held)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Same) and other.held is self.held


def _shapes_and_dtypes(tree: Any) -> Hashable:
    """A pytree's structure and its leaves' shapes and dtypes (others by type and repr)."""
    leaves, spec = optree.tree_flatten(tree, none_is_leaf=True)
    return spec, tuple((tuple(leaf.shape), str(leaf.dtype)) if hasattr(leaf, "dtype") and hasattr(leaf, "shape")
                       else (type(leaf), repr(leaf)) for leaf in leaves)


def _state_resetter(adapter, state: tuple[int, ...]) -> Callable[[tuple], tuple]:
    """contexts -> the contexts each evaluation sees: declared state as a fresh copy of its value."""
    if not state:
        return lambda contexts: contexts
    return lambda contexts: tuple(adapter.fresh_copy(c) if i in state else c for i, c in enumerate(contexts))


def block_until_ready(tree: Any) -> Any:
    import jax

    return jax.block_until_ready(tree)
