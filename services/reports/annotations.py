"""The failing scenarios of a run where their code is: one check-run annotation per failing scenario.

And the report's rules findings (``rule_annotations``) on the lines of the rule's own methods.

Each annotation is at the file and line of the scenario's ``Scenario(...)`` call
(``scenario_catalog.file``/``line``, relative to the repository), so the pull request's diff shows
the failure beside the code.

GitHub shows an annotation's title and message as plain text (no markdown), so the names and
messages in them need no markdown escaping; each is kept to one line (``gfm.one_line``), so that a
name or a message cannot write lines that read as other cells or as gradci's own words.
"""
from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradci.scenarios.contract.cell import FAILING
from gradci.scenarios.contract.wording import count_of
from gradci.services.db.models import Result, ScenarioCatalogEntry
from gradci.services.reports.gfm import one_line
from gradci.services.reports.report_record import RulesSection

MESSAGE_LIMIT = 64 * 1024  # GitHub's annotation message limit is 64 KB
CELLS_LISTED = 10  # per annotation: the first failing cells, then a count


@dataclasses.dataclass(frozen=True)
class Annotation:
    path: str
    start_line: int
    title: str
    message: str
    end_line: int | None = None  # None: the start line alone
    level: str = "failure"  # or "warning"

    def to_github(self) -> dict[str, object]:
        return {"path": self.path, "start_line": self.start_line, "end_line": self.end_line or self.start_line,
                "annotation_level": self.level, "title": self.title[:255], "message": self.message[:MESSAGE_LIMIT]}


def failing_scenario_annotations(session: Session, run_id: int) -> list[Annotation]:
    """An annotation per scenario with a fail, error or xpass cell, in scenario order.

    Scenarios whose definition is unknown (outside the repository, or listed before 0014) get none.
    """
    where = (select(ScenarioCatalogEntry.name, ScenarioCatalogEntry.file, ScenarioCatalogEntry.line)
             .where(ScenarioCatalogEntry.run_id == run_id, ScenarioCatalogEntry.file.is_not(None)))
    defined: dict[str, tuple[str, int | None]] = {name: (file, line) for name, file, line in session.execute(where)
                                                  if file is not None}
    # Counted as they stream by, the first few kept: a run may have a million failing cells.
    counts: Counter[str] = Counter()
    listed: dict[str, list[str]] = defaultdict(list)
    rows = session.execute(select(Result.scenario, Result.backend, Result.device, Result.dtype, Result.status,
                                  Result.message)
                           .where(Result.run_id == run_id, Result.status.in_(FAILING))
                           .order_by(Result.scenario, Result.backend, Result.device, Result.dtype)
                           .execution_options(yield_per=2000))
    for scenario, backend, device, dtype, status, message in rows:
        counts[scenario] += 1
        if scenario in defined and len(listed[scenario]) < CELLS_LISTED:
            listed[scenario].append(one_line(f"{backend} · {device} · {dtype}: {status}: {message or ''}"))
    out = []
    for scenario, count in counts.items():
        if scenario not in defined:
            continue
        path, line = defined[scenario]
        more = [f"… and {count_of(count - CELLS_LISTED, 'more failing cell')}"] if count > CELLS_LISTED else []
        out.append(Annotation(path=path, start_line=line or 1,
                              title=f"{one_line(scenario)}: {count_of(count, 'failing cell')}",
                              message="\n".join(listed[scenario] + more)))
    return out


def rule_annotations(rules: RulesSection | None) -> list[Annotation]:
    """An annotation per rules finding of the report, on the lines of the rule's methods that never ran.

    A failure where gradci.toml's ``[rules] unexercised`` is "failure" (the default), else a warning.
    """
    if rules is None:
        return []
    level = "failure" if rules.severity == "failure" else "warning"
    return [Annotation(path=finding.file, start_line=finding.start_line, end_line=finding.end_line, level=level,
                       title=one_line(f"{finding.name}: {finding.text}"),
                       message=one_line(f"{finding.kind} {finding.name}: {finding.text}. {finding.hint}"))
            for finding in rules.findings]
