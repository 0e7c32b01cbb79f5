"""The run page's query parameters: which cells to show, and which page.

The cells are filtered server-side; the page is that of the heatmap and of the table.
"""
from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from pydantic import Field, StringConstraints

from gradci.scenarios.contract.cell import Status
from gradci.services.db.queries import ResultFilter
from gradci.web.form_query import FormQuery

FILTERS = ("family", "operator", "backend", "device", "dtype", "status")
Choice = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]*$")]


class CellQuery(FormQuery):
    family: Choice | None = Field(None, description="only this family's scenarios: 'nn' holds 'nn/…'")
    operator: Choice | None = None
    backend: Choice | None = None
    device: Choice | None = None
    dtype: Choice | None = None
    status: Status | None = Field(None, description="only cells of this status")
    page: int = Field(1, ge=1, le=1_000_000, description="page of the heatmap's rows")
    cursor: Annotated[str, StringConstraints(max_length=40)] | None = Field(None, description="page of the table")

    def where(self) -> ResultFilter:
        return ResultFilter(family=self.family, operator=self.operator, backend=self.backend, device=self.device,
                            dtype=self.dtype, status=self.status.value if self.status else None)

    def chosen(self) -> dict[str, str]:
        """The filters set, as query parameters."""
        return {name: str(getattr(self, name)) for name in FILTERS if getattr(self, name) is not None}

    def link(self, **changes: Any) -> str:
        """This query string with ``changes`` (None removes a parameter): a link to another page."""
        values = {**self.chosen(), "page": self.page, "cursor": self.cursor, **changes}
        kept = {name: value for name, value in values.items()
                if value is not None and not (name == "page" and value == 1)}
        return "?" + urlencode(kept) if kept else "?"
