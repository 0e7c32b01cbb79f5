"""What jax does with the functions a project hands to custom_linear_solve and custom_root, as it does it.

jax traces every function handed to ``custom_linear_solve`` (``solve``, ``transpose_solve``) or to
``custom_root`` (``solve``, ``tangent_solve``) when the call is made, whatever is then differentiated:
their lines run in a cell that never uses them for a derivative, so lines cannot say which one a cell
used. jax's own derivative rules of the two calls can, and they run when a derivative is traced (under
``jax.jit`` too, at trace time):

- ``custom_linear_solve``'s JVP rule solves for the tangent with ``solve`` (``TANGENT``); in reverse mode
  jax then transposes that solve (``TRANSPOSE``), which solves for the cotangent with ``transpose_solve``
  instead: ``solve`` served a derivative where the tangent solves of a cell outnumber the transposed ones;
- ``custom_root``'s JVP rule solves for the tangent with ``tangent_solve`` (``TANGENT``), in both modes
  (reverse mode transposes what it traced).

``watch_jax_solvers`` wraps those three rules once per process; each step is told to the hooks of
``on_solver_use`` as a ``SolverUse`` that names the functions by the source jax recorded for them (file,
first line, and the parameter they were handed as). A hook returns the step's output, changed or not:
detection power (``gradci.scenarios.power.planting``) changes ``transpose_solve``'s cotangent or
``tangent_solve``'s tangent there, never the primal value. This reads jax's internals
(``jax._src.lax.control_flow.solves``); where they are not as expected, nothing is watched, and
``watching`` says so.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

TANGENT, TRANSPOSE = "tangent", "transpose"
# The parameters of the solvers whose functions serve derivatives; a function's role is the one it was handed as.
ROLES = ("solve", "transpose_solve", "tangent_solve")

SolverHook = Callable[["SolverUse", Any], Any]


@dataclasses.dataclass(frozen=True)
class Source:
    """A function jax traced for a solver: its file (links followed), first line and role."""

    file: str
    line: int
    role: str  # "solve", "transpose_solve" or "tangent_solve"


@dataclasses.dataclass(frozen=True)
class SolverUse:
    """One derivative step of a solver: the function it runs, and the one it runs instead of (a transpose)."""

    step: str  # TANGENT or TRANSPOSE
    solver: str  # "custom_linear_solve" or "custom_root"
    runs: Source | None
    instead_of: Source | None = None  # TRANSPOSE: the tangent solve transposed, which never runs


_hooks: list[SolverHook] = []
_watching = False


def watching() -> bool:
    """Whether jax's solver rules are watched in this process (jax loaded, its internals as expected)."""
    return _watching


def on_solver_use(hook: SolverHook) -> Callable[[], None]:
    """Call ``hook(use, output)`` at each step from now on (it returns the output); the function that stops it."""
    _hooks.append(hook)
    return lambda: _hooks.remove(hook)


def used_sources(uses: Iterable[SolverUse]) -> set[Source]:
    """The functions that served a derivative in these steps of one cell (see the module's docstring)."""
    used: set[Source] = set()
    tangents: Counter[Source] = Counter()
    for use in uses:
        if use.runs is None:
            continue
        if use.step == TRANSPOSE:
            used.add(use.runs)
            if use.instead_of is not None:
                tangents[use.instead_of] -= 1
        else:
            tangents[use.runs] += 1
    return used | {source for source, count in tangents.items() if count > 0}


def watch_jax_solvers() -> None:
    """Wrap jax's derivative rules of custom_linear_solve and custom_root, once per process (where jax is loaded)."""
    global _watching
    if _watching or "jax" not in sys.modules:
        return
    try:
        from jax._src.interpreters import ad
        from jax._src.lax.control_flow import solves

        primitive, root = solves.linear_solve_p, solves._custom_root
        jvp, transpose = ad.primitive_jvps[primitive], ad.primitive_transposes[primitive]
        root_jvp: Callable[..., Any] | None = root.jvp
    except (ImportError, AttributeError, KeyError):  # another jax: its solvers' rules are not watched
        return
    if root_jvp is None:
        return

    def linear_jvp(primals: Any, tangents: Any, *, const_lengths: Any, jaxprs: Any) -> Any:
        use = SolverUse(TANGENT, "custom_linear_solve", _source(jaxprs.solve))
        return _told(use, jvp(primals, tangents, const_lengths=const_lengths, jaxprs=jaxprs))

    def linear_transpose(cotangent: Any, *primals: Any, const_lengths: Any, jaxprs: Any) -> Any:
        out = transpose(cotangent, *primals, const_lengths=const_lengths, jaxprs=jaxprs)
        use = SolverUse(TRANSPOSE, "custom_linear_solve", _source(jaxprs.transpose_solve), _source(jaxprs.solve))
        count = sum(const_lengths)  # the operator's constants get no cotangent (None): b's come after them
        return [*out[:count], *_told(use, list(out[count:]))]

    def tangent_of_root(const_lengths: Any, jaxprs: Any, primals: Any, tangents: Any) -> Any:
        use = SolverUse(TANGENT, "custom_root", _source(jaxprs.l_and_s))
        return _told(use, root_jvp(const_lengths, jaxprs, primals, tangents))

    ad.primitive_jvps[primitive] = functools.update_wrapper(linear_jvp, jvp)
    ad.primitive_transposes[primitive] = functools.update_wrapper(linear_transpose, transpose)
    root.jvp = functools.update_wrapper(tangent_of_root, root_jvp)
    _watching = True


def _told(use: SolverUse, out: Any) -> Any:
    for hook in list(_hooks):
        out = hook(use, out)
    return out


def _source(closed_jaxpr: Any) -> Source | None:
    """The function a solver's jaxpr was traced from, by the debug info jax keeps on it."""
    info = getattr(getattr(closed_jaxpr, "jaxpr", None), "debug_info", None)
    role = str(getattr(info, "traced_for", "") or "").rpartition(" ")[2]  # "custom_linear_solve transpose_solve"
    where = str(getattr(info, "func_src_info", "") or "").partition(" at ")[2]  # "name at /path/file.py:12"
    file, _, line = where.rpartition(":")
    if role not in ROLES or not file or not line.isdigit():
        return None
    return Source(_real(file), int(line), role)


@functools.lru_cache(maxsize=1024)
def _real(path: str) -> str:
    return os.path.realpath(path)
