"""The dashboard: one HTML page plus plain JS/CSS (no CDN, no build step), served by the control plane.

The page talks to the REST API with the bearer token the user pasted (kept in ``localStorage``) and polls it
for live updates.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

WEB_DIR = Path(str(resources.files("gpucluster.web")))
STATIC_DIR = WEB_DIR / "static"
INDEX_HTML = WEB_DIR / "templates" / "index.html"
API_DOCS_HTML = WEB_DIR / "templates" / "apidocs.html"


def mount(app: FastAPI) -> None:
    """Serve the dashboard at ``/``, an offline API reference at ``/docs`` and the assets under ``/static``."""
    page = INDEX_HTML.read_text(encoding="utf-8")
    docs = API_DOCS_HTML.read_text(encoding="utf-8")

    @app.get("/", include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-cache"})

    @app.get("/docs", include_in_schema=False)
    async def api_docs() -> HTMLResponse:
        return HTMLResponse(docs, headers={"Cache-Control": "no-cache"})

    @app.get("/ui", include_in_schema=False)
    async def ui() -> RedirectResponse:
        return RedirectResponse("/")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
