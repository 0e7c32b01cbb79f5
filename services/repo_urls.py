"""Repository URLs as gradci keeps and shows them: without the credentials a client wrote into them.

A URL such as ``https://ci-bot:ghp_…@host/owner/name.git`` carries a secret in its userinfo. gradci
never stores it: the URL is a repository's key, listed by the API and the dashboard, named in run
errors and logs, so whatever is stored is shown. Cloning takes its credentials from the workers'
own configuration instead (``GRADCI_GITHUB_TOKEN`` for GitHub, git's credential helpers elsewhere).
"""
from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

# An SSH login name is not a secret (the key is), and without it ``ssh://git@host/…`` cannot log in.
_KEEPS_USER = ("ssh", "git+ssh", "ssh+git")


def without_credentials(url: str) -> str:
    """``url`` without its userinfo (an SSH URL keeps its user name, never a password).

    Anything that is not a ``scheme://`` URL (a path, ``git@host:owner/name``) is returned as it is.
    """
    if "://" not in url:
        return url  # scp-style git@host:path has a login name and no room for a password
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")  # the last "@": a password may hold one unencoded
    if not at:
        return url
    user = userinfo.split(":", 1)[0]
    kept = f"{user}@" if parts.scheme.lower() in _KEEPS_USER and user else ""
    return urlunsplit(parts._replace(netloc=kept + host))
