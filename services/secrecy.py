"""Keeping a service process's secrets from other processes of the same user."""
from __future__ import annotations

import ctypes
import functools

_PR_SET_DUMPABLE = 4


@functools.lru_cache(maxsize=1)
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def forbid_inspection() -> None:
    """Mark this process non-dumpable.

    A process of the same user without CAP_SYS_PTRACE can then neither read its ``/proc/<pid>/environ``
    or memory nor attach to it. Forked children (Celery's pool processes) inherit it; ``exec`` resets
    it, so each service process calls this itself.
    """
    libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
