"""`gradci.scenarios.check`: expand scenarios × backends × devices × dtypes into cells and check each."""
from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from gradci.scenarios.adapters import global_state
from gradci.scenarios.adapters.adapter import Compilations
from gradci.scenarios.authoring.exceptions import describe_exception, full_text
from gradci.scenarios.authoring.expectations import first_applying
from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.backends import Backend, CellSkipped, get_backend, registry
from gradci.scenarios.contract.cell import COUNTED, DIFFERENTIATING, FAILING, MESSAGE_LIMIT, Cell, Status
from gradci.scenarios.contract.devices import CPU, CUDA, agreement_device, compared_device, computing_on, simulated
from gradci.scenarios.contract.simulated_gpus import simulated_gpus
from gradci.scenarios.numerics.reference_values import flat_leaves
from gradci.scenarios.numerics.tolerances import Tolerance, agreement_tolerance, tolerance_for
from gradci.scenarios.reference.answer import ReferenceAnswer, ReferenceCache, shared_cache
from gradci.scenarios.reference.second_point import at_second_point, described
from gradci.scenarios.rules.tracing import cell_lines, not_a_cells_lines
from gradci.scenarios.verdict.captured_warnings import CapturedWarnings, captured_warnings, merged
from gradci.scenarios.verdict.device_agreement import compare_with_cpu
from gradci.scenarios.verdict.dtypes import derivative_dtype_message, wider_dtype_note
from gradci.scenarios.verdict.judgement import judge
from gradci.scenarios.verdict.mode_agreement import check_modes_agree
from gradci.scenarios.verdict.mutation import in_place_culprit, mutation, snapshot
from gradci.scenarios.verdict.precision_agreement import check_precisions_agree
from gradci.scenarios.verdict.prepared_elsewhere import Elsewhere, judge_elsewhere
from gradci.scenarios.verdict.repeats import repeat_spread, spread_message

# Steady-state timing, where timings are asked for (``timings=True``: ``gradci check --timings``,
# gradci.toml's ``[check] timings``): after the first call, repeat it until this many repetitions or
# this much time, and take the median. Otherwise a cell's computation runs once (see ``_timed_calls``).
TIMING_REPEATS = 3
TIMING_BUDGET_S = 0.05


@dataclasses.dataclass
class Report:
    cells: list[Cell]
    # Cells not made at all: backends of a framework a scenario gives no f for (a torch-only rule has
    # no jax cells), or of an operator they do not compute (``Backend.computes``: a second-order-only
    # backend's first order). Counted for the summary, not listed as skips that would drown the real ones.
    omitted: int = 0

    def counts(self) -> Counter:
        return Counter(cell.status for cell in self.cells)

    @property
    def ok(self) -> bool:
        """No cell is fail, error or xpass."""
        return not any(cell.status in FAILING for cell in self.cells)

    def failing(self) -> list[Cell]:
        return [cell for cell in self.cells if cell.status in FAILING]

    def nothing_checked(self) -> str | None:
        """Why no cell was checked at all, or None when some were.

        Every one was skipped or declared failing. A check that checked nothing is not a pass.
        """
        if any(cell.status in COUNTED for cell in self.cells):
            return None
        if not self.cells:
            return (f"no cell was made ({self.omitted} not made: no backend of the scenarios' frameworks and "
                    f"operators)")
        reasons = Counter(cell.message for cell in self.cells if cell.status == Status.SKIP)
        reason, count = reasons.most_common(1)[0] if reasons else ("", 0)
        return (f"every cell was skipped or declared failing ({len(self.cells)}); the most common reason "
                f"({count}): {reason or 'none given'}")


def available_devices() -> list[str]:
    """The devices available: cpu, plus every CUDA device torch can see.

    With a simulated inventory (GRADCI_DEVICE_INVENTORY), its GPUs instead, which compute on the CPU.
    """
    devices = ["cpu"]
    gpus = simulated_gpus()
    if gpus is not None:
        return devices + [f"cuda:{i}" for i in range(len(gpus))]
    try:
        import torch

        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    return devices


def resolve_backends(names: Sequence[str] | None) -> list[Backend]:
    """None: every registered default backend (``Backend.default``) whose framework is installed."""
    if names is None:
        return [b for b in registry().values() if b.default and b.unavailable() is None]
    return [get_backend(name) for name in names]


def check(scenarios: Iterable[Scenario], backends: Sequence[str] | None = None,
          devices: Sequence[str] | None = None, dtypes: Sequence[str] | None = None,
          progress: Callable[[Cell], None] | None = None,
          references: ReferenceCache | None = None, repeats: int | None = None, timings: bool = False) -> Report:
    """Check every cell.

    None for backends, devices or dtypes means all available (dtypes: each scenario's own). Devices
    with both cpu and cuda ones add CPU–GPU agreement cells; ``repeats`` overrides each scenario's own;
    ``timings`` measures each cell's steady-state time over repeated calls (``_timed_calls``).
    """
    chosen = resolve_backends(backends)
    devices = list(devices) if devices is not None else available_devices()
    references = references or shared_cache()
    computed = [device for device in devices if compared_device(device) is None]
    cells: list[Cell] = []
    omitted = 0
    for scenario in scenarios:
        lacked = scenario.lacked_frameworks()
        own = [backend for backend in chosen if backend.framework not in lacked and backend.computes(scenario.operator)]
        omitted += (len(chosen) - len(own)) * len(computed) * len(dtypes if dtypes is not None else scenario.dtypes)
        cells.extend(check_scenario(scenario, own, devices, dtypes, references, progress, repeats=repeats,
                                    timings=timings))
    return Report(cells, omitted)


def check_scenario(scenario: Scenario, backends: list[Backend], devices: Sequence[str],
                   dtypes: Sequence[str] | None, references: ReferenceCache,
                   progress: Callable[[Cell], None] | None = None, peers: Sequence[Backend] = (),
                   repeats: int | None = None, timings: bool = False) -> list[Cell]:
    """``_check_scenario`` in the framework state the scenario's module set at import.

    Without such a state, in the state as it is. The state is restored afterwards: no scenario changes
    the next one's defaults, seeds or precision switches. What its module changed at import and what
    its cells changed while they ran are named on every cell, as warnings.
    """
    # Captures are read only where the state may have moved since the last one (a capture reads the
    # global generators' states: most of what a scenario's own bookkeeping costs).
    before = expected = global_state.capture()
    module_state, at_import = scenario.module_state()
    if module_state is not None:
        global_state.restore(module_state, current=before)
        expected = global_state.capture()
    try:
        cells = _check_scenario(scenario, backends, devices, dtypes, references, None, peers, repeats, timings)
    finally:
        after = global_state.capture()
        global_state.restore(before, current=after)
    while_running = global_state.changes(expected, after)
    # One line each (a cell keeps a few warnings): restored for the other modules, named here.
    notes = [f"gradci: when its module was imported, {'; '.join(lines)} (restored for other modules' scenarios)"
             for lines in (at_import,) if lines]
    notes += [f"gradci: while this scenario's cells ran, {'; '.join(lines)} (restored afterwards)"
              for lines in (while_running,) if lines]
    for cell in cells:
        if notes:
            cell.warnings = merged(cell.warnings, notes)
        if progress:
            progress(cell)
    return cells


def _check_scenario(scenario: Scenario, backends: list[Backend], devices: Sequence[str],
                    dtypes: Sequence[str] | None, references: ReferenceCache,
                    progress: Callable[[Cell], None] | None = None, peers: Sequence[Backend] = (),
                    repeats: int | None = None, timings: bool = False) -> list[Cell]:
    """The scenario's cells over ``backends`` × ``devices`` × ``dtypes``.

    ``peers``: backends whose cells are computed only to compare the forward and reverse modes with
    (the service checks one backend a job) and are not returned; see ``_peer_cells``.

    CPU–GPU agreement cells (``gradci.scenarios.verdict.device_agreement``) come for each cuda device
    where ``devices`` has cpu too, or names the comparison itself (``cuda:0-vs-cpu``: the CPU results
    are then computed for the comparison only, as a service job on a GPU does). ``repeats``: how many
    times each derivative is computed to see whether it is reproducible (None: the scenario's
    ``repeats``); ``timings``: whether steady-state times are measured over repeated calls.
    """
    computed = [device for device in devices if compared_device(device) is None]
    repeats = scenario.repeats if repeats is None else repeats
    cells, results, raised = [], {}, {}
    reference = None  # computed for the first cell that runs: an all-skipped scenario never evaluates f
    second = SecondPoint(scenario, references)  # its reference too, for the first cell that runs there
    for device in computed:
        for dtype in (dtypes if dtypes is not None else scenario.dtypes):
            for backend in backends:
                cell = _new_cell(scenario, backend, device, dtype)
                if not _declined(cell, scenario):
                    if (reference := reference or references.answer(scenario)).error:
                        cell.status, cell.message, cell.detail = Status.ERROR, reference.error, reference.detail
                        raised[cell.key] = reference.exception
                    else:
                        with cell_lines(cell.key, cell.framework):  # rule coverage, where it is recorded
                            results[cell.key] = run_cell(cell, scenario, backend, reference, raised=raised,
                                                         repeats=repeats, timings=timings, second=second)
                cells.append(cell)
    compared = cells + _peer_cells(scenario, peers, cells, results, reference)
    check_modes_agree(compared, results, scenario, reference.tangent if reference else None)
    check_precisions_agree(cells, results, scenario, reference.tangent if reference else None)
    for cell in cells:
        _apply_xfail(cell, scenario, raised.get(cell.key))
    targets = _agreement_targets(devices, computed)
    cells += _agreement_cells(scenario, backends, targets, dtypes, cells, results, reference)
    for cell in cells:  # what the scenario cost before any backend ran, on each of its cells
        cell.reference_ms = reference.elapsed_ms if reference else None
        cell.import_ms = scenario.import_ms()
    for cell in cells:
        if progress:
            progress(cell)
    return cells


class SecondPoint:
    """The scenario at its second point x₁ and x₁'s reference answer, made for the first cell that asks.

    See ``gradci.scenarios.reference.second_point``. ``answer`` gives the answer and what x₁ is, or
    None and why no cell runs there (no point to move to, f not finite there, no reference there).
    """

    def __init__(self, scenario: Scenario, references: ReferenceCache):
        self.scenario, self.references = scenario, references
        self._found: tuple[ReferenceAnswer | None, str] | None = None

    def answer(self, tangent: Any) -> tuple[ReferenceAnswer | None, str]:
        if self._found is None:
            with not_a_cells_lines():  # a reference, made in the first cell that needs it
                self._found = self._made(tangent)
        return self._found

    def _made(self, tangent: Any) -> tuple[ReferenceAnswer | None, str]:
        moved = at_second_point(self.scenario, tangent)
        if isinstance(moved, str):
            return None, moved
        where = described(self.scenario, moved.x)
        found = self.references.answer(moved)
        if found.error:
            return None, f"{where}: {found.error}"
        if not all(np.all(np.isfinite(flat_leaves(ref.value))) for ref in found.refs):
            return None, f"{where}: f is not finite there"
        return found, where


def _runs_elsewhere(prepared: Any, scenario: Scenario) -> bool:
    """Whether a cell's program also runs at the second point.

    A compiled one always (it keeps what it traced); any backend's where the scenario declares the
    point (what a custom rule keeps between calls shows on eager backends too).
    """
    return prepared.at is not None and (prepared.compiled or scenario.second_point is not None)


def _declined(cell: Cell, scenario: Scenario) -> bool:
    """Whether the scenario itself rules the cell out.

    It does by a declared skip, or by a dtype it does not declare. The cell then says why.
    """
    skip = first_applying(scenario.skip, cell.backend, cell.device, cell.dtype)
    # A framework the scenario has no implementation for: skipped before its reference is made, so
    # that a reference that fails is charged to the cells that needed it, not to these.
    missing = cell.framework in DIFFERENTIATING and scenario.implementation_missing(cell.framework)
    if skip:
        cell.message = f"skipped: {skip.reason}"[:MESSAGE_LIMIT]
    elif missing:
        cell.message = f"the scenario has no {cell.framework} implementation"
    elif cell.dtype not in scenario.dtypes:
        cell.message = f"the scenario does not declare {cell.dtype}"
    return bool(skip) or missing or cell.dtype not in scenario.dtypes


def _agreement_targets(devices: Sequence[str], computed: Sequence[str]) -> list[str]:
    """The cuda devices whose results are compared with the CPU's.

    Those named as comparisons among ``devices``, and the cuda ones ``computed`` beside the cpu.
    """
    named = [device for device in map(compared_device, devices) if device is not None]
    implied = [device for device in computed if device.startswith(CUDA)] if CPU in computed else []
    return list(dict.fromkeys([*named, *implied]))


def _agreement_cells(scenario: Scenario, backends: list[Backend], targets: list[str], dtypes: Sequence[str] | None,
                     cells: list[Cell], results: dict, reference: ReferenceAnswer | None) -> list[Cell]:
    """One CPU–GPU agreement cell per cuda device × dtype × backend of ``targets``.

    Each compares the GPU result with the CPU result of the same backend and dtype, computed here where
    the check has none (not returned as a cell).
    """
    by_key = {cell.key: cell for cell in cells}
    out = []
    for device in targets:
        for dtype in (dtypes if dtypes is not None else scenario.dtypes):
            for backend in backends:
                gpu = by_key.get((scenario.name, backend.name, device, dtype))
                cell = _new_cell(scenario, backend, agreement_device(device), dtype)
                if gpu is None or results.get(gpu.key) is None:
                    why = gpu.status if gpu else "not checked"
                    cell.message = f"no {device} result to compare with the cpu ({why})"
                else:
                    assert reference is not None  # a GPU result exists only where the reference does
                    cpu = _cpu_result(scenario, backend, dtype, results, reference)
                    _fill_agreement(cell, gpu, results[gpu.key], cpu, backend, scenario)
                out.append(cell)
    return out


def _cpu_result(scenario: Scenario, backend: Backend, dtype: str, results: dict, reference: ReferenceAnswer) -> Any:
    """The CPU result of ``backend`` and ``dtype``: the check's own cell's, else computed now."""
    key = (scenario.name, backend.name, CPU, dtype)
    if key not in results:
        results[key] = run_cell(_new_cell(scenario, backend, CPU, dtype), scenario, backend, reference)
    return results[key]


def _fill_agreement(cell: Cell, gpu: Cell, gpu_result: Any, cpu_result: Any, backend: Backend,
                    scenario: Scenario) -> None:
    cell.precision, cell.reference = gpu.precision, f"{backend.name} on the cpu, {cell.dtype}"
    if cpu_result is None:
        cell.message = "the cpu cell of this backend and dtype has no result to compare with"
        return
    tol = agreement_tolerance(cell.dtype, tf32=_ran_in_tf32(gpu, backend, scenario))
    agreement = compare_with_cpu(gpu_result, cpu_result, tol)
    cell.status = Status.PASS if agreement.ok else Status.FAIL
    cell.rtol, cell.atol = tol.rtol, tol.atol
    cell.max_abs_err, cell.max_rel_err, cell.message = agreement.max_abs_err, agreement.max_rel_err, agreement.message


def _ran_in_tf32(gpu: Cell, backend: Backend, scenario: Scenario) -> bool:
    """Whether the GPU cell's float32 products ran in TF32 (the switches are as they were then)."""
    adapter = getattr(backend, "adapter", None)
    if adapter is None:
        return False
    with _pinned(adapter, scenario.precision):
        return adapter.tf32_active(gpu.device, gpu.dtype)


def _peer_cells(scenario: Scenario, peers: Sequence[Backend], cells: list[Cell], results: dict,
                reference: ReferenceAnswer | None) -> list[Cell]:
    """The peers' cells that a passing cell is compared with, where the reference is made of probes.

    They are of the same framework, device and dtype as the cell. Only against probes can a wrong
    element pass, and only the other mode's result finds it (a full reference is compared element by
    element).
    """
    if not peers or reference is None or reference.error or reference.is_full:
        return []
    passed = dict.fromkeys((cell.framework, cell.device, cell.dtype) for cell in cells if cell.status == Status.PASS)
    extra = []
    for backend in peers:
        for framework, device, dtype in passed:
            if backend.framework == framework:
                cell = _new_cell(scenario, backend, device, dtype)
                results[cell.key] = run_cell(cell, scenario, backend, reference)
                extra.append(cell)
    return extra


def _new_cell(scenario: Scenario, backend: Backend, device: str, dtype: str) -> Cell:
    return Cell(scenario=scenario.name, operator=scenario.operator, framework=backend.framework,
                backend=backend.name, mode=backend.mode, device=device, dtype=dtype, status=Status.SKIP)


def _unavailable(backend: Backend, device: str, dtype: str) -> str | None:
    return backend.unavailable() or backend.device_unavailable(device) or backend.dtype_unavailable(device, dtype)


def run_cell(cell: Cell, scenario: Scenario, backend: Backend, reference: ReferenceAnswer,
             raised: dict | None = None, repeats: int = 1, timings: bool = False,
             second: SecondPoint | None = None) -> Any:
    """Fill in ``cell`` and return the backend's numpy result, or None when there is none.

    ``reference`` is the scenario's reference answer, with references (its tangent is what the
    backend computes along).

    An exception the backend raised is kept in ``raised`` under the cell's key (an xfail may name its
    type). ``repeats`` > 1 computes the derivative that many times and records their spread;
    ``timings``: see ``_timed_calls``. ``second``: where a cell that passed runs its program again, at
    the scenario's second point and back at x (``_runs_elsewhere``).
    """
    reason = _unavailable(backend, cell.device, cell.dtype)
    if reason:
        cell.status, cell.message = Status.SKIP, reason
        return None
    adapter = getattr(backend, "adapter", None)
    cell.reference, cell.reference_error = reference.description
    caught: CapturedWarnings | None = None  # stays None only where entering captured_warnings() itself raised
    try:
        with captured_warnings() as caught, computing_on(cell.device), _pinned(adapter, scenario.precision):
            tol = _precision_and_tolerance(cell, scenario, adapter)
            prepared = backend.prepare(scenario, reference.tangent, cell.device, cell.dtype)
            if prepared.convention:  # complex x: the dtype it ran in and the convention it was read in
                cell.precision = "; ".join(filter(None, (cell.precision, prepared.convention)))
            before = snapshot(prepared.inputs)
            result, recompiled = _timed_calls(cell, backend, prepared, timings)
            retraced = _retrace_message(recompiled, backend, scenario)
            dtype_message = _derivative_dtype(prepared, result, cell.dtype)  # before to_numpy makes it float64
            numpy_result = prepared.to_numpy(result)
            if repeats > 1:
                others = [prepared.to_numpy(prepared.call()) for _ in range(repeats - 1)]
                cell.repeat_spread = repeat_spread(numpy_result, others)
            changed = mutation(before, prepared.inputs)
            note = _wider_dtype_note(prepared, cell.dtype)  # evaluates f: under the pin, on its device
    except CellSkipped as exc:
        cell.status, cell.message = Status.SKIP, str(exc)
        return None
    except Exception as exc:  # noqa: BLE001 - the backend could not differentiate it: truthfully an error
        cell.status, cell.message = in_place_culprit(exc) or (Status.ERROR, _describe(exc, backend.composition_note))
        cell.detail = full_text(exc)
        if raised is not None:
            raised[cell.key] = exc
        return None
    finally:
        if caught is not None:
            cell.warnings = caught.text()
    own_errors = prepared.error_estimate() if prepared.error_estimate is not None else None
    comparison = judge(numpy_result, scenario, reference, tol, own_errors, prepared.returned_primal(),
                       prepared.computed_pattern())
    cell.status = comparison.status
    cell.max_abs_err, cell.max_rel_err = comparison.max_abs_err, comparison.max_rel_err
    cell.atol = comparison.atol or cell.atol
    message = comparison.message if cell.status == Status.FAIL else comparison.unreliable
    if cell.status == Status.FAIL and prepared.convention:  # the elements it names are of the pairs
        message = f"{message} (complex x: elements are (real, imaginary) pairs, [..., 1] an imaginary part)"
    if dtype_message or retraced:  # whatever the values: wrong however close they are
        cell.status, message = Status.FAIL, "; ".join(filter(None, (dtype_message, retraced, message)))
    if changed:  # the culprit first: the comparison of a mutated computation says little
        cell.status, message = changed[0], "; ".join(filter(None, (changed[1], comparison.message)))
    elsewhere = ""
    if second is not None and cell.status == Status.PASS and _runs_elsewhere(prepared, scenario):
        cell.status, elsewhere = _run_elsewhere(cell, scenario, prepared, adapter, reference, second, numpy_result,
                                                tol)
    # a failure at the second point first (the cell's own message is then empty); a note after the rest
    notes = [message, spread_message(cell.repeat_spread or 0.0, repeats), note]
    notes.insert(0 if cell.status != Status.PASS else len(notes), elsewhere)
    cell.message = "; ".join(filter(None, notes))[:MESSAGE_LIMIT]
    return numpy_result


def _run_elsewhere(cell: Cell, scenario: Scenario, prepared: Any, adapter: Any, reference: ReferenceAnswer,
                   second: SecondPoint, first: Any, tol: Tolerance) -> tuple[Status, str]:
    """Run the cell's program at x₁ and at x again; the cell's status and what to say.

    See ``gradci.scenarios.verdict.prepared_elsewhere``. Where x₁ has no reference (f not finite there,
    no point to move to) it is a note, never a flag; a program that raises there is an error.
    """
    answer, where = second.answer(reference.tangent)
    if answer is None:
        return Status.PASS, f"note: not run at x₁ ({where})"
    caught: CapturedWarnings | None = None
    try:
        with captured_warnings() as caught, computing_on(cell.device), _pinned(adapter, scenario.precision):
            at_second = prepared.to_numpy(prepared.at(answer.scenario.x, answer.tangent)())
            back = prepared.to_numpy(prepared.call())
    except Exception as exc:  # noqa: BLE001 - f runs at x₁ (its reference says so): the program does not
        cell.detail = full_text(exc)
        return Status.ERROR, f"the program, prepared at x₀, raised at x₁ ({where}): {_describe(exc)}"
    finally:
        if caught is not None:
            cell.warnings = merged(cell.warnings, caught.lines)
    found = judge_elsewhere(Elsewhere(first, at_second, back), scenario, reference, answer, tol, where)
    return found.status, found.message


def _pinned(adapter, setting: str | None):
    return adapter.pinned_precision(setting) if adapter else contextlib.nullcontext()


def _precision_and_tolerance(cell: Cell, scenario: Scenario, adapter) -> Tolerance:
    """Record the precision the frameworks run the cell with, and the tolerance that goes with it.

    The precision is read inside the scenario's pin. The tolerance is TF32's for float32 where TF32 is
    on, on a real GPU.
    """
    text = adapter.precision_text() if adapter else ""
    if simulated(cell.device):  # the arithmetic is the CPU's, whatever the switches say
        text = f"{text}; simulated {cell.device} (ran on the cpu)".lstrip("; ")
    cell.precision = text
    tf32 = bool(adapter) and adapter.tf32_active(cell.device, cell.dtype)
    tol = tolerance_for(cell.dtype, rtol=scenario.rtol, atol=scenario.atol, tf32=tf32)
    cell.rtol, cell.atol = tol.rtol, tol.atol
    return tol


class WiderDtypeWarning(UserWarning):
    """A narrower-dtype cell whose function returned or computed in float64."""


def _wider_dtype_note(prepared, dtype: str) -> str:
    """Note when f answers or computes in float64 for inputs of a narrower dtype.

    A note (and a warning on the cell) when f answers in float64, and a warning when it computes in
    float64 inside: the cell then checks float64 arithmetic, in whole or in part, not the dtype it is
    named for.
    """
    if dtype == "float64" or prepared.value_dtypes is None:
        return ""
    try:
        returned, computed = prepared.value_dtypes()
    except Exception:  # noqa: BLE001 -- only a note; the cell's verdict stands
        return ""
    if "float64" in returned:  # a cell of complex x reads complex128 outputs as their float64 parts
        note = wider_dtype_note(dtype, complex_x=bool(prepared.convention))
        warnings.warn(note.removeprefix("note: "), WiderDtypeWarning, stacklevel=2)
        return note
    if "float64" in computed:
        warnings.warn(f"f computes in float64 for {dtype} inputs and returns {dtype} (a float64 constant, time or "
                      f"arange promoted inside?): this cell checks float64 arithmetic in part", WiderDtypeWarning,
                      stacklevel=2)
    return ""


def _derivative_dtype(prepared, result: Any, dtype: str) -> str:
    """Why the backend's result is in another dtype than the cell's, or "" (``verdict.dtypes``)."""
    if prepared.result_dtypes is None:
        return ""
    value_dtypes = prepared.value_dtypes
    f_returns = (lambda: value_dtypes()[0]) if value_dtypes is not None else None
    return derivative_dtype_message(prepared.result_dtypes(result), dtype, f_returns,
                                    complex_x=bool(prepared.convention))


class RetraceWarning(UserWarning):
    """A compiled cell traced or compiled again at the same shapes, in a scenario that declared it may."""


def _retrace_message(recompiled: Compilations | None, backend: Backend, scenario: Scenario) -> str:
    """Why a compiled cell fails for tracing or compiling again on a later call, or "".

    A scenario that declares ``retraces=True`` gets a warning on the cell instead.
    """
    if not recompiled:
        return ""
    text = (f"{backend.name} {recompiled} again on a later call at the same shapes and dtypes (the compiled "
            f"program's cache missed: global configuration changed while tracing, a fresh closure or a "
            f"non-hashable static argument per call?)")
    if scenario.retraces:
        warnings.warn(f"{text}; the scenario declares retraces=True", RetraceWarning, stacklevel=2)
        return ""
    return f"{text}; every call pays the compile: fix the cache miss, or declare retraces=True if expected"


def _timed_calls(cell: Cell, backend: Backend, prepared, timings: bool = False) -> tuple[Any, Compilations | None]:
    """Compute the cell's result, timed, and what a compiled cell's later calls traced and compiled again.

    ``first_call_ms``: the first call, with its tracing and compiling where the backend compiles.
    ``time_ms``, the steady state: with ``timings``, the median of up to TIMING_REPEATS further calls
    (as many as fit in TIMING_BUDGET_S, at least one); without, the one further call of a backend that
    compiles (``Prepared.compiled``: it runs the program alone, at the cost of a run), and None for one
    that does not (op-by-op jax, torch): its computation runs once.
    """
    adapter = getattr(backend, "adapter", None)
    if adapter:
        adapter.reset_peak_memory(cell.device)
    start = time.perf_counter()
    result = prepared.call()
    cell.first_call_ms = (time.perf_counter() - start) * 1e3
    wanted = TIMING_REPEATS if timings else int(prepared.compiled)
    durations: list[float] = []
    budget_end = time.perf_counter() + TIMING_BUDGET_S
    # A compiled program's later calls at the same shapes only run it: a trace or compile among them is
    # a cache miss that every call of the user's code pays too.
    counting = adapter.counting_compilations() if adapter and prepared.compiled else contextlib.nullcontext()
    with counting as recompiled:
        while len(durations) < wanted and (not durations or time.perf_counter() < budget_end):
            start = time.perf_counter()
            result = prepared.call()
            durations.append(time.perf_counter() - start)
    cell.time_ms = statistics.median(durations) * 1e3 if durations else None
    if adapter:
        cell.peak_memory_bytes = adapter.peak_memory(cell.device)
    return result, recompiled


def _apply_xfail(cell: Cell, scenario: Scenario, exception: BaseException | None) -> None:
    expected = first_applying(scenario.xfail, cell.backend, cell.device, cell.dtype)
    if expected is None:
        return
    if cell.status in (Status.FAIL, Status.ERROR):
        if expected.met_by(exception if cell.status == Status.ERROR else None, cell.message):
            cell.status, cell.message = Status.XFAIL, f"{expected.reason} ({cell.message})"
        else:  # a failure, but not the declared one: still a failure, saying what was expected
            matching = f"matching {expected.match!r}" if expected.match else ""
            wanted = " ".join(filter(None, (expected.describe_raises(), matching)))
            cell.message = f"{cell.message} (an xfail expects {wanted}: {expected.reason})"
    elif cell.status == Status.PASS:
        cell.status, cell.message = Status.XPASS, f"expected to fail: {expected.reason}"
    cell.message = cell.message[:MESSAGE_LIMIT]


def _describe(exc: BaseException, note: str = "") -> str:
    """The cell's message for an exception, after the backend's note on how it computes where it has one."""
    if not note:
        return describe_exception(exc, MESSAGE_LIMIT)
    return f"{note}: {describe_exception(exc, MESSAGE_LIMIT - len(note) - 2)}"
