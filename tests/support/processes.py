"""Child processes: re-exported from ``gradci.testing.processes`` (shared with ``bench/``)."""
from gradci.testing.processes import *  # noqa: F403 - the tests' process helpers are bench's, all of them

# Bound by the star import above (F405 cannot see that).
__all__ = ["RUN_TIMEOUT_S", "alive", "children_map", "command_line", "descendants",  # noqa: F405
           "free_port", "runners_below", "service_env", "spawn", "stop", "wait_for", "wait_gone"]
