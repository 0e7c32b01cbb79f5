"""The sandbox side of the warm runner: ``python -m gradci.worker.runner_child``.

The only process where scenario code (untrusted: it comes from pull requests) and the frameworks
run. It reads one JSON request per line on stdin and answers one JSON line on a private copy of
the original stdout; scenario code printing to stdout is sent to stderr instead, so that it can
never corrupt the protocol. The messages are ``gradci.worker.runner_messages``'s records:

- ``{"op": "list", "source": ROOT|null, "family": NAME|null, "availability": bool}`` → the scenarios
  of the checkout at ROOT (null: the built-in library, or its family NAME), the registered backends
  (with why each cannot run here, and the devices there are, when ``availability`` is asked) and the
  checkout's ``[matrix]``;
- ``{"op": "warm", "backends": [...], "warm_up": bool}`` → imports the frameworks of those backends
  (and, with ``warm_up``, runs one tiny derivative on each that can run);
- ``{"op": "cells", "source", "family", "scenario", "backends", "devices", "dtypes"}`` → its cells
  over those axes, checked together as the engine checks a scenario (forward and reverse modes
  compared); the warnings raised outside any cell (computing the reference) are added to each.
  With ``"peers"`` (backends of the other mode), where the scenario's reference is made of probes,
  the peers' cells are checked too, for the comparison only, and not returned
  (``gradci.scenarios.check.check_scenario``). ``"options"``: further keyword arguments of
  ``check_scenario`` (the run's engine options, such as repeats), and ``"rule_coverage": true``: each
  cell then carries its rule-coverage record (``gradci.scenarios.rules.records``) and the answer the
  checkout's rules; with ``"power": true`` too, each cell that reached a rule its detection-power
  record (``gradci.scenarios.rules.power``), measured by re-running it with errors planted.
  Before the answer, a ``{"beat": true}`` line as each cell starts computing: the parent's timeout
  counts from the last one, so that it holds per cell. A cell that died of a CUDA out-of-memory or
  illegal-address error (``DEVICE_FAULTS``) is an ``error`` cell saying so, and the answer carries
  ``"restart"``: the parent restarts the runner before the next request.

Every answer carries ``rss_bytes``, the runner's resident memory after it: the parent restarts a
runner above its memory ceiling between requests. On a GPU worker the runner caps its device memory
(``cap_device_memory``: XLA's from the environment, torch's per-process fraction once torch is here).

It holds no secret (the parent scrubs its environment and ``gradci.worker.sandbox`` confines it) and
writes nothing but its answers; the parent owns timeouts and restarts.
"""
from __future__ import annotations

import base64
import contextlib
import faulthandler
import os
import re
import resource
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from gradci.scenarios.contract.cell import OPERATORS, Status
from gradci.services.secrecy import forbid_inspection
from gradci.worker import runner_messages as messages

if TYPE_CHECKING:
    from gradci.scenarios.backends import Backend

SOURCE_LIMIT = 20_000  # characters of one rule method's source kept for the dashboard
# Set by a GPU worker (``gradci.worker.context``): the share of its GPU torch may take in this runner.
TORCH_MEMORY_FRACTION_VARIABLE = "GRADCI_TORCH_MEMORY_FRACTION"
# Errors after which the CUDA context cannot be trusted (an illegal address poisons it for good; an
# out-of-memory leaves the caches fragmented): the cell is an error and the runner is restarted.
DEVICE_FAULTS = (
    ("device out of memory", re.compile(
        r"CUDA out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|RESOURCE_EXHAUSTED")),
    ("CUDA illegal memory access", re.compile(
        r"illegal memory access|CUDA_ERROR_ILLEGAL_ADDRESS|illegal address|misaligned address|device-side assert",
        re.IGNORECASE)),
)


def _definition(defined_at: tuple[str, int] | None, root: str | None) -> tuple[str | None, int | None]:
    """Where a scenario was defined, the file relative to the repository's root.

    None outside it (the built-in library, a helper installed elsewhere): no path of the worker's
    machine is listed.
    """
    if defined_at is None or root is None:
        return None, None
    path, line = defined_at
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix(), line
    except ValueError:
        return None, None


class SourceCache:
    """The scenarios of one source at a time.

    Checkouts of one repository at two commits have the same module names, so switching source first
    forgets the modules imported from the previous checkout: ``import`` would otherwise return the old
    commit's code. The built-in library's source is the root None, all of it or one ``family`` of it.
    """

    def __init__(self) -> None:
        self.root: str | None = None
        self.family: str | None = None
        self.loaded = False
        self.scenarios: dict[str, Any] = {}
        self.file_matrix: dict[str, Any] = {}
        # Every job lists its source: each scenario is fingerprinted once per runner, not per job.
        self.fingerprints: dict[str, str] = {}
        self.listing: list[messages.ScenarioEntry] = []
        self._tracer: Any = None  # the checkout's RuleTracer, made when rule coverage is first asked for

    def tracer(self) -> Any:
        """The rule tracer of this checkout (None for the built-in library: it has no project files)."""
        if self._tracer is None and self.root is not None:
            from gradci.scenarios.rules.tracing import RuleTracer

            self._tracer = RuleTracer(self.root)
        return self._tracer

    def get(self, root: str | None, family: str | None = None) -> SourceCache:
        if self.loaded and (root, family) == (self.root, self.family):
            return self
        self._forget_modules_under(self.root)
        self.root, self.family, self.loaded, self._tracer = root, family, False, None
        tracer = self.tracer()  # what the scenarios' imports run and read counts for every cell
        with tracer.loading() if tracer is not None else contextlib.nullcontext():
            found, self.file_matrix = _load(root, family)
        from gradci.scenarios.authoring.fingerprints import walks_shared

        self.scenarios = {scenario.name: scenario for scenario in found}
        with walks_shared():  # the scenarios walk the same library: each object of it is walked once
            self.fingerprints = {scenario.name: scenario.fingerprint() for scenario in found}
            self.listing = [
                messages.ScenarioEntry(name=s.name, operator=s.operator, dtypes=list(s.dtypes), tags=list(s.tags),
                                       fingerprint=self.fingerprints[s.name], requirements=s.requirements.to_dict(),
                                       function=s.function_fingerprint(), lacks=list(s.lacked_frameworks()),
                                       file=file, line=line)
                for s in found for file, line in [_definition(s.defined_at(), root)]
            ]
        self.loaded = True
        return self

    @staticmethod
    def _forget_modules_under(root: str | None) -> None:
        if root is None:
            return
        prefix = str(Path(root).resolve()) + os.sep
        for name, module in list(sys.modules.items()):
            if (getattr(module, "__file__", None) or "").startswith(prefix):
                del sys.modules[name]


def _load(root: str | None, family: str | None) -> tuple[list[Any], dict[str, Any]]:
    if root is None:
        from gradci.scenarios import library

        return (library.default() if family is None else library.family(family)), {}
    from gradci.scenarios.authoring.project import load_project, load_scenarios

    project = load_project(root)
    return load_scenarios(project), project.matrix.to_mapping()


def _describe(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500]


def list_source(cache: SourceCache, request: messages.ListRequest) -> messages.ListReply:
    from gradci.scenarios.backends import registry

    source = cache.get(request.source, request.family)
    backends = [messages.BackendEntry(name=b.name, framework=b.framework, mode=b.mode, default=b.default)
                for b in registry().values()]
    for backend, entry in zip(registry().values(), backends):
        computed = [operator for operator in OPERATORS if backend.computes(operator)]
        if len(computed) < len(OPERATORS):
            entry["operators"] = computed
    reply = messages.ListReply(scenarios=source.listing, backends=backends, file_matrix=source.file_matrix)
    if request.availability:
        from gradci.scenarios.check import available_devices

        # unavailable() imports each framework: only the planner asks, jobs warm their own backend.
        for backend, entry in zip(registry().values(), backends):
            entry["unavailable"] = backend.unavailable()
        reply.devices = available_devices()
    if request.rules and source.root is not None:
        reply.rules = listed_rules(source.root)
    return reply


def listed_rules(root: str) -> list[dict[str, Any]]:
    """The checkout's rules as the run's catalog keeps them: each method with its source text.

    The service keeps no checkout: the dashboard shows a rule's lines from this text.
    """
    import linecache

    from gradci.scenarios.rules.discovery import discover_rules

    listed = []
    for rule in discover_rules(root):
        entry = rule.to_dict()
        for method, data in zip(rule.methods, entry["methods"]):
            lines = linecache.getlines(str(Path(root) / method.file))[method.first_line - 1:method.last_line]
            data["source"] = "".join(lines)[:SOURCE_LIMIT]
        listed.append(entry)
    return listed


# Modules a framework imports on a first use that users' code reaches without asking for them, by
# framework: torch's ``_disable_dynamo`` wrapper (around nn.Parameter registration, optimizers' steps,
# and more) imports torch._dynamo on its first call, 1.6 s on the 2-core machine. A spare imports
# them while it waits; a runner started for its tenant does not (its tenant may never need them).
LAZY_IMPORTS = {"torch": ("torch._dynamo",)}


def warm(request: messages.WarmRequest) -> messages.WarmReply:
    from gradci.scenarios.backends import get_backend

    # unavailable() imports the backend's framework: the one-time cost paid here, not in a cell.
    reasons = {name: get_backend(name).unavailable() for name in request.backends}
    if request.warm_up:
        ready = [get_backend(name) for name, why in reasons.items() if why is None]
        warm_up(ready)
        import_lazily_imported({backend.framework for backend in ready})
    return messages.WarmReply(unavailable=reasons, device_memory=cap_device_memory())


def import_lazily_imported(frameworks: Iterable[str]) -> None:
    """Import what these frameworks would import on a first use (``LAZY_IMPORTS``); a failure says nothing."""
    import importlib

    for framework in sorted(frameworks):
        for name in LAZY_IMPORTS.get(framework, ()):
            with contextlib.suppress(Exception):
                importlib.import_module(name)


def warm_up(backends: list[Backend]) -> None:
    """One tiny cell on each backend not warmed yet, on the CPU, whose results are dropped.

    Called before a scenario's cells, for the backends it has an f for: what a framework loads on its
    first derivative loads here (``torch.func`` imports ``torch._dynamo`` on first use: over a second),
    not in the first cell: outside its time and rule coverage's tracer, under which Python's own
    import runs several times slower on 3.11. A backend no scenario reaches is never warmed. The
    frameworks' code is not the user's: nothing of it is recorded. A warm-up that fails says nothing:
    the cells report their own errors.
    """
    backends = [backend for backend in backends if backend.name not in _warmed]
    _warmed.update(backend.name for backend in backends)
    if not backends:
        return
    import numpy as np

    from gradci.scenarios.authoring.scenario import Scenario
    from gradci.scenarios.check import check_scenario
    from gradci.scenarios.reference.answer import ReferenceCache
    from gradci.scenarios.verdict.captured_warnings import captured_warnings

    def square_sum(v: Any) -> Any:
        return (v * v).sum()

    scenario = Scenario("gradci/warm-up", "gradient", {"torch": square_sum, "jax": square_sum},
                        np.array([0.5, 1.5]), dtypes=("float64",))
    with contextlib.suppress(Exception), captured_warnings():
        check_scenario(scenario, backends, ["cpu"], ["float64"], ReferenceCache())


_warmed: set[str] = set()  # the backends warm_up ran in this process
_torch_capped: dict[str, Any] | None = None


def cap_device_memory() -> dict[str, Any]:
    """Apply the GPU worker's memory caps once torch is imported, and say what was applied.

    XLA's come with the environment the runner started with (preallocation off, a memory fraction);
    torch's per-process fraction is set here, only where torch sees a CUDA device — with a simulated
    GPU the record says what would have been applied, and why it was not.
    """
    global _torch_capped
    fraction = os.environ.get(TORCH_MEMORY_FRACTION_VARIABLE)
    caps: dict[str, Any] = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            "torch_memory_fraction": float(fraction) if fraction else None,
                            "xla_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
                            "xla_memory_fraction": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")}
    if _torch_capped is not None:
        return {**caps, **_torch_capped}
    torch = sys.modules.get("torch")
    if not fraction:
        return {**caps, "torch_applied": False, "why_not": "no cap asked (not a GPU worker)"}
    if torch is None:
        return {**caps, "torch_applied": False, "why_not": "torch is not imported yet"}
    if not torch.cuda.is_available():
        _torch_capped = {"torch_applied": False, "why_not": "torch sees no CUDA device"}
    else:
        for index in range(torch.cuda.device_count()):
            torch.cuda.set_per_process_memory_fraction(float(fraction), index)
        _torch_capped = {"torch_applied": True}
    return {**caps, **_torch_capped}


def device_fault(message: str) -> str | None:
    """What kind of device fault an error cell's message shows (None: not one)."""
    return next((kind for kind, pattern in DEVICE_FAULTS if pattern.search(message)), None)


class AnnouncingBackend:
    """An engine backend that says when each of its cells starts computing (``beat``).

    The parent's timeout then holds per cell while a scenario's cells are checked in one request.
    """

    def __init__(self, backend: Any, beat: Callable[[], None]) -> None:
        self._backend, self._beat = backend, beat

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def prepare(self, *args: Any, **kwargs: Any) -> Any:
        self._beat()
        return self._backend.prepare(*args, **kwargs)


def check_cells(
    cache: SourceCache, request: messages.CellsRequest, beat: Callable[[], None]
) -> messages.CellsReply | messages.Refusal:
    from gradci.scenarios.affected.recording import DEPENDS_KEY
    from gradci.scenarios.backends import get_backend
    from gradci.scenarios.check import check_scenario
    from gradci.scenarios.reference.answer import shared_cache
    from gradci.scenarios.rules.records import RECORD_KEY
    from gradci.scenarios.rules.tracing import tracing
    from gradci.scenarios.verdict.captured_warnings import captured_warnings, merged

    source = cache.get(request.source, request.family)
    scenario = source.scenarios.get(request.scenario)
    if scenario is None:
        return messages.Refusal(error=f"scenario {request.scenario!r} is not declared by this checkout")
    cap_device_memory()  # a scenario module may have imported torch since the runner warmed up
    def announcing(names: Iterable[str]) -> list[Backend]:  # each an AnnouncingBackend: a Backend by delegation
        return cast("list[Backend]", [AnnouncingBackend(get_backend(name), beat) for name in names])

    backends = announcing(request.backends)
    peers = announcing(name for name in request.peers if name not in request.backends)
    options = dict(request.options)
    tracer = source.tracer() if options.pop("rule_coverage", False) else None
    offer_references(options.pop("references", None) or [])
    keep_references = bool(options.pop("keep_references", False))
    if tracer is not None:  # a default branch's run keeps its references, with what computing them read
        tracer.records_references = keep_references
    power = bool(options.pop("power", False)) and tracer is not None  # it re-runs the cells that reached a rule
    warm_up([backend for backend in map(get_backend, dict.fromkeys([*request.backends, *request.peers]))
             if not scenario.implementation_missing(backend.framework)])
    with captured_warnings() as outside, tracing(tracer):  # the cells keep their own; these came from the reference
        cells = check_scenario(scenario, backends, request.devices, request.dtypes, shared_cache(),
                               peers=peers, **options)
    restart = None
    for cell in cells:
        cell.warnings = merged(cell.warnings, outside.lines)
        fault = device_fault(cell.message) if cell.status == Status.ERROR else None
        if fault:
            cell.message = f"{fault} (the runner was restarted): {cell.message}"
            restart = restart or f"{fault} in {cell.backend} on {cell.device}"
        elif cell.status == Status.ERROR and "MemoryError" in cell.message:
            cell.message = f"out of memory ({_memory_limit()}): {cell.message}"
    fingerprint = source.fingerprints[scenario.name]
    stamped = [{**cell.to_dict(), "fingerprint": fingerprint} for cell in cells]
    if tracer is None:
        return messages.CellsReply(cells=stamped, restart=restart)
    rules = tracer.rules()  # beside the verdict, never in it: the record is a key of its own
    for record, cell in zip(stamped, cells):
        record[DEPENDS_KEY] = {**tracer.depends(cell.key), "scenario": fingerprint}
    taken = {cell.key: tracer.take(cell.key, rules) for cell in cells}
    for record, cell in zip(stamped, cells):
        record[RECORD_KEY] = taken[cell.key].to_dict()
    if power:  # after the verdicts are stamped: the re-runs with plants cannot change them
        from gradci.scenarios.power.measure import measure_power
        from gradci.scenarios.rules.power import POWER_KEY, CellPower

        try:
            powers = measure_power(scenario, cells, taken, rules, tracer.root, backends, shared_cache(), peers=peers)
        except BaseException as exc:  # noqa: BLE001 - a plant may break the user's code any way; the verdicts stand
            powers = {cell.key: CellPower(not_measured=f"power not measured: a planted rule's re-run raised "
                                                       f"{_describe(exc)}") for cell in cells if taken[cell.key].rules}
        for record, cell in zip(stamped, cells):
            if cell.key in powers:
                record[POWER_KEY] = powers[cell.key].to_dict()
    kept = [{"key": kept.key, "payload": base64.b64encode(kept.payload).decode(),
             "depends": {**kept.depends, "scenario": fingerprint}} for kept in shared_cache().kept_for_later()]
    return messages.CellsReply(cells=stamped, restart=restart, rules=[rule.to_dict() for rule in rules],
                               references=kept if keep_references else None)


def offer_references(offers: Iterable[Mapping[str, Any]]) -> None:
    """Earlier runs' references the worker found still valid for this checkout, for the cache to use.

    The worker offers only those whose recorded inputs are unchanged; the cache takes one only for
    the scenario whose cache key it names (``ReferenceCache.offer``).
    """
    from gradci.scenarios.reference.answer import shared_cache

    for offer in offers:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            shared_cache().offer(str(offer["key"]), base64.b64decode(offer["payload"]), str(offer.get("origin", "")))


def _memory_limit() -> str:
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    return "no address-space limit" if limit == resource.RLIM_INFINITY else f"the runner's limit is {limit >> 20} MB"


def handle(cache: SourceCache, request: messages.Request, beat: Callable[[], None]) -> messages.Answer:
    try:
        if isinstance(request, messages.ListRequest):
            return list_source(cache, request)
        if isinstance(request, messages.WarmRequest):
            return warm(request)
        return check_cells(cache, request, beat)
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything (SystemExit too); the runner stays up
        return messages.Refusal(error=_describe(exc))


def answer(cache: SourceCache, line: str, beat: Callable[[], None]) -> messages.Answer:
    try:
        request = messages.parse_request(line)
    except (messages.ProtocolError, ValueError) as exc:
        return messages.Refusal(error=str(exc))
    return handle(cache, request, beat)


def serve(requests: TextIO, replies: TextIO) -> None:
    def send(message: messages.Answer | messages.Beat) -> None:
        replies.write(message.to_json() + "\n")
        replies.flush()

    cache = SourceCache()
    send(messages.Ready(pid=os.getpid(), rss_bytes=resident_bytes()))
    for line in requests:
        if line.strip():
            reply = answer(cache, line, beat=lambda: send(messages.Beat()))
            # After every answer: the parent restarts a runner above its memory ceiling between requests.
            reply.rss_bytes = resident_bytes()
            send(reply)


def resident_bytes() -> int | None:
    """This process's resident memory now (None where /proc is not there)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except (OSError, IndexError, ValueError):
        return None


def main() -> None:
    # Other runners run as the same user: none may attach to this one or read its memory.
    forbid_inspection()
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # user prints land in the worker's log
    faulthandler.enable()  # a segfault leaves a Python traceback in the worker's log
    serve(sys.stdin, replies)


if __name__ == "__main__":
    main()
