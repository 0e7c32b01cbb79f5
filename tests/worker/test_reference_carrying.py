"""Which runs keep their references for later runs: trusted runs of a repository, unless switched off."""
from __future__ import annotations

from gradci.scenarios.contract.matrix import Matrix
from gradci.worker.reference_carrying import JobReferences
from gradci.worker.sources import RunRef, Source


def references(*, trusted: bool, keep: bool = True, root: str | None = "/checkout") -> JobReferences:
    run = RunRef(id=1, repo_url="file:///mirror.git", revision="a" * 40, matrix=Matrix.from_mapping({}),
                 trusted=trusted, repository_id=3, carrying=False)
    source = Source(sha="a" * 40, root=root, scenarios=(), backends={}, file_matrix=Matrix.from_mapping({}))
    return JobReferences("sqlite://", run, source, {}, ["square/gradient"], keep=keep)


def test_a_default_branch_run_keeps_its_references_unless_told_not_to():
    assert references(trusted=True).options("square/gradient") == {"keep_references": True}
    assert references(trusted=True, keep=False).options("square/gradient") == {}


def test_a_pull_request_or_the_built_in_library_keeps_none():
    assert references(trusted=False).options("square/gradient") == {}  # not carrying: nothing offered either
    assert references(trusted=True, root=None).options("square/gradient") == {}
