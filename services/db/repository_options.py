"""The operator's options per repository: for now, whether its default branch measures detection power.

Kept apart from the registered repositories: an option says what a repository's runs do, registering
says who may start them (a repository let in by GRADCI_ALLOWED_REPOS or a webhook secret has options
too). Names are GitHub's owner/name, lower-cased as GitHub compares them.

Functions flush but never commit: the caller owns the transaction.
"""
from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gradci.services.db.models import RegisteredRepository, Repository, RepositoryOptions, Run, Trigger, utcnow
from gradci.services.repo_refs import FULL_NAME


def _checked(full_name: str) -> str:
    if not FULL_NAME.match(full_name):
        raise ValueError(f"{full_name!r} is not a GitHub repository's owner/name")
    return full_name.lower()


def set_power(session: Session, full_name: str, on: bool) -> bool:
    """Turn detection power on or off for ``full_name``; whether that changed it."""
    name = _checked(full_name)
    row = session.scalar(select(RepositoryOptions).where(RepositoryOptions.full_name == name))
    if row is None:
        row = RepositoryOptions(full_name=name, power=False)
        session.add(row)
    changed = row.power != on
    row.power, row.updated_at = on, utcnow()
    session.flush()
    return changed


def options_of(session: Session, full_name: str) -> dict[str, bool]:
    """``full_name``'s options, their defaults where the operator set none."""
    name = _checked(full_name)
    power = session.scalar(select(RepositoryOptions.power).where(RepositoryOptions.full_name == name))
    return {"power": bool(power)}


def is_known(session: Session, full_name: str) -> bool:
    """Whether gradci has anything of ``full_name``: runs, a registration or options.

    Only such a repository is looked up on GitHub for a reader: a URL is no way to make the service
    ask GitHub about any name one likes.
    """
    name = _checked(full_name)
    return any(session.scalar(select(column).where(func.lower(column) == name).limit(1)) is not None
               for column in (Repository.full_name, RegisteredRepository.full_name, RepositoryOptions.full_name))


def power_repositories(session: Session) -> frozenset[str]:
    """The owner/names (lower-cased) whose default branch measures detection power."""
    return frozenset(session.scalars(select(RepositoryOptions.full_name).where(RepositoryOptions.power)))


def measures_power(session: Session, run: Run) -> bool:
    """Whether ``run`` measures detection power: a push to its repository's default branch, the option on.

    A pull request's run never does (it re-runs every cell that reached a rule, many times, and its
    report would wait for it), nor the base run scheduled for a pull request's report (a push run
    without a ref), an API, upload or demo run, or the built-in library.
    """
    repository = run.repository
    if (repository is None or not repository.full_name or run.trigger != Trigger.push.value
            or run.pr_number is not None or not run.ref):
        return False
    return bool(session.scalar(select(RepositoryOptions.power).where(
        RepositoryOptions.full_name == repository.full_name.lower())))
