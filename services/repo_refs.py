"""What a client may name as a repository, and which repositories this server accepts."""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
from collections.abc import Sequence, Set
from urllib.parse import urlsplit

from gradci.services.repo_urls import without_credentials

URL_SCHEMES = ("file", "https", "http", "ssh", "git")
_TEXT = r"[^\x00-\x1f\x7f]"  # any character but a control character
_FULL_NAME = r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"
_SCP_STYLE = rf"[\w.-]+@[\w.-]+:{_TEXT}+"  # git@github.com:owner/name.git
FULL_NAME = re.compile(rf"^{_FULL_NAME}$")
SCP_STYLE = re.compile(rf"^{_SCP_STYLE}$")
_ANY_CASE_SCHEME = "|".join("".join(f"[{c.upper()}{c.lower()}]" for c in scheme) for scheme in URL_SCHEMES)
# A URL's authority as urllib reads it without refusing it: printable ASCII (a non-ASCII character
# may turn into "/" or "@" under the NFKC check urllib makes), no brackets (an IPv6 literal urllib
# would have to validate), userinfo up to the last "@", and a port that is a number up to 65535.
_USERINFO = r'[!"$-.0->@-Z\\^-~]*@'
_HOST = r'[!"$-.0-9;->A-Z\\^-~]*'
_PORT = r"0*(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
URL_FORM = rf"(?:{_ANY_CASE_SCHEME})://(?:{_USERINFO})?{_HOST}(?::(?:{_PORT})?)?(?:[/?#]{_TEXT}*)?"
# Every form parse_repo_ref reads, for the API's schema (so that what it admits is what is read, and
# nothing it admits is refused later).
REPO_PATTERN = rf"^(?:{URL_FORM}|{_SCP_STYLE}|/{_TEXT}*|{_FULL_NAME})$"


@dataclasses.dataclass(frozen=True)
class RepoRef:
    url: str
    full_name: str | None = None


def parse_repo_ref(repo: str, clone_url_template: str) -> RepoRef:
    """A git URL, an absolute path on the workers' machine, or a GitHub ``owner/name``.

    Relative paths are refused: the server cannot know the client's current directory. A URL's
    credentials are dropped here, before anything stores or shows it (``repo_urls``).
    """
    if SCP_STYLE.match(repo):  # first: its path may hold anything, "://" included
        return RepoRef(url=repo)
    if "://" in repo:
        scheme = repo.split("://", 1)[0].lower()
        if scheme not in URL_SCHEMES:
            raise ValueError(f"repo URL scheme {scheme!r} is not supported (use one of {', '.join(URL_SCHEMES)})")
        return RepoRef(url=_checked_url(repo))
    if os.path.isabs(repo):
        return RepoRef(url=os.path.normpath(repo))
    if FULL_NAME.match(repo):
        return RepoRef(url=clone_url_template.format(full_name=repo), full_name=repo)
    raise ValueError(
        f"repo {repo!r} is neither a git URL (file://, https://, ...), an absolute path, nor owner/name"
    )


def _checked_url(repo: str) -> str:
    """``repo`` without credentials.

    A port that is no number is refused: it is how a password holding an unencoded "/" reads
    (``https://bot:ab/cd@host``), and git could not clone it anyway.
    """
    try:
        _ = urlsplit(repo).port  # raises for a port that is no number
    except ValueError:
        # Not echoed: the text may be a secret.
        raise ValueError("repo URL has an invalid host or port (percent-encode special characters)") from None
    return without_credentials(repo)


def is_allowed(ref: RepoRef, patterns: Sequence[str], registered: Set[str] = frozenset()) -> bool:
    """Whether this server takes the repository: registered, or allowed by the patterns.

    ``registered``: the lower-cased owner/names ``gradci repos add`` registered, allowed whatever the
    patterns. No patterns: every repository is allowed. Otherwise a pattern must match the URL or owner/name.
    """
    if ref.full_name and ref.full_name.lower() in registered:
        return True
    if not patterns:
        return True
    names = [ref.url] + ([ref.full_name] if ref.full_name else [])
    return any(fnmatch.fnmatchcase(name, pattern) for name in names for pattern in patterns)
