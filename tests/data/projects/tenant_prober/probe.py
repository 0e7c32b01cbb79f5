"""A scenario that looks for other runners it could signal (kill), and says which."""
import os

import numpy as np

from gradci import Scenario


def others_signalled():
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if b"gradci.worker.runner_child" not in cmdline.read():
                    continue
            os.kill(int(entry), 0)  # signal 0: the permission check alone
            found.append(int(entry))
        except (OSError, PermissionError):
            pass
    return found


def probe(x):
    raise RuntimeError(f"signalled={others_signalled()}")


def scenarios():
    return [Scenario("probe", "gradient", probe, np.array([0.1]), dtypes=("float64",))]
