"""Repository URLs lose their credentials before anything stores or shows them."""
from __future__ import annotations

import pytest

from gradci.services.repo_refs import parse_repo_ref
from gradci.services.repo_urls import without_credentials


@pytest.mark.parametrize(("given", "kept"), [
    ("https://ci-bot:ghp_SECRET@host/owner/name.git", "https://host/owner/name.git"),
    ("https://ghp_SECRET@host:8443/owner/name", "https://host:8443/owner/name"),
    ("https://bot:p@ss@host/owner/name", "https://host/owner/name"),         # an unencoded "@" in a password
    ("ssh://git:SECRET@host/owner/name.git", "ssh://git@host/owner/name.git"),  # the login name is no secret
    ("git@github.com:owner/name.git", "git@github.com:owner/name.git"),
    ("https://host/owner/name@v1", "https://host/owner/name@v1"),            # an "@" in the path is the path's
    ("file:///srv/mirrors/name.git", "file:///srv/mirrors/name.git"),
])
def test_a_url_keeps_everything_but_its_credentials(given: str, kept: str) -> None:
    assert without_credentials(given) == kept
    assert parse_repo_ref(given, "{full_name}").url == kept


def test_a_password_read_as_a_port_is_refused_without_repeating_it() -> None:
    with pytest.raises(ValueError) as refused:
        parse_repo_ref("https://bot:ab/SECRET@host/owner/name", "{full_name}")
    assert "SECRET" not in str(refused.value)
