"""The dashboard's assets, served by the app itself.

These machines are offline, so there is no CDN: its own stylesheet and scripts, and plotly.js as the
installed ``plotly`` package ships it.
"""
from __future__ import annotations

from importlib import metadata, resources
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

router = APIRouter(include_in_schema=False)
PLOTLY_VERSION = metadata.version("plotly")
_OWN = Path(__file__).parent / "static"
ASSETS = {
    "plotly.min.js": Path(str(resources.files("plotly") / "package_data" / "plotly.min.js")),
    **{path.name: path for path in _OWN.iterdir() if path.is_file()},
}
# plotly.min.js is linked with its version in the URL, so a browser may keep it; our own files change
# with the code and are revalidated (their ETag makes that cheap).
_CACHE = {"plotly.min.js": "public, max-age=31536000, immutable"}


def asset_url(name: str) -> str:
    return f"/static/{name}?v={PLOTLY_VERSION}" if name == "plotly.min.js" else f"/static/{name}"


@router.get("/static/{name}")
def asset(name: str) -> FileResponse:
    path = ASSETS.get(name)
    if path is None:
        raise HTTPException(404, detail=f"no asset {name!r}; there are {sorted(ASSETS)}")
    return FileResponse(path, headers={"Cache-Control": _CACHE.get(name, "no-cache")})
