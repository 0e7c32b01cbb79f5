"""Repository URLs as gradci keeps and shows them: without the credentials a client wrote into them.

A URL such as ``https://ci-bot:ghp_…@host/owner/name.git`` carries a secret in its userinfo. gradci
never stores it: the URL is a repository's key, listed by the API and the dashboard, named in run
errors and logs, so whatever is stored is shown. Cloning takes its credentials from the workers'
own configuration instead (``GRADCI_GITHUB_TOKEN`` for GitHub, git's credential helpers elsewhere).
"""
from __future__ import annotations

import re

# An SSH login name is not a secret (the key is), and without it ``ssh://git@host/…`` cannot log in.
_KEEPS_USER = ("ssh", "git+ssh", "ssh+git")
# RFC 3986: a scheme, "//", then the authority up to the first "/", "?" or "#".
_AUTHORITY = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)")


def without_credentials(url: str) -> str:
    """``url`` without its userinfo (an SSH URL keeps its user name, never a password).

    Anything that is not a ``scheme://`` URL (a path, ``git@host:owner/name``) is returned as it is.
    The userinfo is cut out of the text as written, not re-assembled by ``urlunsplit``: that one
    lower-cases the scheme and drops an empty authority (``SSH://@`` came back as ``ssh:``, which the
    reader then refused with a server error), and what is not a secret must come back unchanged.
    """
    match = _AUTHORITY.match(url)
    if match is None:
        return url  # scp-style git@host:path has a login name and no room for a password
    scheme, authority = match.group("scheme", "authority")
    userinfo, at, host = authority.rpartition("@")  # the last "@": a password may hold one unencoded
    if not at:
        return url
    user = userinfo.split(":", 1)[0]
    kept = f"{user}@" if scheme.lower() in _KEEPS_USER and user else ""
    return url[:match.start("authority")] + kept + host + url[match.end("authority"):]
