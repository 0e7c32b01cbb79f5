"""The whole HTTP service: the REST API and webhooks (services) plus the dashboard pages (web).

``uvicorn --factory web.app:create_app``. The dashboard depends on the services, never the reverse.
"""
from __future__ import annotations

from fastapi import FastAPI

from gradci.services.api.app import create_app as create_api
from gradci.services.settings import Settings
from gradci.web import (
    badge,
    cell_page,
    compare_page,
    history_page,
    rules_page,
    run_actions,
    run_page,
    runs_page,
    static,
    workers_page,
)
from gradci.web.error_pages import install_error_pages

PAGES = (static, runs_page, run_page, run_actions, cell_page, compare_page, history_page, rules_page, workers_page,
         badge)


def create_app(settings: Settings | None = None) -> FastAPI:
    app = create_api(settings)
    for module in PAGES:
        app.include_router(module.router)
    install_error_pages(app)
    return app
