"""A run's scenarios as a worker sees them: its checkout, and what the runner lists there.

Planning and every job of a run go through ``load_source`` so that they agree on the commit, the
scenarios (and their dtypes) and the matrix the repository's gradci.toml declares.
"""
from __future__ import annotations

import dataclasses
import functools

from gradci.scenarios.contract.matrix import Matrix
from gradci.services.db.models import Run, Trigger
from gradci.services.planner import BackendScope, ScenarioInfo
from gradci.worker.checkout import Checkouts
from gradci.worker.runner import WarmRunner
from gradci.worker.runner_messages import BackendEntry


@dataclasses.dataclass(frozen=True)
class Source:
    sha: str | None  # None: the built-in library
    root: str | None
    scenarios: tuple[ScenarioInfo, ...]
    backends: dict[str, BackendEntry]  # name → framework, mode (and unavailable, when asked)
    file_matrix: Matrix  # the checkout's gradci.toml [matrix]
    repository: str | None = None  # the run's repository URL (None: the built-in library)
    trusted: bool = False  # a run of the default branch: its runner may write the compilation cache
    rules: tuple[dict, ...] = ()  # its derivative rules, where asked (``load_source(rules=True)``)

    @functools.cached_property
    def by_name(self) -> dict[str, ScenarioInfo]:
        return {info.name: info for info in self.scenarios}

    @functools.cached_property
    def scopes(self) -> dict[str, BackendScope]:
        """What each backend has cells of: the planner leaves other frameworks' scenarios and operators out."""
        return {name: BackendScope(info["framework"], tuple(info["operators"]) if "operators" in info else None)
                for name, info in self.backends.items()}

    @property
    def available_backends(self) -> list[str]:
        """Backends that can run on this worker and that a run naming none gets.

        The backends are listed with ``availability=True``. An opt-in backend (``Backend.default``) is
        only there where named.
        """
        return [name for name, info in self.backends.items()
                if "unavailable" in info and info["unavailable"] is None and info.get("default", True)]

    def requested(self, run_matrix: Matrix) -> Matrix:
        """What the run asks for over what the repository's file says."""
        return self.file_matrix.overridden(run_matrix)


@dataclasses.dataclass(frozen=True)
class RunRef:
    """The parts of a run a worker needs, read once so that no session stays open while cells run."""

    id: int
    repo_url: str | None
    revision: str | None  # head sha, else ref; None: the default branch
    matrix: Matrix
    options: dict = dataclasses.field(default_factory=dict)  # Run.options: the engine's, over gradci.toml's
    trusted: bool = False  # see ``trusted_run``
    repository_id: int | None = None
    # Whether the run carries from a base run (not a full one): only such a run reuses kept references.
    carrying: bool = False


    @classmethod
    def of(cls, run: Run) -> RunRef:
        return cls(id=run.id, repo_url=run.repository.url if run.repository else None,
                   revision=run.head_sha or run.ref, matrix=Matrix.from_mapping(run.matrix),
                   options=dict(run.options or {}), trusted=trusted_run(run), repository_id=run.repository_id,
                   carrying=bool((run.carry or {}).get("base_run_id")) and not (run.carry or {}).get("full"))


def trusted_run(run: Run) -> bool:
    """Whether the run's code may write what later runs load (the compilation cache).

    Yes for a push to the default branch, or the built-in library. A pull request's code, an API or
    upload run of any ref, never: its cache is thrown away with its runner.
    """
    return run.repository is None or (run.trigger == Trigger.push.value and run.pr_number is None)


def load_source(run: RunRef, checkouts: Checkouts, runner: WarmRunner, *, availability: bool = False,
                rules: bool = False) -> Source:
    """Check the run's commit out and list its scenarios (and, with ``rules``, its rules) in the runner.

    Raises ``CheckoutError`` when the checkout fails, and ``RunnerError`` with the import error of a
    broken scenario module.
    """
    sha, root = None, None
    if run.repo_url is not None:
        sha, path = checkouts.checkout(run.repo_url, run.revision)
        root = str(path)
    listing = runner.list_source(root, availability=availability, repository=run.repo_url, trusted=run.trusted,
                                 rules=rules and root is not None)
    return Source(
        sha=sha,
        root=root,
        repository=run.repo_url,
        trusted=run.trusted,
        scenarios=tuple(ScenarioInfo.from_dict(item) for item in listing.scenarios),
        backends={item["name"]: item for item in listing.backends},
        file_matrix=Matrix.from_mapping(listing.file_matrix),
        rules=tuple(listing.rules or ()),
    )
