"""What every framework adapter shares: its name and its table of dtypes."""
from __future__ import annotations

from typing import Any


class FrameworkAdapter:
    name: str = ""
    dtypes: dict[str, Any] = {}  # gradci's dtype name → the framework's dtype

    def dtype_unavailable(self, device: str, dtype: str) -> str | None:
        if dtype not in self.dtypes:
            return f"{self.name} has no dtype {dtype}"
        return None
