"""The plotly.js bundle the dashboard serves: the installed plotly's version, and every
trace type the figures draw is in it (a type missing from it draws nothing)."""

from __future__ import annotations

import re
from pathlib import Path

import plotly

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "dashboard" / "assets"
# the trace modules of plotly.js's "cartesian" bundle (its README)
CARTESIAN = {"bar", "box", "contour", "heatmap", "histogram", "histogram2d", "histogram2dcontour", "image", "pie"}
CARTESIAN |= {"scatter", "scatterternary", "violin"}


def _version(js: Path) -> str:
    head = js.read_text(encoding="utf-8", errors="replace")[:400]
    found = re.search(r"plotly\.js(?: \([^)]*\))? v(\d+\.\d+\.\d+)", head)
    assert found, f"no version in the first lines of {js}"
    return found.group(1)


def test_the_served_bundle_is_the_installed_plotly_version():
    (bundle,) = ASSETS.glob("plotly-*.min.js")
    full = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert _version(bundle) == _version(full)
    assert bundle.name == f"plotly-cartesian-{_version(full)}.min.js"


def test_every_trace_type_the_figures_draw_is_in_the_bundle():
    used = set()
    for py in (ROOT / "dashboard").rglob("*.py"):
        used |= {name.lower() for name in re.findall(r"\bgo\.([A-Z][a-z0-9]+)\(", py.read_text())}
    used -= {"figure"}
    assert used, "no trace types found"
    assert used <= CARTESIAN, f"not in the cartesian bundle: {sorted(used - CARTESIAN)}"


def test_pages_load_the_bundle_and_not_the_full_one(env):
    from fastapi.testclient import TestClient

    from rlvr_explorer.server import create_server

    client = TestClient(create_server())
    index = client.get("/sign-in").text
    (src,) = re.findall(r'src="(/assets/plotly-cartesian-[\d.]+\.min\.js[^"]*)"', index)
    assert client.get(src).status_code == 200
    assert "package_data/plotly.min.js" not in index
