"""Rule coverage and detection power on real libraries' rules, each library as its own repository (issue 31).

``gradci check --repo`` measures rules in the repository's own files only: a library installed in
site-packages is not the user's code. So each library is checked as its maintainers would check
it: its installed package's sources are copied into a scratch repository beside the scenarios of
``reallib_scenarios/`` (whose ``import entmax`` then loads the copy, the repository's root coming
first on ``sys.path``), with bench/real_libraries/gradci.toml's matrix and ``[[expect]]``
declarations and a ``[matrix] scenarios`` selection of that library's scenarios. Then
``gradci check --repo COPY --cov-report COPY/rules.xml`` (with ``--power``, the detection power too)
runs as a user would run it, and its output is printed as is.

Install the libraries as bench/real_libraries/run.py says (its docstring), plus gpytorch::

    .venv/bin/python -m pip install --dry-run -c constraints.txt gpytorch   # nothing up- or downgraded
    .venv/bin/python -m pip install -c constraints.txt gpytorch

    .venv/bin/python bench/real_libraries/as_repositories.py [--power] [-l entmax,optax] [-o DIR]

``-o DIR`` keeps each library's output (``LIB.txt``) and coverage report
(``LIB.rules.xml``).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path

HERE = Path(__file__).resolve().parent
# library: (the packages copied into its repository, its scenario module, its scenarios' patterns)
LIBRARIES = {
    "entmax": (("entmax",), "reallib_scenarios.torch_rules", ("entmax/*",)),
    "torchdiffeq": (("torchdiffeq",), "reallib_scenarios.torch_rules", ("torchdiffeq/*",)),
    "kornia": (("kornia",), "reallib_scenarios.torch_rules", ("kornia/*",)),
    "gpytorch": (("gpytorch",), "reallib_scenarios.gpytorch_rules", ("gpytorch/*",)),
    "optax": (("optax",), "reallib_scenarios.jax_rules", ("optax/*", "equinox/*")),
    "lineax": (("lineax",), "reallib_scenarios.jax_rules", ("lineax/*",)),
    "jaxopt": (("jaxopt",), "reallib_scenarios.jax_rules", ("jaxopt/*",)),
    "diffrax": (("diffrax",), "reallib_scenarios.jax_rules", ("diffrax/*",)),
}


def make_repository(folder: Path, library: str) -> Path:
    """A scratch repository: the library's sources, the scenarios, a gradci.toml selecting its scenarios."""
    packages, module, patterns = LIBRARIES[library]
    root = folder / library
    root.mkdir()
    for package in packages:
        spec = find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(f"{package} is not installed: see this script's docstring")
        source = Path(next(iter(spec.submodule_search_locations)))
        shutil.copytree(source, root / package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copytree(HERE / "reallib_scenarios", root / "reallib_scenarios",
                    ignore=shutil.ignore_patterns("__pycache__"))
    toml = (HERE / "gradci.toml").read_text()
    toml = re.sub(r"(?m)^modules = .*$", f'modules = ["{module}"]', toml)
    selection = ", ".join(f'"{pattern}"' for pattern in patterns)
    toml = toml.replace("[matrix]\n", f"[matrix]\nscenarios = [{selection}]\n", 1)
    (root / "gradci.toml").write_text(toml)
    return root


def check(root: Path, power: bool, keep: Path | None) -> tuple[int, str, float]:
    """``gradci check`` as a user runs it: its exit code, its output, its wall time."""
    report = (keep or root) / f"{root.name}.rules.xml"
    command = [sys.executable, "-m", "gradci", "check", "--repo", str(root), "-j", "1", "--cov-report", str(report)]
    if power:
        command.append("--power")
    env = {**os.environ, "COLUMNS": "160"}
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - start
    output = done.stdout + (f"\n[stderr]\n{done.stderr[-4000:]}" if done.stderr.strip() else "")
    if keep is not None:
        (keep / f"{root.name}.txt").write_text(output)
    return done.returncode, output, wall


def versions() -> str:
    found = []
    for name in (*LIBRARIES, "linear_operator", "equinox", "torch", "jax"):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} not installed")
    return ", ".join(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--power", action="store_true", help="also measure detection power (--power)")
    parser.add_argument("-l", dest="libraries", default=",".join(LIBRARIES), help="comma-separated libraries")
    parser.add_argument("-o", dest="keep", type=Path, help="keep each library's output, JSON and report here")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    print(f"versions: {versions()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gradci-reallib-") as scratch:
        for library in args.libraries.split(","):
            root = make_repository(Path(scratch), library)
            code, output, wall = check(root, args.power, args.keep)
            print(f"\n===== {library}: gradci check --repo {library}/{' --power' if args.power else ''} "
                  f"(exit {code}, {wall:.1f} s)\n{output}", flush=True)


if __name__ == "__main__":
    main()
