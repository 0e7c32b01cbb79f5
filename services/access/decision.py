"""The read decision: may this asker see that repository's runs? One function for every route.

- an operator (the admin token, a login in GRADCI_OPERATORS, the local user of ``gradci up``) sees
  everything; with ``read_access="open"`` so does everyone;
- the built-in library (no repository) is gradci's own suite: anyone sees it, except with
  ``read_access="login"``, where an asker must have some credential;
- a GitHub repository is seen by a read token scoped to it, by a user GitHub lets read it (asked
  with the user's own token), and, with ``read_access="public"``, by anyone when it is public;
- a repository GitHub does not know (a path or URL given to ``POST /api/runs``) only by operators.
"""
from __future__ import annotations

import dataclasses

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradci.services.access.github_view import GitHubViews
from gradci.services.db.models import Repository
from gradci.services.db.queries import EVERYTHING, Visible


@dataclasses.dataclass(frozen=True)
class Asker:
    """Who asks: an operator, a signed-in user, a read token's holder, or nobody.

    ``github_token`` is the signed-in user's own OAuth token (kept out of reprs and logs);
    ``token_repositories`` the owner/names a read token may read, lower-cased as GitHub compares them.
    """

    operator: bool = False
    login: str | None = None
    github_token: str | None = dataclasses.field(default=None, repr=False)
    token_repositories: frozenset[str] = frozenset()

    @property
    def anonymous(self) -> bool:
        return not (self.operator or self.login or self.token_repositories)


ANONYMOUS = Asker()


class ReadDecision:
    """What ``asker`` may read under the server's ``read_access``.

    GitHub is asked through ``views`` (the service's own ``service_token`` says whether a repository is
    public, where there is one).
    """

    def __init__(self, asker: Asker, read_access: str, views: GitHubViews, service_token: str | None = None) -> None:
        self.asker, self.read_access = asker, read_access
        self._views, self._service_token = views, service_token

    @property
    def sees_everything(self) -> bool:
        return self.asker.operator or self.read_access == "open"

    def may_read_library(self) -> bool:
        return self.sees_everything or self.read_access != "login" or not self.asker.anonymous

    def may_read(self, repository: Repository | None) -> bool:
        """Whether the asker may read the runs of ``repository`` (None: the built-in library)."""
        if self.sees_everything:
            return True
        if repository is None:
            return self.may_read_library()
        return repository.full_name is not None and self.may_read_github(repository.full_name)

    def may_read_github(self, full_name: str) -> bool:
        """Whether the asker may read the runs of the GitHub repository ``full_name`` (owner/name)."""
        if self.sees_everything or full_name.lower() in self.asker.token_repositories:
            return True
        if self.asker.github_token and self._views.view(full_name, self.asker.github_token).readable:
            return True
        return self.read_access == "public" and self.is_public(full_name)

    def visible(self, session: Session) -> Visible:
        """The runs the asker may list: one decision per repository (GitHub's answers are cached)."""
        if self.sees_everything:
            return EVERYTHING
        rows = session.execute(select(Repository.id, Repository.full_name)
                               .where(Repository.full_name.is_not(None))).all()
        readable = frozenset(row.id for row in rows if self.may_read_github(row.full_name))
        return Visible(repository_ids=readable, library=self.may_read_library())

    def may_cancel(self, full_name: str | None) -> bool:
        """Operators, and users GitHub lets push to the repository."""
        if self.asker.operator:
            return True
        return bool(full_name and self.asker.github_token
                    and self._views.view(full_name, self.asker.github_token).push)

    def is_public(self, full_name: str) -> bool:
        view = self._views.view(full_name, self._service_token)
        return view.readable and view.private is False
