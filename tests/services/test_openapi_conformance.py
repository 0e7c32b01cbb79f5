"""The API against its own OpenAPI description, with schemathesis: generated requests (valid and
invalid) on every operation, on PostgreSQL and Redis. No response is a 5xx, and every response
— status code, content type, headers and body — is one the schema documents.

Operations are driven through ``APIOperation.as_strategy`` with hypothesis directly: schemathesis'
pytest fixture loader does not run under pytest 9.2 (it reads a removed private attribute)."""
from __future__ import annotations

import os
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from gradci._testing.databases import flushed
from gradci.services.api.app import create_app
from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run
from gradci.services.db.session import session_scope
from gradci.services.settings import Settings
from tests.support.cells import synthetic_cell

TOKEN = "schema-token"
# A few seconds per operation on two busy cores; set higher for a deeper search.
EXAMPLES_PER_OPERATION = int(os.environ.get("GRADCI_SCHEMATHESIS_EXAMPLES", "40"))


def operations(schema: Any) -> dict[str, Any]:
    return {operation.label: operation for operation in (result.ok() for result in schema.get_all_operations())}


def schema_of(app: FastAPI) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", app)


# Listing the operations needs the app's description only, not a database.
LABELS = sorted(operations(schema_of(create_app(Settings(database_url="sqlite://", broker_url="memory://")))))


@pytest.fixture(scope="module")
def app(postgres_database: str, redis_database: str, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    settings = Settings(database_url=postgres_database, broker_url=flushed(redis_database), api_token=TOKEN,
                        github_webhook_secret="schema-secret", workdir=tmp_path_factory.mktemp("work"))
    with session_scope(settings.database_url) as session:  # a run with cells, for the readers to find
        run_id = create_run(session).id
    with session_scope(settings.database_url) as session:
        upsert_results(session, run_id, [synthetic_cell(i) for i in range(30)])
    return create_app(settings)


@pytest.fixture(scope="module")
def api_operations(app: FastAPI) -> dict[str, Any]:
    return operations(schema_of(app))


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.integration
def test_every_operation_answers_as_documented(api_operations: dict[str, Any], label: str) -> None:
    @given(case=api_operations[label].as_strategy())
    @hypothesis_settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))
    def answers_as_documented(case: Any) -> None:
        case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"})

    answers_as_documented()


def test_every_route_is_described() -> None:
    assert {"GET /api/runs", "POST /api/runs", "GET /api/runs/{run_id}", "GET /api/runs/{run_id}/report",
            "POST /webhooks/github", "GET /api/health"} <= set(LABELS)
