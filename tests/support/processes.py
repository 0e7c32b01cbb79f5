"""Child processes: re-exported from ``gradci.testing.processes`` (shared with ``bench/``)."""
from gradci.testing.processes import (
                                      RUN_TIMEOUT_S,
                                      alive,
                                      children_map,
                                      command_line,
                                      descendants,
                                      free_port,
                                      runners_below,
                                      service_env,
                                      spawn,
                                      stop,
                                      wait_for,
                                      wait_gone,
)

__all__ = ["RUN_TIMEOUT_S", "alive", "children_map", "command_line", "descendants", "free_port", "runners_below",
           "service_env", "spawn", "stop", "wait_for", "wait_gone"]
