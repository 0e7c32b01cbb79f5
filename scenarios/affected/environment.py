"""What every cell of a check depends on beside the project's code: software, configuration, device.

Three parts, each a flat mapping of names to versions or digests, so that a change can be told in
words ("torch 2.13.0 → 2.14.0", "gradci.toml changed"):

- ``software``: Python, the machine's architecture, gradci (its version and a digest of its own
  source, since a development install keeps one version across edits), numpy, scipy, the frameworks
  and every CUDA component installed as a package (``nvidia-*``, ``jax-cuda*``);
- ``config``: the project's gradci.toml, its lockfiles and requirement files, and the options the
  check was asked with (but those that change no verdict: ``NOT_INPUTS``);
- ``device``: the record of the device the cells ran on (model, driver, CUDA), as its caller knows it.

Read from package metadata and files only: nothing is imported, so a planner can compute it as cheaply
as a runner.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import Path
from typing import Any

from gradci.scenarios.affected.recording import inside
from gradci.scenarios.affected.source_digest import bytes_digest

PACKAGES = ("gradci", "numpy", "scipy", "jax", "jaxlib", "torch", "ml_dtypes", "opt_einsum", "optree")
CUDA_PACKAGES = ("nvidia-", "jax-cuda", "jax_cuda")
CONFIG_FILES = ("gradci.toml", "pyproject.toml", "setup.cfg", "setup.py", "uv.lock", "poetry.lock", "pdm.lock",
                "Pipfile.lock", "pixi.lock", "environment.yml", "conda-lock.yml")
REQUIREMENTS = ("requirements*.txt", "constraints*.txt", "requirements/*.txt")
Environment = dict[str, dict[str, str]]
# The engine's options that change no verdict: a cell computed with or without them is the same cell.
NOT_INPUTS = ("rule_coverage", "power")


def environment(root: str | Path | None, options: Mapping[str, Any] | None = None,
                device: Mapping[str, Any] | None = None) -> Environment:
    """The check's environment: ``software``, ``config`` (of ``root`` and ``options``) and ``device``."""
    return {"software": software(), "config": config(root, options or {}),
            "device": {str(k): _text(v) for k, v in sorted((device or {}).items())}}


@functools.cache
def software() -> dict[str, str]:
    """Versions of what computes the cells, and a digest of gradci's own source (once per process)."""
    found = {"python": platform.python_version(), "machine": platform.machine(), "gradci source": _gradci_source()}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    for dist in distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith(CUDA_PACKAGES):
            found[name] = dist.version
    return found


def config(root: str | Path | None, options: Mapping[str, Any]) -> dict[str, str]:
    """Digests of the project's configuration and lock files that exist, and of the check's options."""
    inputs = {name: value for name, value in options.items() if name not in NOT_INPUTS}
    found = {"options": hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()}
    if root is None:
        return found
    base = Path(root).resolve()
    paths = [base / name for name in CONFIG_FILES] + [p for pattern in REQUIREMENTS for p in sorted(base.glob(pattern))]
    for path in paths:
        name = path.relative_to(base).as_posix()
        # A link out of the checkout (to a secret, to /dev/zero) is never read: a worker computes this
        # outside the sandbox, and the digest would be stored where the repository's users can see it.
        inner = inside(base, name)
        if inner is None:
            found[name] = "outside the checkout"
        elif inner.is_file():
            found[name] = bytes_digest(inner.read_bytes())
    return found


def differences(before: Environment, now: Environment) -> list[str]:
    """What changed between two environments, in words (empty: nothing)."""
    said = []
    for part in ("software", "config", "device"):
        old, new = before.get(part, {}), now.get(part, {})
        for name in sorted(set(old) | set(new)):
            if old.get(name) == new.get(name):
                continue
            if part == "software" and name != "gradci source":
                said.append(f"{name} {old.get(name, 'not installed')} → {new.get(name, 'not installed')}")
            elif part == "device":
                said.append(f"device {name} {old.get(name, '—')} → {new.get(name, '—')}")
            elif name == "options":
                said.append("the check's options changed")
            else:
                said.append(f"{name} changed" if name in old and name in new
                            else f"{name} {'added' if name in new else 'removed'}")
    return said


@functools.cache
def _gradci_source() -> str:
    import gradci

    digest = hashlib.sha256()
    for folder in sorted({Path(p).resolve() for p in gradci.__path__}):
        # Its layers are links in a development install (gradci/scenarios -> ../scenarios): follow them.
        for here, dirs, files in os.walk(folder, followlinks=True):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = Path(here, name)
                    digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
