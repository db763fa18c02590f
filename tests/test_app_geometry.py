"""The window at 1280×720 (offscreen, its own process: tests/geometry_probe.py) with every
combination of the message bars it can show at once, before and during a conversation, the
Engine details folded and open: every visible widget lies inside the window and inside its
parent's visible area (a scroll area's content, where it is larger than the view, has a scroll
bar), none is smaller than its layout needs, text cut to fit ends in "…" (combo boxes elide,
labels wrap or elide), and the conversation pane keeps its width when a conversation starts."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCREEN = (1280, 720)


@pytest.fixture(scope="module")
def shown(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("geometry")
    config = folder / "screen.json"
    config.write_text(json.dumps({"screens": [{"name": "screen", "x": 0, "y": 0, "width": SCREEN[0],
                                               "height": SCREEN[1], "logicalDpi": 96, "dpr": 1}]}))
    out = folder / "shown.json"
    env = {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}", "HOME": str(folder),
           "XDG_DATA_HOME": str(folder / "data"), "XDG_CONFIG_HOME": str(folder / "config")}
    env.pop("QT_SCALE_FACTOR", None)
    done = subprocess.run([sys.executable, "-m", "tests.geometry_probe", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def test_every_bar_combination_fits_before_and_during_a_conversation(shown):
    from app.window.window_fit import FRAME_ALLOWANCE
    problems = {case["case"]: case["problems"] for case in shown["cases"] if case["problems"]}
    assert problems == {}
    assert shown["ran"] and len(shown["bars"]) >= 3, shown["bars"]  # settings, hint and message bars
    assert len(shown["cases"]) == 2 * 2 * 2 ** len(shown["bars"])
    width, height = shown["available"]
    for case in shown["cases"]:  # the window did not grow past the screen to make room
        assert case["window"][0] + FRAME_ALLOWANCE[0] <= width and case["window"][1] + FRAME_ALLOWANCE[1] <= height


def test_the_long_microphone_name_is_cut_with_an_ellipsis(shown):
    # The check above compared the combo box as painted with the same box showing the elided
    # text: here the name really is too long for it, so that check was not vacuous.
    assert shown["microphone"].startswith("Jabra Evolve2 65 USB Headset") and not shown["microphone_fits"]


def test_the_conversation_pane_keeps_its_width(shown):
    widths = {case["case"]: case["conversation_width"] for case in shown["cases"]}
    assert len(set(widths.values())) == 1, widths
