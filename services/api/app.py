"""The FastAPI application: ``create_app(settings)``; ``uvicorn --factory services.api.app:create_app``."""
from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, OperationalError

from gradci.services.access.github_view import GitHubViews
from gradci.services.api import health, metrics, reports, repositories, runs, uploads, webhooks, workers
from gradci.services.api.login import install_login
from gradci.services.api.sessions import install_sessions
from gradci.services.db.pagination import InvalidCursor
from gradci.services.settings import Settings, get_settings


def _detail(status_code: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status_code)


def install_error_handlers(app: FastAPI) -> None:
    """Answer bad input with a 4xx and an unreachable database with a 503, never a 500.

    Bad input is the client's to fix (4xx); an unreachable database is temporary (503). Neither is a
    500, which would mean a bug here.
    """

    @app.exception_handler(InvalidCursor)
    async def invalid_cursor(_: Request, exc: InvalidCursor) -> JSONResponse:
        return _detail(400, str(exc))

    @app.exception_handler(DataError)
    async def invalid_value(_: Request, exc: DataError) -> JSONResponse:
        return _detail(400, f"invalid value: {str(exc.orig).splitlines()[0]}")

    @app.exception_handler(OperationalError)
    async def database_down(_: Request, exc: OperationalError) -> JSONResponse:
        return _detail(503, f"database unavailable: {str(exc.orig).splitlines()[0] if exc.orig else exc}")

    @app.exception_handler(DBAPIError)
    async def connection_lost(request: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            return _detail(503, "database connection lost; retry")
        raise exc


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(
        title="gradci",
        summary="Continuous integration for automatic differentiation",
        description="Runs check the derivatives of scenarios × backends × devices × dtypes; "
        "writes need `Authorization: Bearer <GRADCI_API_TOKEN>` when the server sets one; reads show the "
        "repositories the asker may read (a read token, the admin token, or a dashboard sign-in).",
        version="0.1.0",
    )
    app.state.settings = settings
    app.state.metrics_registry = metrics.metrics_registry(settings)
    app.state.github_views = GitHubViews(settings.github_api_url, settings.github_access_ttl_s)
    for module in (runs, reports, repositories, workers, health, metrics, webhooks, uploads):
        app.include_router(module.router)
    install_login(app, settings)
    install_error_handlers(app)
    install_sessions(app, settings)
    return app
