"""Repository URLs lose their credentials before anything stores or shows them."""
from __future__ import annotations

import re

import hypothesis
import pytest

from gradci.services.repo_refs import REPO_PATTERN, URL_FORM, parse_repo_ref
from gradci.services.repo_urls import without_credentials


@pytest.mark.parametrize(("given", "kept"), [
    ("https://ci-bot:ghp_SECRET@host/owner/name.git", "https://host/owner/name.git"),
    ("https://ghp_SECRET@host:8443/owner/name", "https://host:8443/owner/name"),
    ("https://bot:p@ss@host/owner/name", "https://host/owner/name"),         # an unencoded "@" in a password
    ("ssh://git:SECRET@host/owner/name.git", "ssh://git@host/owner/name.git"),  # the login name is no secret
    ("git@github.com:owner/name.git", "git@github.com:owner/name.git"),
    ("https://host/owner/name@v1", "https://host/owner/name@v1"),            # an "@" in the path is the path's
    ("file:///srv/mirrors/name.git", "file:///srv/mirrors/name.git"),
    # As written, but for the userinfo: urlunsplit lower-cased the scheme and turned an empty
    # authority into "ssh:" (a 500 on POST /api/runs, found by the schemathesis test).
    ("SSH://@", "SSH://"),
    ("SSH://git:SECRET@Host/owner/name", "SSH://git@Host/owner/name"),
    ("HTTPS://bot:SECRET@Host/owner/name?x=1#y", "HTTPS://Host/owner/name?x=1#y"),
])
def test_a_url_keeps_everything_but_its_credentials(given: str, kept: str) -> None:
    assert without_credentials(given) == kept
    assert parse_repo_ref(given, "{full_name}").url == kept


def test_a_password_read_as_a_port_is_refused_without_repeating_it() -> None:
    with pytest.raises(ValueError) as refused:
        parse_repo_ref("https://bot:ab/SECRET@host/owner/name", "{full_name}")
    assert "SECRET" not in str(refused.value)


@pytest.mark.parametrize("pattern", [REPO_PATTERN, rf"^{URL_FORM}$"], ids=["every form", "URLs"])
@hypothesis.settings(max_examples=400, deadline=None, database=None)
@hypothesis.given(data=hypothesis.strategies.data())
def test_whatever_the_documented_pattern_admits_is_read(pattern: str, data: hypothesis.strategies.DataObject) -> None:
    """The API documents REPO_PATTERN for ``repo``: a client (or a fuzzer) that follows it must not be
    refused after all (a port that is no number, a non-ASCII authority urllib rejects). URLs alone are
    drawn too: among every form, too few examples reach an authority to find the edge."""
    repo = data.draw(hypothesis.strategies.from_regex(pattern, fullmatch=True))
    parse_repo_ref(repo, clone_url_template="https://github.com/{full_name}.git")


@pytest.mark.parametrize("repo", ["httpS://\u00feA\u00db:*\u00dc&", "https://bot:ab/cd@host/x", "https://h:65536/x",
                                  "https://[::1/x"])
def test_what_the_reader_refuses_the_pattern_does_not_admit(repo: str) -> None:
    assert re.fullmatch(REPO_PATTERN, repo) is None
    with pytest.raises(ValueError, match="invalid host or port"):
        parse_repo_ref(repo, clone_url_template="{full_name}")
