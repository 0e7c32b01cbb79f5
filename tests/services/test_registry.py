"""``gradci repos``: the registered repositories, stored once each, in GitHub's case-blind names."""
from __future__ import annotations

import pytest

from gradci.services.db.registry import register, registered, registered_names, unregister
from gradci.services.db.session import session_scope


def test_a_repository_is_registered_once_whatever_its_case_and_forgotten(database_url: str) -> None:
    with session_scope(database_url) as session:
        assert register(session, "Octo/Thing") and not register(session, "octo/THING")
        assert register(session, "octo/other")
    with session_scope(database_url, readonly=True) as session:
        assert [row.full_name for row in registered(session)] == ["octo/other", "octo/thing"]
        assert registered_names(session) == {"octo/other", "octo/thing"}
    with session_scope(database_url) as session:
        assert unregister(session, "OCTO/thing") and not unregister(session, "octo/thing")
        assert registered_names(session) == {"octo/other"}


@pytest.mark.parametrize("name", ["octo", "https://github.com/octo/x", "octo/x/y", "octo/x y"])
def test_only_an_owner_slash_name_is_registered(database_url: str, name: str) -> None:
    with session_scope(database_url) as session, pytest.raises(ValueError, match="owner/name"):
        register(session, name)
