"""The whole HTTP service: the REST API and webhooks (services) plus the dashboard pages (web).

``uvicorn --factory web.app:create_app``. The dashboard depends on the services, never the reverse.
"""
from __future__ import annotations

from fastapi import FastAPI

from services.api.app import create_app as create_api
from services.settings import Settings
from web import views


def create_app(settings: Settings | None = None) -> FastAPI:
    app = create_api(settings)
    app.include_router(views.router)
    return app
