"""The default window fits the screen it opens on, without clipping and without a scroll bar
in the panel: a 1280×720 screen at 100 % and a 1920×1080 one at 150 % (QT_SCALE_FACTOR; Qt
fixes the factor per application, so each runs in a process of its own, on an offscreen
screen of that size). A geometry saved on a larger screen is brought back inside a smaller one."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TITLE_BAR = 30  # what a window manager's frame adds above the window; its borders are in FRAME_ALLOWANCE

PROBE = r"""
import json, sys, tempfile
from pathlib import Path
from PyQt6.QtCore import QByteArray
from PyQt6.QtWidgets import QAbstractButton, QApplication, QComboBox, QLabel, QSizePolicy
app = QApplication(sys.argv[:1])
from tests.app_helpers import isolated_settings
from app.window.main_window import MainWindow
settings = isolated_settings(Path(tempfile.mkdtemp()))
if len(sys.argv) > 1:
    settings.set_geometry(QByteArray.fromHex(sys.argv[1].encode()))
window = MainWindow(settings, device="cpu")
if len(sys.argv) > 2:
    window.resize(int(sys.argv[2]), int(sys.argv[3]))
window.show()
for _ in range(10):
    app.processEvents()
screen = window.screen()
available = screen.availableGeometry()
clipped = []  # shown smaller than its layout needs
for widget in window.centralWidget().findChildren((QLabel, QAbstractButton, QComboBox)):
    ignored = widget.sizePolicy().horizontalPolicy() == QSizePolicy.Policy.Ignored
    need = widget.minimumSizeHint()
    if widget.isVisible() and not ignored and (widget.width() < need.width() or widget.height() < need.height()):
        clipped.append(f"{type(widget).__name__} {widget.text() if hasattr(widget, 'text') else ''!r}")
rect = lambda r: [r.x(), r.y(), r.width(), r.height()]
bars = (window.panel_area.verticalScrollBar(), window.panel_area.horizontalScrollBar())
print(json.dumps({
    "scale": screen.devicePixelRatio(), "available": rect(available), "frame": rect(window.frameGeometry()),
    "size": [window.width(), window.height()],
    "minimum": [window.minimumSizeHint().width(), window.minimumSizeHint().height()],
    "panel_scrolls": any(bar.isVisible() for bar in bars),
    "engine_pane_open": window.panel.engine_pane.is_expanded(),
    "clipped": clipped, "geometry": bytes(window.saveGeometry().toHex()).decode(),
}))
"""


def _probe(tmp_path, width: int, height: int, scale: float, *args: str) -> dict:
    config = tmp_path / f"screen_{width}x{height}.json"
    config.write_text(json.dumps({"screens": [{"name": "screen", "x": 0, "y": 0, "width": width,
                                               "height": height, "logicalDpi": 96, "dpr": 1}]}))
    env = {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}", "QT_SCALE_FACTOR": str(scale),
           "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("width", "height", "scale"), [(1280, 720, 1.0), (1920, 1080, 1.5)])
def test_the_default_window_fits_the_screen(tmp_path, width, height, scale):
    from app.window.window_fit import FRAME_ALLOWANCE

    shown = _probe(tmp_path, width, height, scale)
    _, _, avail_w, avail_h = shown["available"]
    assert shown["scale"] == scale and avail_w == round(width / scale)
    for size in (shown["size"], shown["minimum"]):  # as opened, and the least its layout needs
        assert size[0] + FRAME_ALLOWANCE[0] <= avail_w and size[1] + TITLE_BAR <= avail_h, shown
    assert shown["size"][0] >= shown["minimum"][0] and shown["size"][1] >= shown["minimum"][1], shown
    assert not shown["engine_pane_open"] and not shown["panel_scrolls"], shown
    assert shown["clipped"] == [], shown


def test_a_geometry_from_a_larger_screen_is_brought_inside_this_one(tmp_path):
    big = _probe(tmp_path, 2560, 1440, 1.0, "", "2200", "1300")
    assert big["size"] == [2200, 1300]
    small = _probe(tmp_path, 1280, 720, 1.0, big["geometry"])
    x, y, w, h = small["available"]
    fx, fy, fw, fh = small["frame"]
    assert x <= fx and y <= fy and fx + fw <= x + w and fy + fh <= y + h, small
    assert not small["panel_scrolls"] and small["clipped"] == [], small
