"""A big pull-request run and its base run, written by PostgreSQL itself.

PostgreSQL writes them with ``INSERT … SELECT`` over ``generate_series``: a million results land in
seconds, where the batched upsert would take minutes. gradci's big-run tests and ``bench/big_run.py``
share it.

Cell ``i`` of a run: backend ``i % 7``, device ``(i // 7) % 2``, dtype ``(i // 14) % 2`` and scenario
``i // 28`` — every key unique, as the upsert key requires. Statuses come from a multiplicative hash
of ``i``: about 90% pass, 3% fail, 2% error, 3% skip, 1.5% xfail, 0.5% xpass. The base run has the
same statuses except on every 97th cell (its own hash there), so regressions and fixes exist. A cell
uses between 1e-4 and all of its tolerance (log-uniform); the base's errors are 20× smaller on every
53rd cell, so passing cells that used over half their tolerance there become near-misses; every
50th scenario has another fingerprint in the base (the patch).
"""
from __future__ import annotations

import dataclasses

from sqlalchemy import text
from sqlalchemy.orm import Session

from gradci.services.db.models import RunStatus
from gradci.services.db.runs import create_run, get_or_create_repository

MATRIX_SIZE = 28  # 7 backends × 2 devices × 2 dtypes: the cells of one scenario
BACKENDS = ("jax-rev", "jax-fwd", "jax-rev-jit", "torch-rev", "torch-func-rev", "torch-func-fwd", "fd")
HEAD_SHA, BASE_SHA = "1" * 40, "b" * 40

# A status from a number in [0, 1000).
_STATUS_OF = """CASE WHEN {u} < 900 THEN 'pass' WHEN {u} < 930 THEN 'fail' WHEN {u} < 950 THEN 'error'
                     WHEN {u} < 980 THEN 'skip' WHEN {u} < 995 THEN 'xfail' ELSE 'xpass' END"""
_HEAD_U = "(i * 2654435761) % 1000"
_BASE_U = f"CASE WHEN i % 97 = 0 THEN (i * 40503) % 1000 ELSE {_HEAD_U} END"
# Share of the tolerance used, log-uniform over 1e-4 … 1 as checks' errors spread over decades.
_HEAD_ERR = "power(10.0, -4.0 * ((i * 7) % 1000) / 1000)"
_BASE_ERR = f"CASE WHEN i % 53 = 0 THEN {_HEAD_ERR} / 20 ELSE {_HEAD_ERR} END"

_RESULTS = """
INSERT INTO results (run_id, scenario, operator, framework, backend, mode, device, dtype, status,
                     max_abs_err, max_rel_err, atol, rtol, time_ms, first_call_ms, peak_memory_bytes,
                     message, fingerprint, created_at)
SELECT :run_id, 'big/scenario_' || lpad((i / 28)::text, 6, '0'), 'gradient',
       CASE WHEN b = 'fd' THEN 'numpy' ELSE split_part(b, '-', 1) END, b,
       CASE WHEN b = 'fd' THEN 'finite' WHEN b LIKE '%-fwd' THEN 'forward' ELSE 'reverse' END,
       CASE WHEN (i / 7) % 2 = 0 THEN 'cpu' ELSE 'cuda:0' END,
       CASE WHEN (i / 14) % 2 = 0 THEN 'float64' ELSE 'float32' END,
       status, err * 1e-9, err * 1e-6, 1e-9, 1e-6, 0.5 + i % 7, 20.0, 1024 * (i % 100),
       CASE status WHEN 'pass' THEN '' WHEN 'error' THEN 'Traceback (most recent call last): ' || repeat('frame ', 40)
                   ELSE 'cell ' || i || ': max abs error above tolerance' END,
       md5((i / 28)::text), now()
FROM generate_series(CAST(0 AS bigint), :count - 1) AS i,
     LATERAL (SELECT (CAST(:backends AS text[]))[1 + i % 7] AS b, {u} AS u, {err} AS err) AS drawn,
     LATERAL (SELECT {status} AS status) AS cell
"""

_CATALOG = """
INSERT INTO scenario_catalog (run_id, name, operator, fingerprint, tags)
SELECT :run_id, 'big/scenario_' || lpad(s::text, 6, '0'), 'gradient',
       CASE WHEN :changed AND s % 50 = 0 THEN md5(s::text || 'changed') ELSE md5(s::text) END, '[]'
FROM generate_series(0, (:count - 1) / 28) AS s
"""


@dataclasses.dataclass(frozen=True)
class BigRun:
    head_id: int
    base_id: int
    cells: int


def _fill(session: Session, run_id: int, count: int, *, base: bool) -> None:
    statement = _RESULTS.format(u=_BASE_U if base else _HEAD_U, status=_STATUS_OF.format(u="u"),
                                err=_BASE_ERR if base else _HEAD_ERR)
    session.execute(text(statement),
                    {"run_id": run_id, "count": count, "backends": list(BACKENDS)})
    session.execute(text(_CATALOG), {"run_id": run_id, "count": count, "changed": base})


def create_big_run(session: Session, cells: int) -> BigRun:
    """A finished base run and a finished pull-request run of ``cells`` results each.

    The base run is at ``BASE_SHA``; ``cells`` is a multiple of ``MATRIX_SIZE``. PostgreSQL only. The
    caller commits (then ANALYZE helps the planner).
    """
    repository = get_or_create_repository(session, "https://github.com/big/run.git", "big/run")
    base = create_run(session, repository=repository, head_sha=BASE_SHA)
    head = create_run(session, repository=repository, head_sha=HEAD_SHA, base_sha=BASE_SHA, pr_number=1)
    base.status, head.status = RunStatus.passed.value, RunStatus.failed.value
    session.flush()
    _fill(session, base.id, cells, base=True)
    _fill(session, head.id, cells, base=False)
    return BigRun(head_id=head.id, base_id=base.id, cells=cells)
