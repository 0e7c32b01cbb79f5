"""What a cell says about an exception from the user's code.

Its first line and where in the user's code it was raised, so that the message alone leads to the
line to fix.

The user's frame is the innermost frame outside gradci, the standard library and installed
packages (the frameworks): where the scenario's own function, or a module of theirs it calls, was
when the exception left it. Its file is named relative to the import root it was found under (the
repository's root, on ``sys.path`` while its scenarios run).
"""
from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from functools import cache
from pathlib import Path

FULL_TEXT_LIMIT = 4096

# Framework messages that do not say what to do, and what to do: (a piece of the message, the hint).
HINTS = (
    ("does not require grad and does not have a grad_fn",
     "a gradient the backward returned cannot be differentiated again (a backward written with .detach(), "
     "numpy or no_grad, or marked once_differentiable): second-order cells need a differentiable backward"),
    ("must override the setup_context staticmethod",
     "torch.func needs autograd.Functions in the setup_context style; until then declare the torch-func-* "
     "cells expected to fail ([[expect]] in gradci.toml)"),
    ("implement the jvp function for custom autograd.Function",
     "forward mode needs the Function's jvp staticmethod (with ctx.save_for_forward); or declare the "
     "forward cells expected to fail"),
    ("can't apply forward-mode autodiff (jvp) to a custom_vjp function",
     "a jax.custom_vjp has no forward mode: declare the jax-fwd cells expected to fail, or use custom_jvp "
     "(under jax-fwd-rev, a custom_vjp the reverse pass runs, in a bwd too: jax.hessian cannot go through it)"),
    ("Custom JVP rule must produce primal and tangent outputs with corresponding",
     "the custom_jvp rule's tangent has another dtype than its output: under jax_enable_x64 a float32 input "
     "promoted to float64 inside the rule (an int64 count, a float64 constant) gives this"),
)

# Import roots of the projects whose scenarios were loaded: user files are named relative to them.
_roots: set[Path] = set()


def add_import_root(root: Path | str) -> None:
    _roots.add(Path(root).resolve())


@cache
def _not_users() -> tuple[str, ...]:
    """Folders whose code is not the user's.

    gradci's own (every layer), the standard library, installed packages.
    """
    from gradci._layout import code_folders

    folders = {str(folder) for folder in code_folders()}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            folders.add(str(Path(path).resolve()))
    folders |= {str(Path(p).resolve()) for p in sys.path if "site-packages" in p or "dist-packages" in p}
    return tuple(sorted(folders))


def is_users_file(filename: str) -> bool:
    """Whether ``filename`` is the user's code: not gradci's, the standard library's or an installed package's."""
    return _is_users(filename)


def shown_file(filename: str) -> str:
    """``filename`` as a user finds it: relative to the import root it lies under."""
    return _shown(filename)


def _is_users(filename: str) -> bool:
    if filename.startswith("<"):  # exec'd code, frozen modules: not a file to open
        return False
    resolved = str(Path(filename).resolve())
    return not any(resolved == folder or resolved.startswith(folder + os.sep) for folder in _not_users())


def _shown(filename: str) -> str:
    """The file relative to the longest import root it lies under (else as given)."""
    resolved = Path(filename).resolve()
    roots = [Path(entry or ".").resolve() for entry in sys.path] + list(_roots)
    under = [root for root in roots if resolved.is_relative_to(root)]
    return str(resolved.relative_to(max(under, key=lambda r: len(r.parts)))) if under else filename


def user_frame(exc: BaseException) -> str:
    """"file:line in function" of the innermost user frame of ``exc``'s traceback ("" when none)."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if _is_users(frame.filename)]
    if not frames:
        return ""
    frame = frames[-1]
    return f"{_shown(frame.filename)}:{frame.lineno} in {frame.name}"


def describe_exception(exc: BaseException, limit: int) -> str:
    """One line for a cell's message: the type, the first line, and where in the user's code."""
    lines = str(exc).strip().splitlines()
    where = user_frame(exc)
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    hint = next((hint for piece, hint in HINTS if piece in str(exc)), "")
    suffix = " ".join(filter(None, (f"(at {where})" if where else "", f"— {hint}" if hint else "")))
    if len(text) + len(suffix) + 1 > limit:  # the place and the hint matter more than the rest of the line
        text = text[:max(limit - len(suffix) - 2, 40)] + "…"
    return f"{text} {suffix}".strip()[:limit]


def full_text(exc: BaseException) -> str:
    """The whole exception text, every line, bounded."""
    text = f"{type(exc).__name__}: {str(exc).strip()}"
    return text if len(text) <= FULL_TEXT_LIMIT else text[:FULL_TEXT_LIMIT - 15] + " … (truncated)"
