"""Query parameters that come from the dashboard's filter forms."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class FormQuery(BaseModel):
    """A form's "any" choice sends an empty value: that is no filter, not an invalid one."""

    model_config = ConfigDict(frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value
