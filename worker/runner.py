"""The warm runner: one sandboxed subprocess per worker process, where scenario code runs.

The worker process itself never imports scenario code or a framework. It asks its runner
(``gradci.worker.runner_child``) for the cells of one scenario at a time over JSON lines
(``gradci.worker.runner_messages``; a job asks for a scenario's cells of its backend and device,
``gradci check`` for all of a scenario's), with a timeout per cell. When the runner
segfaults, aborts, exits or hangs, the cells asked for become ``error`` cells naming the signal or
the timeout, the runner is killed (with anything it started: it leads its own process group) and
the next request starts a fresh one, so the job goes on with its next cell. Between requests, never
during one, it also restarts a runner whose resident memory went above ``max_rss_mb`` (the
libraries' caches grow over a long run) or whose last cell hit a CUDA fault (``runner_child``).

Pull-request code must not reach the worker's credentials: the runner's environment is scrubbed of
them, and it runs confined by ``gradci.worker.sandbox`` (another user, namespaces, an address-space
limit, a scratch folder of its own). Its output reaches the worker's log only up to a budget per
request (``gradci.worker.runner_output``), and it dies with the worker process that started it.
"""
from __future__ import annotations

import atexit
import dataclasses
import hashlib
import itertools
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from gradci.scenarios.contract.cell import Status
from gradci.scenarios.contract.simulated_gpus import inline_inventory
from gradci.worker import runner_messages as messages
from gradci.worker.runner_child import TORCH_MEMORY_FRACTION_VARIABLE
from gradci.worker.runner_output import OutputDrain
from gradci.worker.sandbox import Box, BoxUnavailable, SandboxPolicy, runner_command

log = logging.getLogger(__name__)
A = TypeVar("A", bound=messages.Answer)

STARTUP_TIMEOUT_S = 300.0  # importing jax and torch on a cold, busy machine
LIST_TIMEOUT_S = 600.0  # importing a repository's scenario modules and fingerprinting them
OUTPUT_LIMIT_BYTES = 64 << 10
CACHE_MAX_MB = 4096
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL", "PASSWD")
SECRET_NAMES = frozenset({"DATABASE_URL", "BROKER_URL", "REDIS_URL", "CELERY_BROKER_URL", "PGPASSFILE"})
# gradci settings meant for the engine itself, which the runner keeps (no credential among them).
ENGINE_SETTINGS = frozenset({"GRADCI_JAX_CACHE_DIR", "GRADCI_JAX_CACHE_MAX_MB", TORCH_MEMORY_FRACTION_VARIABLE})


def scrubbed_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without gradci's settings and anything that looks like a credential."""
    environ = dict(os.environ if environ is None else environ)
    kept = {
        name: value
        for name, value in environ.items()
        if (name.upper() in ENGINE_SETTINGS or not name.upper().startswith("GRADCI_"))
        and name.upper() not in SECRET_NAMES
        and not any(marker in name.upper() for marker in SECRET_MARKERS)
    }
    # The runner imports gradci as this worker does: installed (a wheel, or an editable install
    # whose finder maps the repository's folders), never from a tree put on PYTHONPATH, which would
    # also offer gradci's tests/ and bench/ to the user's imports.
    return kept


# (checkout, repository, trusted) whose code a runner holds; the built-in library's is (None, None,
# True). Trusted: its runs may write the repository's compilation cache (the default branch).
Tenant = tuple[str | None, str | None, bool]
BUILT_IN: Tenant = (None, None, True)


class RunnerError(RuntimeError):
    """The runner died, hung or refused a request; the message says which."""


class RunnerDied(RunnerError):
    """The runner process died (a signal, an exit) while answering: a crash in the cell it checked."""


class RunnerTimeout(RunnerError):
    pass


@dataclasses.dataclass(frozen=True)
class CellSpec:
    """One cell to check.

    ``device`` is the label stored with the result (the run's device); ``run_on`` the device the runner
    computes on, when the worker maps the label to its own GPU.
    """

    scenario: str
    backend: str
    device: str
    dtype: str
    operator: str = ""
    framework: str = ""
    mode: str = ""
    source: str | None = None  # checkout root; None: the built-in library
    run_on: str | None = None
    fingerprint: str | None = None
    family: str | None = None  # with source None: one family of the built-in library (None: all of it)
    repository: str | None = None  # the checkout's repository: its runner's compilation cache is its own
    trusted: bool = False  # a run of the default branch (or the developer's own): it may write that cache

    def error_cell(self, message: str) -> dict[str, Any]:
        return {"scenario": self.scenario, "operator": self.operator, "framework": self.framework,
                "backend": self.backend, "mode": self.mode, "device": self.device, "dtype": self.dtype,
                "status": Status.ERROR, "message": message[:500], "fingerprint": self.fingerprint}


def describe_exit(returncode: int | None, *, boxed: bool = False) -> str:
    """How the runner ended. In the box, bubblewrap reports a runner killed by signal N as 128 + N."""
    if returncode is None:
        return "stopped answering"
    if boxed and 128 < returncode < 128 + 65:
        returncode = 128 - returncode
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


class WarmRunner:
    """The parent side. Not thread-safe: one per worker process (see ``shared_runner``)."""

    def __init__(self, *, cell_timeout_s: float, workdir: Path, extra_env: dict[str, str] | None = None,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S, list_timeout_s: float = LIST_TIMEOUT_S,
                 sandbox: SandboxPolicy | None = None, output_limit_bytes: int = OUTPUT_LIMIT_BYTES,
                 max_rss_mb: int = 0, cache_max_mb: int = CACHE_MAX_MB) -> None:
        self.cell_timeout_s = cell_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.list_timeout_s = list_timeout_s
        self.workdir = Path(workdir)
        self.extra_env = dict(extra_env or {})
        self.sandbox = sandbox or SandboxPolicy()
        self.cache_max_mb = cache_max_mb  # all repositories' compilation caches together
        self.output_limit_bytes = output_limit_bytes
        self.max_rss_mb = max_rss_mb  # 0: never restarted for its memory
        self.starts = 0
        self.recycles = 0  # restarts between requests: for its memory, or after a device fault
        self.peak_rss_bytes = 0  # the most any of its runners held after a request
        self.device_memory: dict[str, Any] | None = None  # the GPU memory caps the runner applied
        self._restart_due: str | None = None
        # A runner started ahead of any tenant (``keep_spare``): the next pull request's checkout is
        # linked into its empty folder and it serves that checkout alone, its frameworks imported.
        self._spare: WarmRunner | None = None
        self._placeholder: Path | None = None  # a spare's folder, bound where the checkout would be
        self._seen_root: str | None = None  # where the runner sees its checkout, when not at its path
        self.spares_taken = 0
        self.served_pull_request = False  # whether any untrusted checkout ran here: spares are for those
        self.backends_used: set[str] = set()  # what its runners warmed: what a spare warms
        self._process: subprocess.Popen[bytes] | None = None
        self._box: Box | None = None
        self._process_limit_reached = False  # during the last answered request
        self._output: OutputDrain | None = None
        self._scratch: Path | None = None
        self._buffer = b""
        self._warm: set[str] = set()
        # Whose code this runner serves: (checkout, repository), None for the built-in library. A
        # process that imported one checkout's code never serves another's (``_serve``).
        self._tenant: Tenant = BUILT_IN
        self.tenant_switches = 0
        # The derivative rules its checkouts' answers named, by id (rule coverage asked for): a rule made
        # inside a function appears once made, so each answer's rules are added to the earlier ones'.
        self.rules: dict[str, dict[str, Any]] = {}
        # Those of the last answer alone: a worker's job stores them for its own run and checkout.
        self.last_rules: list[dict[str, Any]] = []
        self.last_references: list[dict[str, Any]] = []  # what the last request kept of its references

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self.alive else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        if self.alive:
            return
        self.close()
        source, _, trusted = self._tenant
        if source is not None and not trusted:
            self.served_pull_request = True
            if self._take_spare(source):
                return
        self._launch()
        self._await_ready()

    def _launch(self, *, idle: bool = False) -> None:
        """Start the runner's box for its tenant; its ``Ready`` is read by ``_await_ready``.

        ``idle``: at the lowest CPU priority until taken (a spare: ``Box.start``).
        """
        source, _, trusted = self._tenant
        # A fresh scratch folder per start: nothing one runner wrote is there for the next.
        self._scratch = self.workdir / "runner" / f"scratch-{os.getpid()}-{next(_folder_numbers)}"
        # Only trusted runs (the default branch, the built-in library) write the repository's
        # compilation cache that later runs load; a pull request's runner gets a throwaway one.
        cache = self.workdir / "runner" / "jax-cache" / cache_scope(self._tenant) if trusted else None
        env = {**scrubbed_environment(), **inline_inventory(), **self.extra_env, "HOME": str(self._scratch),
               "TMPDIR": str(self._scratch), "XDG_CACHE_HOME": str(self._scratch / ".cache")}
        if os.path.isabs(env.get("GRADCI_JAX_CACHE_DIR") or "/"):  # unless the cache is switched off
            env["GRADCI_JAX_CACHE_DIR"] = str(cache or self._scratch / "jax-cache")
            if cache is not None:
                trim_caches(cache.parent, keep=cache, max_total_mb=self.cache_max_mb)
                env["GRADCI_JAX_CACHE_MAX_MB"] = str(self.cache_max_mb)
        try:
            self._box = self.sandbox.box(scratch=self._scratch, checkout=source, cache=cache)
            self._process = self._box.start(runner_command(), env, idle=idle)
        except (BoxUnavailable, OSError) as exc:
            self.close()
            raise RunnerError(f"the runner's box could not be built: {exc}") from None
        assert self._process.stderr is not None  # stderr=PIPE
        self._output = OutputDrain(self._process.stderr, self.output_limit_bytes)
        self.starts += 1
        self._buffer, self._warm, self._restart_due = b"", set(), None

    def _await_ready(self) -> None:
        ready = self._read_answer(messages.Ready, self.startup_timeout_s, what="starting")
        if not isinstance(ready, messages.Ready):
            self.close()
            raise RunnerError(f"the runner did not start: {ready}")

    # --- the spare ------------------------------------------------------------------------------

    def keep_spare(self, backends: Sequence[str]) -> None:
        """Have a spare runner start, unless one is there: the next pull request's checkout takes it.

        A cold runner spends seconds in its box's start and in importing torch and jax, before the
        first line of the tenant's code; a pull request's small run would pay that twice (its plan's
        listing, then its job in another worker process). The spare pays it now, while this process
        waits for work: started for no tenant, with an empty folder bound read-only where a checkout
        would be, it imports the frameworks of ``backends`` and warms each with one tiny derivative.
        Only an untrusted tenant (a pull request) takes it: a trusted one binds its repository's
        compilation cache, which a box cannot gain after its start. Taken, it is that tenant's runner
        like any other, and ends with it: no process serves a second tenant.
        """
        spare = self._spare
        if spare is not None and spare.alive and spare.extra_env == self.extra_env:
            return
        self.close_spare()
        remove_orphaned_spare_folders(self.workdir / "runner")
        placeholder = self.workdir / "runner" / f"spare-{os.getpid()}-{next(_folder_numbers)}"
        shutil.rmtree(placeholder, ignore_errors=True)
        placeholder.mkdir(parents=True)
        spare = self._sibling()
        spare._tenant, spare._placeholder = (str(placeholder), None, False), placeholder
        try:
            spare._launch(idle=True)  # warming while jobs run beside it, it takes only the cycles they leave
            spare._send(messages.WarmRequest(backends=list(backends), warm_up=True), what="warming a spare")
        except RunnerError as exc:
            log.warning("no spare runner: %s", exc)
            spare.close()
            return
        self._spare = spare

    def _sibling(self) -> WarmRunner:
        """A runner of this one's settings, with no tenant yet."""
        return WarmRunner(cell_timeout_s=self.cell_timeout_s, workdir=self.workdir, extra_env=self.extra_env,
                          startup_timeout_s=self.startup_timeout_s, list_timeout_s=self.list_timeout_s,
                          sandbox=self.sandbox, output_limit_bytes=self.output_limit_bytes,
                          max_rss_mb=self.max_rss_mb, cache_max_mb=self.cache_max_mb)

    def close_spare(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.close()

    def _take_spare(self, source: str) -> bool:
        """Become the spare runner, ``source``'s files linked into its folder (False: none to take)."""
        spare, self._spare = self._spare, None
        if spare is None:
            return False
        if not spare.alive or spare.extra_env != self.extra_env or spare._placeholder is None:
            spare.close()
            return False
        try:
            link_tree(Path(source), spare._placeholder)
            if spare._box is not None:  # the usual priority from now on: its tenant waits on it
                spare._box.prioritise()
            spare._await_ready()
            reply = spare._read_answer(messages.WarmReply, self.startup_timeout_s, what="warming a spare")
        except (OSError, RunnerError) as exc:
            log.warning("the spare runner could not be taken (%s): starting one", exc)
            spare.close()
            return False
        if not isinstance(reply, messages.WarmReply):
            spare.close()
            return False
        assert spare._output is not None
        spare._output.next_request()
        # Its process, box, folders and pipes become this runner's; the spare object is left empty.
        for name in ("_process", "_box", "_output", "_scratch", "_placeholder"):
            setattr(self, name, getattr(spare, name))
            setattr(spare, name, None)
        self._buffer, spare._buffer = spare._buffer, b""
        self._warm = {name for name, why in reply.unavailable.items() if why is None}
        self.device_memory = reply.device_memory
        self._seen_root = str(self._placeholder)
        self._restart_due = None
        self.starts += 1
        self.spares_taken += 1
        log.info("runner pid %s: the spare, taken for %s", self.pid, source)
        return True

    def _serve(self, source: str | None, repository: str | None, trusted: bool = True) -> None:
        """Make sure the runner belongs to the tenant of ``source``'s code, before a request about it.

        ``source`` None is the built-in library. A runner started for another tenant is stopped, so that
        the next request starts one of this tenant's own, seeing only this tenant's compilation cache. A
        scenario module may patch anything in the process it is imported into — the engine's comparison
        included — so no process outlives its tenant.
        """
        tenant = (source, repository or source, trusted) if source else BUILT_IN
        if tenant != self._tenant:
            if self.alive:
                log.info("restarting the runner (pid %s): its next request is another checkout's", self.pid)
                self.tenant_switches += 1
                self.close()
            self._tenant = tenant

    def _restart_if_due(self) -> None:
        """Stop the runner between requests when it is due for a restart.

        Between requests, never during one: a runner above its memory ceiling, or whose CUDA context a
        device fault may have poisoned, is stopped here and the next request starts a fresh one.
        """
        if self._restart_due is not None and self.alive:
            log.info("restarting the runner (pid %s): %s", self.pid, self._restart_due)
            self.recycles += 1
            self.close()
        self._restart_due = None

    def _note(self, reply: messages.Answer) -> None:
        """What an answer says about the runner itself: its memory, and whether it must restart."""
        rss = reply.rss_bytes or 0
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        if isinstance(reply, messages.CellsReply) and reply.restart:
            self._restart_due = reply.restart
        elif self.max_rss_mb and rss > self.max_rss_mb << 20:
            self._restart_due = f"{rss >> 20} MB resident, above the ceiling of {self.max_rss_mb} MB"
        self._process_limit_reached = self._box is not None and self._box.process_limit_reached()
        if self._process_limit_reached:
            # What it forked may still run beside it: its next request gets a fresh box.
            self._restart_due = f"it reached its process limit ({self.sandbox.pids_max} processes)"

    def close(self) -> None:
        """End the runner: killed at once with whatever it spawned, and forgotten.

        Its answers are all read by then and it keeps nothing, so nothing is lost: asked to stop, a
        runner that loaded torch and jax spends about two seconds finalizing (their threads and static
        objects), which every ``gradci check``, every restart and every pull request's end waited for.
        """
        process, self._process = self._process, None
        box, self._box = self._box, None
        placeholder, self._placeholder, self._seen_root = self._placeholder, None, None
        if placeholder is not None:  # the links to a checkout's files, not the files
            shutil.rmtree(placeholder, ignore_errors=True)
        if process is None:
            if box is not None:
                box.close()
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                process.kill()
        process.wait()
        if box is not None:  # bwrap's end ended its PID namespace; the cgroup takes any straggler
            box.close()
        if self._output is not None:
            self._output.close()
            self._output = None
        for stream in (process.stdin, process.stdout, process.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    # --- the protocol ---------------------------------------------------------------------------

    def _read_answer(
        self, expected: type[A], timeout_s: float, *, what: str
    ) -> A | messages.Ready | messages.Refusal | messages.Beat:
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise RunnerTimeout(f"timeout after {timeout_s:g} s {what} (the runner was killed and restarted)")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self._on_death(what)
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return messages.parse_answer(line, expected)
        except (messages.ProtocolError, ValueError) as exc:
            self.close()
            raise RunnerError(f"the runner answered {line[:200]!r} while {what}: {exc} (it was restarted)") from None

    def _on_death(self, what: str) -> None:
        assert self._process is not None
        try:
            returncode = self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            returncode = None
        output = self._output
        self._output = None  # closed here, for the traceback it holds
        tail = output.close() if output is not None else ""
        boxed = self._box is not None and self._box.boxed
        self.close()
        frames = crash_frames(tail, self._seen_root or self._tenant[0])
        where = f"; innermost user frames (faulthandler): {frames}" if frames else ""
        raise RunnerDied(f"runner {describe_exit(returncode, boxed=boxed)} while {what} (it was restarted){where}")

    def request(self, payload: messages.Request, timeout_s: float, *, what: str) -> messages.Answer:
        """Send one request and wait for its answer.

        It waits ``timeout_s`` at most from the request or from the runner's last word that a cell
        started. The runner is started first when it is not running (or restarted, when the previous
        answer asked for that).
        """
        self._restart_if_due()
        self.start()
        assert self._output is not None
        output = self._output
        if (self._seen_root is not None and isinstance(payload, messages.ListRequest | messages.CellsRequest)
                and payload.source == self._tenant[0]):
            payload = dataclasses.replace(payload, source=self._seen_root)  # the folder it sees the checkout in
        try:
            self._send(payload, what=what)
            reply = self._read_answer(payload.answer, timeout_s, what=what)
            while isinstance(reply, messages.Beat):  # the next cell started: its own timeout begins
                reply = self._read_answer(payload.answer, timeout_s, what=what)
            output.next_request()
            if isinstance(reply, messages.Ready):
                self.close()
                raise RunnerError(f"the runner said it started again while {what} (it was restarted)")
            self._note(reply)
            return reply
        except RunnerError:
            raise
        except BaseException:
            # Interrupted mid-request (a soft time limit, a signal): its answer would be read as the
            # next request's, so this runner cannot be trusted again.
            self.close()
            raise

    def _send(self, payload: messages.Request, *, what: str) -> None:
        assert self._process is not None and self._process.stdin is not None
        try:
            self._process.stdin.write(messages.request_to_json(payload).encode() + b"\n")
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):
            self._on_death(what)

    # --- what the worker asks -------------------------------------------------------------------

    def list_source(self, source: str | None, *, availability: bool = False,
                    family: str | None = None, repository: str | None = None,
                    trusted: bool = False, rules: bool = False) -> messages.ListReply:
        """Scenarios, backends and file matrix of a checkout.

        ``source`` None is the built-in library, or one ``family`` of it. ``availability`` also says which
        backends can run here and which devices there are, at the price of importing every framework.
        ``rules``: also the checkout's derivative rules.
        """
        self._serve(source, repository, trusted)
        request = messages.ListRequest(source=source, family=family, availability=availability, rules=rules)
        reply = self.request(request, self.list_timeout_s, what="importing and listing the scenarios")
        if isinstance(reply, messages.Refusal):
            raise RunnerError(reply.error)
        assert isinstance(reply, messages.ListReply)
        return reply

    def warm(self, backends: list[str]) -> None:
        """Import the frameworks of ``backends`` once, outside any cell's timeout."""
        missing = [name for name in backends if name not in self._warm]
        if missing:
            reply = self.request(messages.WarmRequest(backends=missing), self.startup_timeout_s,
                                 what="importing frameworks")
            self._warm.update(missing)
            self.backends_used.update(missing)
            if isinstance(reply, messages.WarmReply):
                self.device_memory = reply.device_memory

    def run_cell(self, spec: CellSpec, timeout_s: float | None = None, peers: Sequence[str] = (),
                 options: dict[str, Any] | None = None) -> dict[str, Any]:
        """The cell's record; an ``error`` cell when the runner crashed, hung or refused."""
        (cell,) = self.run_cells([spec], timeout_s, peers, options)
        return cell

    def run_cells(self, specs: Sequence[CellSpec], timeout_s: float | None = None,
                  peers: Sequence[str] = (), options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The records of cells of one scenario of one source, checked in one request.

        They come in the order of ``specs``, checked over the product of their backends, devices and
        dtypes, as the engine checks a scenario: forward and reverse modes are compared there. Each cell
        may take ``cell_timeout_s`` (or ``timeout_s``), the scenario's reference counted in its first
        cell's; when the runner crashed, hung or refused, every cell is an ``error`` cell saying so.

        ``peers``: backends of the other mode whose results the cells are compared with, where the
        scenario's reference is made of probes (a job checks one backend; its peers' cells belong to
        other jobs and are not returned). ``options``: the engine's (``check_scenario``'s keyword
        arguments, such as ``repeats``).
        """
        backends, devices, dtypes = (list(dict.fromkeys(axis)) for axis in
                                     zip(*((s.backend, s.run_on or s.device, s.dtype) for s in specs)))
        count = len(backends) * len(devices) * len(dtypes)
        timeout_s = timeout_s or self.cell_timeout_s
        first = specs[0]
        self.last_rules = []  # a request that gets no answer names no rules (nor another tenant's)
        self.last_references = []
        self._serve(first.source, first.repository, first.trusted)
        payload = messages.CellsRequest(source=first.source, family=first.family, scenario=first.scenario,
                               backends=backends, devices=devices, dtypes=dtypes, peers=list(peers),
                               options=dict(options or {}))
        what = (f"checking {first.backend} {first.operator or 'cell'} {first.dtype} on {first.device}" if count == 1
                else f"checking a cell of this scenario's {count}")
        try:
            self.warm([*backends, *peers])
            reply = self.request(payload, timeout_s, what=what)
        except RunnerError as exc:
            if not (options or {}).get("power"):
                return self._failed(specs, timeout_s, peers, options, exc, backends, devices, dtypes)
            # A plant may make a rule hang or crash the runner: the verdicts come from a check without plants.
            return self._without_power(specs, timeout_s, peers, options or {}, str(exc))
        if isinstance(reply, messages.Refusal):
            return [spec.error_cell(reply.error) for spec in specs]
        assert isinstance(reply, messages.CellsReply)
        self.rules.update((rule["id"], rule) for rule in reply.rules or ())
        self.last_rules = list(reply.rules or ())
        self.last_references = list(reply.references or ())
        checked = {(cell["backend"], cell["device"], cell["dtype"]): cell for cell in reply.cells}
        cells = [{**checked[(s.backend, s.run_on or s.device, s.dtype)], "device": s.device} for s in specs]
        if self._process_limit_reached:
            cells = [{**cell, "message": f"process limit reached ({self.sandbox.pids_max} processes in the runner's "
                                         f"box): {cell.get('message') or ''}"[:500]}
                     if cell["status"] == Status.ERROR else cell for cell in cells]
        return cells

    def _without_power(self, specs: Sequence[CellSpec], timeout_s: float, peers: Sequence[str],
                       options: dict[str, Any], why: str) -> list[dict[str, Any]]:
        """The cells checked again without plants, those that reached a rule saying why power is missing."""
        from gradci.scenarios.rules.power import POWER_KEY, CellPower
        from gradci.scenarios.rules.records import RECORD_KEY

        cells = self.run_cells(specs, timeout_s, peers, {k: v for k, v in options.items() if k != "power"})
        missing = CellPower(not_measured=f"power not measured: the re-runs with planted errors failed ({why})")
        return [{**cell, POWER_KEY: missing.to_dict()} if (cell.get(RECORD_KEY) or {}).get("rules") else cell
                for cell in cells]

    def _failed(self, specs: Sequence[CellSpec], timeout_s: float, peers: Sequence[str],
                options: dict[str, Any] | None, exc: RunnerError, backends: list[str], devices: list[str],
                dtypes: list[str]) -> list[dict[str, Any]]:
        """The cells of a request the runner died on, hung on or could not answer."""
        first = specs[0]
        if isinstance(exc, RunnerDied):
            if len(specs) > 1:  # which cell crashed: each alone, in a fresh runner; the others keep their verdicts
                log.warning("scenario %s: %s; checking its %d cells one by one", first.scenario, exc, len(specs))
                return [cell for spec in specs for cell in self.run_cells([spec], timeout_s, peers, options)]
            log.warning("scenario %s (%s on %s, %s): %s", first.scenario, first.backend, first.device, first.dtype, exc)
            return [spec.error_cell(str(exc)) for spec in specs]
        log.warning("scenario %s (%s on %s, %s): %s", first.scenario, ",".join(backends), ",".join(devices),
                    ",".join(dtypes), exc)
        return [spec.error_cell(str(exc)) for spec in specs]


def cache_scope(tenant: Tenant) -> str:
    """The name of a tenant's compilation-cache folder, one per repository.

    A checkout's path stands in where the repository is not known, so that no repository loads a
    program another wrote.
    """
    scope = tenant[1] or tenant[0]
    return "built-in" if scope is None else hashlib.sha256(scope.encode()).hexdigest()[:24]


def trim_caches(root: Path, *, keep: Path, max_total_mb: int) -> None:
    """Remove whole repositories' compilation caches, least recently used first, down to a total size.

    They go until all of them under ``root`` take at most ``max_total_mb`` (``keep``, about to be used,
    stays).
    """
    if not root.is_dir():
        return
    sizes = {folder: sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
             for folder in root.iterdir() if folder.is_dir()}
    total = sum(sizes.values())
    for folder in sorted(sizes, key=lambda f: f.stat().st_mtime):
        if total <= max_total_mb << 20:
            break
        if folder != keep:
            shutil.rmtree(folder, ignore_errors=True)
            total -= sizes[folder]


# Each runner's scratch and spare folders are named by process and this count: unique across threads.
_folder_numbers = itertools.count()

# One runner per worker process, or per thread in a threads pool: a runner serves one request at a time.
_local = threading.local()


def shared_runner(**config: Any) -> WarmRunner:
    """This worker's runner, started on first use and kept warm between jobs.

    ``config``: WarmRunner's arguments.
    """
    runner = getattr(_local, "runner", None)
    if runner is None:
        runner = _local.runner = WarmRunner(**config)
        atexit.register(runner.close)
        atexit.register(runner.close_spare)
    runner.cell_timeout_s = config["cell_timeout_s"]
    runner.max_rss_mb = config.get("max_rss_mb", runner.max_rss_mb)
    return runner


def close_shared_runner() -> None:
    runner = getattr(_local, "runner", None)
    if runner is not None:
        runner.close()
        runner.close_spare()
        _local.runner = None


def remove_orphaned_spare_folders(folder: Path) -> None:
    """Remove the spare folders under ``folder`` of worker processes that are gone (killed: no ``close``)."""
    for spare in folder.glob("spare-*-*"):
        pid = spare.name.split("-")[1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(spare, ignore_errors=True)


def link_tree(source: Path, into: Path) -> None:
    """``source``'s files hard-linked into the empty folder ``into`` (copied across filesystems).

    Links, not copies: a checkout of thousands of files is there in milliseconds. The runner sees the
    folder read-only, so no link can change the checkout's file.
    """
    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, into, symlinks=True, copy_function=link, dirs_exist_ok=True)


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)', re.M)
CRASH_FRAMES = 3


def crash_frames(output: str, root: str | None = None) -> str:
    """The user's innermost frames in a faulthandler traceback.

    ``output``'s last traceback, as "pkg/model.py:12 in f; ...", at most ``CRASH_FRAMES`` frames, files
    relative to the checkout's ``root`` where they lie in it; "" where there is none.
    """
    from gradci.scenarios.authoring.exceptions import is_users_file

    start = output.rfind("Fatal Python error")
    frames = [m for m in _FRAME.finditer(output[start:] if start >= 0 else output) if is_users_file(m["file"])]

    def shown(path: str) -> str:
        return str(Path(path).relative_to(root)) if root and Path(path).is_relative_to(root) else path

    # faulthandler prints the most recent call first
    return "; ".join(f"{shown(m['file'])}:{m['line']} in {m['name']}" for m in frames[:CRASH_FRAMES])

