"""Credentials a client writes into a repository URL are never shown: a run submitted from
``http://ci-bot:<token>@host/owner/checks.git`` is cloned and checked, and no API response, dashboard
page or service log of it holds the token, on the real service (PostgreSQL, Redis, ``gradci api``, a
``gradci worker``) and a git host served over HTTP on loopback."""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gradci._testing.service import Service, jobs_of, results_of
from gradci.services.db.models import Run
from gradci.services.db.session import session_scope
from gradci.web.app import PAGES
from tests.support.git_http import served_repository

pytestmark = pytest.mark.integration

SECRET = "ghp_SECRET0123456789abcdefghijklmnopqrstu"
USER = "ci-bot"
# What a run's pages are filled with; a route with another parameter is listed by hand below.
RUN_PARAMETERS = {"run_id", "before_id", "after_id"}


@pytest.fixture(scope="module")
def git_host(checks_project: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[str, list[str | None]]]:
    with served_repository(checks_project[0], tmp_path_factory.mktemp("git-host")) as served:
        yield served


def get_routes(service: Service) -> list[str]:
    """Every GET path of the REST API (from its OpenAPI schema) and of the dashboard (its routers)."""
    with service.client() as client:
        api = [path for path, operations in client.get("/openapi.json").json()["paths"].items() if "get" in operations]
    pages = [route.path for module in PAGES for route in module.router.routes if "GET" in getattr(route, "methods", ())]
    return api + pages


def repository_of(service: Service, run_id: int) -> int:
    with session_scope(service.database_url, readonly=True) as session:
        run = session.get(Run, run_id)
        assert run is not None and run.repository_id is not None
        return run.repository_id


def run_addresses(service: Service, run_id: int) -> list[str]:
    """Every address that shows something of run ``run_id``: each route with a run's id, each cell,
    each job and each scenario's history in it, and the lists that name it."""
    cells, jobs = results_of(service.database_url, run_id), jobs_of(service.database_url, run_id)
    repository = repository_of(service, run_id)
    values = {"cell_id": [str(cell.id) for cell in cells], "job_id": [str(job.id) for job in jobs],
              "name:path": [f"{name}?repository={repository}" for name in sorted({cell.scenario for cell in cells})]}
    addresses = ["/api/runs?limit=500", "/?limit=500"]
    for route in get_routes(service):
        parameters = set(re.findall(r"{([^}]+)}", route))
        if not parameters & (RUN_PARAMETERS | {"name:path"}):
            continue  # not a run's page: the lists above, the workers, a badge of owner/name
        address = route
        for name in parameters & RUN_PARAMETERS:
            address = address.replace(f"{{{name}}}", str(run_id))
        others = parameters - RUN_PARAMETERS
        if not others:
            addresses.append(address)
        for name in others:  # one route has one parameter besides the run's
            addresses += [address.replace(f"{{{name}}}", value) for value in values[name]]
    return addresses


def test_credentials_in_a_repository_url_appear_in_no_response_page_or_log(
        redis_service: Service, git_host: tuple[str, list[str | None]]) -> None:
    url, authorizations = git_host
    with_credentials = url.replace("http://", f"http://{USER}:{SECRET}@")
    run_id = redis_service.submit(repo=with_credentials, scenarios="ok/*")
    run = redis_service.wait_finished(run_id)
    # Cloned and checked without the credentials: the host needs none, and none were sent to it.
    assert run["status"] in ("passed", "failed"), run
    assert run["repo"] == url and run["counts"]["pass"] > 0
    assert authorizations and not any(authorizations)

    addresses = run_addresses(redis_service, run_id)
    routes = " ".join(addresses)
    for needed in (f"/api/runs/{run_id}/report", f"/api/runs/{run_id}/junit.xml", f"/runs/{run_id}/cells/",
                   f"/api/runs/{run_id}/jobs/", "/scenarios/", f"/runs/{run_id}/live.json"):
        assert needed in routes, f"the walk misses {needed}"
    with httpx.Client(base_url=redis_service.url, timeout=30) as reader:
        for address in addresses:
            response = reader.get(address)
            assert response.status_code < 500, (address, response.text[:300])
            assert SECRET not in response.text and USER not in response.text, address
    for log in redis_service.logs.iterdir():
        assert SECRET not in log.read_text(errors="replace"), log.name
