"""The prepared GPU check (``scripts/gpu_check.sh`` runs it): on a machine with an NVIDIA GPU where torch
and jax are installed and no package index is reachable, in under 8 minutes.

Parts, each in a subprocess with a time budget of its own (a part past its budget is stopped and
reported as such, the next one runs): the device record (``gradci devices``); the built-in library on
``cuda`` for every backend in float64, float32, float16 and bfloat16, family by family, so that a
budget running out keeps the families already checked; the framework conformance family on ``cuda``;
CPU–GPU agreement cells (``--devices cpu,cuda``); an out-of-memory cell (``bench/gpu_oom``: an
error cell, and the runner restarted for the next one); the engine benchmark (``bench/engine.py``).
The summary table comes last. Every part's cells and output go to ``$OUT`` (or ``--out``).

``--quick``: a few scenarios per part and no benchmark, for a dry run here against a simulated
inventory (``GRADCI_DEVICE_INVENTORY``), whose cuda cells compute on the CPU.

Only the standard library is imported here: what is missing is found and named before anything runs.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / ".gpu-wheels"
DTYPES = "float64,float32,float16,bfloat16"
LIBRARY_FAMILIES = ("elementary", "pytree", "nn", "linalg", "control-flow", "delicate")
# --quick: one scenario name per part (two families of the library).
QUICK_SELECTION = {"elementary": "elementary/num-to-num/gradient", "pytree": "pytree/dict-to-num/gradient",
                   "frameworks": "softplus", "agreement": "nn/dense/gradient"}
STATUSES = ("pass", "fail", "error", "skip", "xfail", "xpass")
# Import name → distribution: what `gradci check` and device discovery import beyond the standard
# library (torch and jax come with the machine; the rest can come as wheels in .gpu-wheels).
NEEDED = {
    "torch": "torch", "jax": "jax", "numpy": "numpy", "scipy": "scipy",
    "array_api_compat": "array-api-compat", "optree": "optree",
    "typer": "typer", "click": "click", "shellingham": "shellingham", "annotated_doc": "annotated-doc",
    "rich": "rich", "pygments": "pygments", "markdown_it": "markdown-it-py", "mdurl": "mdurl",
    "pydantic": "pydantic", "pydantic_core": "pydantic-core", "pydantic_settings": "pydantic-settings",
    "dotenv": "python-dotenv", "typing_inspection": "typing-inspection", "annotated_types": "annotated-types",
    "typing_extensions": "typing-extensions", "sqlalchemy": "sqlalchemy", "httpx": "httpx",
    "httpcore": "httpcore", "h11": "h11", "anyio": "anyio", "sniffio": "sniffio", "idna": "idna",
    "certifi": "certifi",
}
# Full mode: seconds per part, 440 in all, which leaves the 8 minutes room for start-up and imports.
BUDGETS_S = {"devices": 30, "library": 190, "frameworks": 90, "agreement": 45, "oom": 30, "benchmark": 55}
QUICK_BUDGETS_S = {"devices": 30, "library": 40, "frameworks": 30, "agreement": 30, "oom": 30,
                   "benchmark": 0}


def missing_modules() -> list[str]:
    return [module for module in NEEDED if importlib.util.find_spec(module) is None]


def ensure_prerequisites() -> str | None:
    """None when everything imports, after installing what is missing from .gpu-wheels; else the
    one line that says what is missing."""
    missing = missing_modules()
    if missing and WHEELS.is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(WHEELS),
                        *(NEEDED[module] for module in missing)], check=False)
        importlib.invalidate_caches()
        missing = missing_modules()
    if not missing:
        return None
    frameworks = [m for m in missing if NEEDED[m] in ("torch", "jax")]
    hint = ("install the CUDA builds of torch and jax first" if frameworks else
            "bring them as wheels: run `bash scripts/gpu_check.sh --fetch-wheels` on a machine with an index "
            "and carry .gpu-wheels")
    return f"gpu_check: missing Python packages: {', '.join(NEEDED[m] for m in missing)} ({hint})"


@dataclasses.dataclass
class Part:
    name: str
    state: str = "not run"  # ok, failed (exit code), timeout, skipped
    seconds: float = 0.0
    counts: Counter = dataclasses.field(default_factory=Counter)
    note: str = ""


def run_command(argv: list[str], timeout_s: float, log: Path) -> tuple[str, float]:
    """Run ``argv`` with its output in ``log``; its state and how long it took."""
    start = time.monotonic()
    with open(log, "ab") as output:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = process.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)  # the check (its runner dies with it: worker.sandbox sets PDEATHSIG)
            process.wait()
            return "timeout", time.monotonic() - start
    # gradci check exits 1 when a cell fails: the cells say so; only a crash is a failed part.
    return ("ok" if code in (0, 1) else f"failed (exit {code})"), time.monotonic() - start


def gradci_check(part: Part, out: Path, timeout_s: float, *args: str) -> list[dict]:
    """One ``gradci check`` into ``out/<part>.json``; its cells (none when it did not finish)."""
    target = out / f"{part.name.replace(' ', '-')}.json"
    target.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "gradci", "check", "--format", "json", "-o", str(target), *args]
    state, seconds = run_command(argv, timeout_s, out / "gpu_check.log")
    part.seconds += seconds
    part.state = state if part.state in ("not run", "ok") else part.state
    if not target.is_file():
        return []
    cells = json.loads(target.read_text())
    part.counts.update(cell["status"] for cell in cells)
    return cells


def part_devices(part: Part, out: Path, timeout_s: float) -> None:
    """``gradci devices --json``; where the machine lacks the web stack that command's table needs,
    the same inventory straight from ``gradci.worker.device_discovery``."""
    start, log = time.monotonic(), out / "gpu_check.log"
    commands = ([sys.executable, "-m", "gradci", "devices", "--json"],
                [sys.executable, "-c", "import json; from worker.devices import device_inventory; "
                                      "print(json.dumps(device_inventory()))"])
    for argv in commands:
        try:
            done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            part.state = "timeout"
            break
        with open(log, "a") as handle:
            handle.write(done.stderr)
        if done.returncode == 0:
            inventory = json.loads(done.stdout)
            (out / "devices.json").write_text(json.dumps(inventory, indent=2))
            part.state, part.note = "ok", describe_inventory(inventory)
            break
        part.state = f"failed (exit {done.returncode})"
    part.seconds = time.monotonic() - start


def describe_inventory(inventory: dict) -> str:
    gpus = [d for d in inventory["devices"] if d.get("kind") == "cuda"]
    frameworks = inventory.get("frameworks", {})
    seen = ", ".join(f"{name} {info.get('version')} sees {len(info.get('devices', []))}"
                     for name, info in frameworks.items() if isinstance(info, dict))
    names = "; ".join(f"{g['name']} sm{g['capability']} driver {g.get('driver')}" for g in gpus) or "no GPU"
    return f"{names}{' (simulated)' if inventory.get('simulated') else ''}; {seen}"


def part_library(part: Part, out: Path, budget_s: float, quick: bool) -> None:
    """Family by family, within one budget: what finished is kept when the budget runs out."""
    deadline = time.monotonic() + budget_s
    done = []
    for family in LIBRARY_FAMILIES[:2] if quick else LIBRARY_FAMILIES:
        left = deadline - time.monotonic()
        if left < 5:
            part.state = "timeout"
            break
        selection = ["-k", QUICK_SELECTION[family]] if quick else []
        sub = Part(f"library {family}")
        gradci_check(sub, out, left, "--family", family, "--devices", "cuda", "--dtypes", DTYPES, *selection)
        part.counts.update(sub.counts)
        part.seconds += sub.seconds
        if sub.state != "ok":
            part.state = sub.state
            break
        done.append(family)
    else:
        part.state = "ok"
    part.note = f"families done: {', '.join(done) or 'none'}"


def part_frameworks(part: Part, out: Path, budget_s: float, quick: bool) -> None:
    selection = ["-k", QUICK_SELECTION["frameworks"]] if quick else []
    gradci_check(part, out, budget_s, "--family", "frameworks", "--devices", "cuda", *selection)


def part_agreement(part: Part, out: Path, budget_s: float, quick: bool) -> None:
    selection = ["-k", QUICK_SELECTION["agreement"]] if quick else []
    cells = gradci_check(part, out, budget_s, "--family", "nn", "--devices", "cpu,cuda", "--dtypes",
                         "float32", *selection)
    agreement = Counter(cell["status"] for cell in cells if "-vs-" in cell["device"])
    part.note = "agreement cells: " + (", ".join(f"{n} {s}" for s, n in sorted(agreement.items())) or "none")


def part_out_of_memory(part: Part, out: Path, budget_s: float, quick: bool) -> None:
    cells = gradci_check(part, out, budget_s, "--repo", "bench/gpu_oom")
    fault = [c for c in cells if c["scenario"] == "oom/allocate-twice-the-gpu"]
    after = [c for c in cells if c["scenario"] == "oom/after-the-fault"]
    if os.environ.get("GRADCI_DEVICE_INVENTORY") or all(c["status"] == "skip" for c in fault):
        part.note = "no real GPU: the out-of-memory cell cannot fault here"
    elif fault:
        oom = all(c["status"] == "error" and "out of memory" in c["message"] for c in fault)
        recovered = bool(after) and all(c["status"] == "pass" for c in after)
        part.note = (f"out-of-memory cell {'error as expected' if oom else 'NOT an out-of-memory error'}; "
                     f"next cell {'passes' if recovered else 'did NOT pass'} after the restart")
        if not (oom and recovered):
            part.state = "failed (out-of-memory path)"


def part_benchmark(part: Part, out: Path, budget_s: float, quick: bool) -> None:
    if quick:
        part.state, part.note = "skipped", "--quick"
        return
    log = out / "benchmark.log"
    part.state, part.seconds = run_command([sys.executable, "bench/engine.py"], budget_s, log)
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    part.note = " | ".join(lines[-3:])[:200]


PARTS = (("devices", part_devices), ("library", part_library), ("frameworks", part_frameworks),
         ("agreement", part_agreement), ("oom", part_out_of_memory), ("benchmark", part_benchmark))


def summary_table(parts: list[Part]) -> str:
    header = ["part", "state", "seconds", *STATUSES, "note"]
    rows = [[p.name, p.state, f"{p.seconds:.0f}", *(str(p.counts.get(s, 0)) for s in STATUSES), p.note]
            for p in parts]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few scenarios per part, no benchmark")
    parser.add_argument("--out", default=os.environ.get("OUT") or "/tmp/gradci-gpu", help="where results go")
    parser.add_argument("--only", action="append", choices=[name for name, _ in PARTS], help="run only these parts")
    args = parser.parse_args(argv)
    problem = ensure_prerequisites()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    budgets = QUICK_BUDGETS_S if args.quick else BUDGETS_S
    parts = []
    for name, run in PARTS:
        part = Part(name)
        parts.append(part)
        if args.only and name not in args.only:
            part.state = "skipped"
            continue
        print(f"gpu_check: {name} (budget {budgets[name]} s)", flush=True)
        run(part, out, budgets[name], *(() if name == "devices" else (args.quick,)))
    (out / "summary.json").write_text(json.dumps([{**dataclasses.asdict(p), "counts": dict(p.counts)} for p in parts],
                                                 indent=2))
    print(summary_table(parts))
    return 0 if all(p.state in ("ok", "skipped") for p in parts) else 1


if __name__ == "__main__":
    sys.exit(main())
