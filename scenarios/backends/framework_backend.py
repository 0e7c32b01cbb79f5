"""Backends that run a framework's own differentiation (torch, jax): the shared cell preparation."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optree

from gradci.scenarios.adapters import FrameworkUnavailable, get_framework
from gradci.scenarios.adapters.adapter import arrays_apart
from gradci.scenarios.authoring.scenario import Tangents, map_tangents
from gradci.scenarios.backends.base import Backend, CellSkipped, Prepared
from gradci.scenarios.contract.devices import CPU, execution_device
from gradci.scenarios.operators.records import OPERATOR_RECORDS

# Forward mode builds some operators (``Operator.per_input_in_forward``) from one JVP per input
# element, all at once, vectorised: past this many elements that is too much memory and time to be
# worth it (a 100k-parameter gradient would ask for tens of GB); such cells are skipped with the reason.
FORWARD_INPUT_LIMIT = 4096


class FrameworkBackend(Backend):
    """Converts inputs to the framework on the device and dtype, then applies ``operator_fn``.

    Subclasses give ``operator_fn(operator, f, x, tangent)`` and may wrap the whole computation
    (``compile``), e.g. in ``jax.jit``.
    """

    requires_grad = False

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

    def compile(self, computation: Callable) -> Callable:
        return computation

    def result_ready(self, result: Any) -> Any:
        """Wait until the result is computed (asynchronous dispatch), return it."""
        return result

    def prepare(self, scenario, tangent, device, dtype) -> Prepared:
        fn = scenario.implementation(self.framework, dtype, execution_device(device))
        if fn is None:
            raise CellSkipped(f"the scenario has no {self.framework} implementation")
        operator = scenario.operator
        if self.mode == "forward" and OPERATOR_RECORDS[operator].per_input_in_forward:
            size = sum(leaf.size for leaf in optree.tree_leaves(scenario.x, none_is_leaf=True))
            if size > FORWARD_INPUT_LIMIT:
                raise CellSkipped(f"forward mode needs one JVP per input element: {size} elements is over "
                                  f"{FORWARD_INPUT_LIMIT} (the reverse-mode cells check this operator)")
        adapter = self.adapter
        fx = adapter.to_framework(scenario.x, dtype, device, requires_grad=self.requires_grad)
        ft = map_tangents(lambda t: adapter.to_framework(t, dtype, device), tangent)
        fcontexts = adapter.to_framework(tuple(scenario.contexts), dtype, device)

        batched = isinstance(ft, Tangents)
        if batched:
            ft = tuple(ft)  # a plain tuple: compilers (jax.jit) accept only their own pytree types
        with_state = _state_resetter(adapter, scenario.state)
        context_arrays, contexts_with = arrays_apart(fcontexts)

        def computation(x_, tangent_, arrays_):
            contexts_ = contexts_with(arrays_)

            def f(z):
                return fn(z, *with_state(contexts_))

            if batched:
                return tuple(self.operator_fn(operator, f, x_, t) for t in tangent_)
            return self.operator_fn(operator, f, x_, tangent_)

        compiled = self.compile(computation)
        ready = self.result_ready
        # Decided once, not per timed call: a simulated GPU computes on the CPU, with nothing to wait for.
        sync = (lambda: adapter.synchronize(device)) if execution_device(device) != CPU else (lambda: None)

        def call():
            result = ready(compiled(fx, ft, context_arrays))
            sync()
            return result

        return Prepared(call=call, to_numpy=adapter.to_numpy, inputs=(fx, ft, fcontexts),
                        value_dtypes=lambda: adapter.value_dtypes(lambda z: fn(z, *with_state(fcontexts)), fx))


def _state_resetter(adapter, state: tuple[int, ...]) -> Callable[[tuple], tuple]:
    """contexts -> the contexts each evaluation sees: declared state as a fresh copy of its value."""
    if not state:
        return lambda contexts: contexts
    return lambda contexts: tuple(adapter.fresh_copy(c) if i in state else c for i, c in enumerate(contexts))


def block_until_ready(tree: Any) -> Any:
    import jax

    return jax.block_until_ready(tree)
