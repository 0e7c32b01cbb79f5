"""jax-sparse-asdex, jax-sparse-sparsejac: sparse Jacobians and Hessians from a sparsity pattern and a coloring.

As JAX users compute them: ``asdex`` detects the pattern from f's jaxpr, colors it and decompresses
a few VJPs/JVPs (HVPs for a Hessian); ``sparsejac`` colors a given pattern (the scenario's declared
``sparsity=``, else asdex's detected one) with networkx. An entry the pattern leaves out comes out 0
whatever f's derivative is there, so the cell records the pattern it computed from
(``Prepared.computed_pattern``) and the verdict names such an entry (``gradci.scenarios.verdict.sparsity``).

Opt-in (``default=False``): they check the sparse libraries, not f's derivative rules, which the
dense backends already check; and the cells a check makes should not depend on what happens to be
installed. Name them (``--backends jax-sparse-asdex``) after ``pip install 'gradci[sparse]'``.
They run op by op: asdex reads f's jaxpr outside any jit, once per cell.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np

from gradci.scenarios.backends.base import CellSkipped, ComputedPattern
from gradci.scenarios.backends.jax_backends import JaxBackend
from gradci.scenarios.numerics.sparsity import SPARSE_OPERATORS

INSTALL_HINT = "pip install 'gradci[sparse]'"


def detected_pattern(operator: str, f_flat: Callable, x_flat: Any) -> np.ndarray:
    """asdex's detected pattern of the Jacobian or Hessian of ``f_flat`` (vector in, vector or scalar out)."""
    import asdex  # pyright: ignore[reportMissingImports]  # optional: gradci[sparse]

    detect = asdex.hessian_sparsity if operator == "hessian" else asdex.jacobian_sparsity
    return np.asarray(detect(f_flat, x_flat).todense(), dtype=bool)


def asdex_derivative(operator: str, f_flat: Callable, x_flat: Any, pattern: np.ndarray) -> Any:
    """The Jacobian or Hessian matrix of ``f_flat`` by asdex's coloring of ``pattern``, dense."""
    import asdex  # pyright: ignore[reportMissingImports]  # optional: gradci[sparse]

    if operator == "hessian":
        coloring = asdex.hessian_coloring_from_sparsity(pattern)
        return asdex.hessian_from_coloring(f_flat, coloring, output_format="dense")(x_flat)
    coloring = asdex.jacobian_coloring_from_sparsity(pattern)
    return asdex.jacobian_from_coloring(f_flat, coloring, output_format="dense")(x_flat)


def sparsejac_derivative(operator: str, f_flat: Callable, x_flat: Any, pattern: np.ndarray) -> Any:
    """The Jacobian (sparsejac.jacrev) or Hessian (sparsejac.jacrev of jax.grad) matrix of ``f_flat``, dense.

    Not jacfwd: it builds its tangents as Python floats, float64 under x64, and a float32 x refuses them.
    """
    import jax
    import sparsejac  # pyright: ignore[reportMissingImports]  # optional: gradci[sparse]
    from jax.experimental import sparse

    sparsity = sparse.BCOO.fromdense(jax.numpy.asarray(pattern, dtype=x_flat.dtype))  # its dtype is the tangents'
    if operator == "hessian":
        return sparsejac.jacrev(jax.grad(f_flat), sparsity)(x_flat).todense()
    return sparsejac.jacrev(f_flat, sparsity)(x_flat).todense()


class SparseJaxBackend(JaxBackend):
    """A jax backend computing a Jacobian or Hessian from a sparsity pattern, by coloring."""

    complex_refused = "sparse Jacobians of complex x are not checked (the dense backends check them)"

    def __init__(self, name: str, library: str, derivative: Callable, uses_declared: bool, note: str):
        super().__init__(name, "reverse", default=False, composition_note=note)
        self.library, self.derivative, self.uses_declared = library, derivative, uses_declared

    def computes(self, operator: str) -> bool:
        return operator in SPARSE_OPERATORS

    def unavailable(self) -> str | None:
        missing = super().unavailable()
        if missing is None and importlib.util.find_spec(self.library) is None:
            missing = f"{self.library} is not installed: {INSTALL_HINT}"
        return missing

    def cell_operator(self, scenario) -> tuple[Callable, Callable[[], ComputedPattern | None]]:
        """The cell's operator, and the pattern it computed from (known after the first call)."""
        if not isinstance(scenario.x, np.ndarray):
            raise CellSkipped(f"{self.name} computes the Jacobian or Hessian of a single array x, not of a pytree")
        found: list[ComputedPattern] = []

        def operator_fn(operator: str, f: Callable, x: Any, tangent: Any) -> Any:
            f_flat, x_flat = _flattened(operator, f, x)
            if not found:
                pattern, source = self._pattern(scenario, operator, f_flat, x_flat)
                found.append(ComputedPattern(pattern, source, dense=lambda: _dense(operator, f_flat, x_flat)))
            matrix = self.derivative(operator, f_flat, x_flat, found[0].matrix)
            return matrix.reshape(_result_shape(operator, f, x))

        return operator_fn, lambda: found[0] if found else None

    def _pattern(self, scenario, operator: str, f_flat: Callable, x_flat: Any) -> tuple[np.ndarray, str]:
        """The pattern the cell computes from, and where it came from."""
        if self.uses_declared and scenario.sparsity is not None:
            return scenario.sparsity, "the declared sparsity pattern"
        if importlib.util.find_spec("asdex") is None:
            raise CellSkipped(f"the scenario declares no sparsity= and asdex, which would detect one, is not "
                              f"installed: {INSTALL_HINT}")
        return detected_pattern(operator, f_flat, x_flat), "asdex's detected sparsity pattern"


def _dense(operator: str, f_flat: Callable, x_flat: Any) -> np.ndarray:
    """jax's dense Jacobian or Hessian matrix of ``f_flat``, float64 numpy."""
    import jax

    transform = jax.hessian if operator == "hessian" else jax.jacrev
    return np.asarray(transform(f_flat)(x_flat), dtype=np.float64)


def _flattened(operator: str, f: Callable, x: Any) -> tuple[Callable, Any]:
    """f as a function of x's elements as one vector, answering a vector (a scalar for a Hessian)."""
    shape = x.shape
    if operator == "hessian":
        return (lambda v: f(v.reshape(shape))), x.reshape(-1)
    return (lambda v: f(v.reshape(shape)).reshape(-1)), x.reshape(-1)


def _result_shape(operator: str, f: Callable, x: Any) -> tuple[int, ...]:
    import jax

    outer = x.shape if operator == "hessian" else jax.eval_shape(f, x).shape
    return tuple(outer) + tuple(x.shape)


def sparse_jax_backends() -> list[SparseJaxBackend]:
    return [
        SparseJaxBackend("jax-sparse-asdex", "asdex", asdex_derivative, uses_declared=False,
                         note="asdex (detected sparsity pattern, coloring, compressed VJPs/JVPs or HVPs)"),
        SparseJaxBackend("jax-sparse-sparsejac", "sparsejac", sparsejac_derivative, uses_declared=True,
                         note="sparsejac (declared or asdex-detected pattern, coloring, jacrev; of grad: Hessian)"),
    ]
