"""gradci on code it did not write: real libraries' hand-written derivative rules (issue 19).

(Their rule coverage and detection power, each library checked as its own repository:
``as_repositories.py`` beside this file.)

Runs ``gradci check --repo bench/real_libraries`` (the scenarios in ``reallib_scenarios/``, the
matrix and the suite-wide ``[[expect]]`` declarations in ``gradci.toml``) and prints the cells
counted by status, by library and by backend, then every cell that is neither ``pass`` nor a
declared ``xfail``. With ``--verify`` it also re-derives each known finding without gradci
(``torch.autograd.gradgradcheck`` and central differences in float64), so a reader can see the
verdicts are the libraries' and not gradci's. A benchmark-style script, not a test.

Install the libraries into gradci's virtual environment with the constraints file, so that torch
(the CPU build), jax, jaxlib and numpy stay as they are — check first with ``--dry-run`` that
nothing is upgraded or downgraded::

    .venv/bin/python -m pip install --dry-run -c constraints.txt entmax torchdiffeq kornia optax lineax \
        jaxopt diffrax gpytorch
    .venv/bin/python -m pip install -c constraints.txt entmax torchdiffeq kornia optax lineax jaxopt diffrax gpytorch

(``python -m pip``: a virtual environment copied from another checkout keeps that one's path in its
``pip`` script's first line. equinox comes with gradci's development install; gpytorch since
2026-12-04, gpytorch 1.15.2 with linear_operator 0.6.1.) Measured with entmax 1.3,
torchdiffeq 0.2.5, kornia 0.9.0, optax 0.2.8, lineax 0.1.1, jaxopt 0.8.5, diffrax 0.7.2,
equinox 0.13.8 on torch 2.13.0+cpu and jax 0.10.2.

    .venv/bin/python bench/real_libraries/run.py [-k PATTERN] [--backends a,b] [--verify] [-o out.json]

About 5 minutes on 2 CPU cores (diffrax and jaxopt compile for most of it).
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIBRARIES = ("entmax", "torchdiffeq", "kornia", "optax", "lineax", "jaxopt", "diffrax", "equinox", "gpytorch",
             "torch", "jax")


def versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def sweep(out: Path, pattern: str | None, backends: str | None) -> list[dict]:
    command = [sys.executable, "-m", "gradci", "check", "--repo", str(HERE), "--format", "json", "-o", str(out)]
    if pattern:
        command += ["-k", pattern]
    if backends:
        command += ["--backends", backends]
    finished = subprocess.run(command, capture_output=True, text=True)
    if finished.returncode not in (0, 1):      # 1: some cell is not ok, which is what we measure
        sys.exit(f"gradci check failed ({finished.returncode}): {finished.stderr.strip()[-2000:]}")
    return json.loads(out.read_text())


def table(title: str, counts: dict[str, collections.Counter]) -> None:
    statuses = ("pass", "fail", "error", "skip", "xfail", "xpass")
    print(f"\n{title:<34}" + "".join(f"{s:>7}" for s in statuses) + f"{'cells':>7}")
    for key in sorted(counts):
        row = counts[key]
        print(f"{key:<34}" + "".join(f"{row[s]:>7}" for s in statuses) + f"{sum(row.values()):>7}")


def report(cells: list[dict]) -> None:
    by_library, by_backend = collections.defaultdict(collections.Counter), collections.defaultdict(collections.Counter)
    for cell in cells:
        by_library[cell["scenario"].split("/")[0]][cell["status"]] += 1
        by_backend[f"{cell['backend']} {cell['dtype']}"][cell["status"]] += 1
    total = collections.Counter(cell["status"] for cell in cells)
    print(f"{len({c['scenario'] for c in cells})} scenarios, {len(cells)} cells: "
          + ", ".join(f"{n} {s}" for s, n in sorted(total.items())))
    table("library", by_library)
    table("backend dtype", by_backend)
    standing = [c for c in cells if c["status"] not in ("pass", "xfail", "skip")]
    print(f"\n{len(standing)} cells neither pass nor declared:")
    for cell in standing:
        print(f"  {cell['scenario']} [{cell['backend']} {cell['dtype']}] {cell['status']}: {cell['message'][:300]}")


def verify() -> None:
    """The findings, re-derived without gradci: float64, torch.autograd and central differences."""
    import torch
    sys.path.insert(0, str(HERE))
    from reallib_scenarios.torch_rules import LOGITS, entmax15_weighted_square, sparsemax_loss

    def grad(f, x, *rest):
        x = x.detach().clone().requires_grad_()
        return torch.autograd.grad(f(x, *rest), x)[0]

    x, h = torch.tensor(LOGITS), 1e-6
    xg = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(entmax15_weighted_square(xg), xg, create_graph=True)
    v = torch.ones_like(x)
    (hvp,) = torch.autograd.grad(g, xg, v)
    central = (grad(entmax15_weighted_square, x + h * v) - grad(entmax15_weighted_square, x - h * v)) / (2 * h)
    print("\nentmax15 double backward (torch.autograd, float64), rows with an exact zero output:")
    print(f"  hvp rows finite: {torch.isfinite(hvp).all(dim=-1).tolist()}; central differences finite: "
          f"{torch.isfinite(central).all().item()}, max |fd| {central.abs().max().item():.1e}")
    one, target = torch.tensor(LOGITS[:1]).requires_grad_(), torch.tensor([0])
    (g,) = torch.autograd.grad(sparsemax_loss(one, target), one, create_graph=True)
    print("sparsemax_loss backward's result is part of a graph (create_graph=True): "
          f"{g.requires_grad}; its Hessian by central differences is not zero: "
          f"max |H| {hessian_by_differences(sparsemax_loss, one.detach(), target, h):.3f}")
    try:
        torch.autograd.gradgradcheck(lambda z: sparsemax_loss(z, target), (one,))
        print("gradgradcheck(sparsemax_loss): passed")
    except Exception as error:  # noqa: BLE001 — gradcheck's verdict is the output
        print(f"gradgradcheck(sparsemax_loss): {type(error).__name__}: {str(error).splitlines()[0]}")


def hessian_by_differences(f, x, target, h) -> float:
    import torch

    def grad(z):
        z = z.clone().requires_grad_()
        return torch.autograd.grad(f(z, target), z)[0]
    basis = torch.eye(x.numel(), dtype=x.dtype)
    return max((grad(x + h * e.reshape(x.shape)) - grad(x - h * e.reshape(x.shape))).abs().max().item() / (2 * h)
               for e in basis)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="pattern")
    parser.add_argument("--backends")
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("-o", dest="out", type=Path)
    args = parser.parse_args()
    print("versions: " + ", ".join(f"{name} {v}" for name, v in versions().items()))
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch) / "cells.json"
        report(sweep(out, args.pattern, args.backends))
    if args.verify:
        verify()


if __name__ == "__main__":
    main()
