"""Coverage targets, configured as coverage services do, in the repository's gradci.toml.

For example:

```toml
[report.project]
target = "auto"        # "auto" = the base run's coverage, or a percentage: 90 or "90%"
threshold = 1.0        # percentage points the coverage may fall below the target and still succeed
informational = false  # true: the status is always success, the numbers still shown

[report.patch]
target = 100
```
"""
from __future__ import annotations

import dataclasses
from typing import Any, Literal

# A commit status's state, as a report gives it.
CoverageState = Literal["success", "failure"]


class TargetConfigError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Target:
    target: str | float = "auto"
    threshold: float = 0.0
    informational: bool = False

    def resolve(self, base_coverage: float | None) -> float | None:
        """The percentage to meet; None when "auto" has no base to compare with."""
        return base_coverage if self.target == "auto" else float(self.target)

    def state(self, coverage: float | None, base_coverage: float | None) -> CoverageState:
        target = self.resolve(base_coverage)
        if self.informational or coverage is None or target is None:
            return "success"
        return "success" if coverage + 1e-9 >= target - self.threshold else "failure"


def parse_target(table: Any, where: str) -> Target:
    if table is None:
        return Target()
    if not isinstance(table, dict):
        raise TargetConfigError(f"{where} must be a table")
    target = table.get("target", "auto")
    if isinstance(target, str) and target != "auto":
        try:
            target = float(target.rstrip("%"))
        except ValueError:
            raise TargetConfigError(f"{where}.target must be 'auto' or a percentage, not {target!r}") from None
    if target != "auto" and not (isinstance(target, (int, float)) and 0 <= float(target) <= 100):
        raise TargetConfigError(f"{where}.target must be 'auto' or a percentage between 0 and 100")
    threshold = table.get("threshold", 0.0)
    if isinstance(threshold, str):
        threshold = threshold.rstrip("%")
    try:
        threshold = float(threshold)
    except (TypeError, ValueError):
        raise TargetConfigError(f"{where}.threshold must be a number") from None
    return Target(target=target if target == "auto" else float(target), threshold=threshold,
                  informational=bool(table.get("informational", False)))


def parse_report_config(config: dict | None) -> tuple[Target, Target]:
    """(project, patch) targets from a parsed gradci.toml."""
    report = (config or {}).get("report") or {}
    if not isinstance(report, dict):
        raise TargetConfigError("[report] must be a table")
    return parse_target(report.get("project"), "[report.project]"), parse_target(report.get("patch"), "[report.patch]")
