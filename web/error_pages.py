"""Errors of dashboard pages as pages, not JSON.

A browser that asked for a run it may not see gets a page that says so and offers to sign in, not a
line of JSON. API paths keep their JSON answers.
"""
from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from gradci.web.templating import templates

JSON_PATHS = ("/api/", "/metrics", "/webhooks/", "/openapi.json", "/docs")


def wants_page(request: Request) -> bool:
    return not request.url.path.startswith(JSON_PATHS) and "text/html" in request.headers.get("accept", "")


def install_error_pages(app: FastAPI) -> None:
    @app.exception_handler(HTTPException)
    async def error_page(request: Request, exc: HTTPException) -> Response:
        if not wants_page(request):
            return await http_exception_handler(request, exc)
        return templates.TemplateResponse(request, "error.html", {"status": exc.status_code, "detail": exc.detail},
                                          status_code=exc.status_code, headers=exc.headers)
