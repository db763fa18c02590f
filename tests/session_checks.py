"""Running a session over frames and comparing runs bit for bit (CPU and GPU toggle tests), and
copies of the demo model with a few configuration values changed."""
import json
import shutil

import numpy as np

from engine.families.moshi.model import MoshiModel
from engine.files.paths import DEMO_MODEL_DIR
from engine.loading.models import load_model

PLAIN = {"graph_replay": False, "demand_sized_state": False}
"""Both runtime optimizations off (they are on by default)."""


def run(session, audio, switches=None):
    """Step every frame of `audio`; `switches` maps a frame index to options set before it."""
    out = []
    for i, frame in enumerate(audio):
        if switches and i in switches:
            session.set_options(switches[i])
        out.append(session.step(frame))
    return out


def assert_identical(a, b):
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x.text == y.text, f"frame {i}"
        assert (x.tokens is None) == (y.tokens is None), f"frame {i}"
        if x.tokens is not None:
            np.testing.assert_array_equal(x.tokens, y.tokens, err_msg=f"frame {i}")
        np.testing.assert_array_equal(x.pcm, y.pcm, err_msg=f"frame {i}")


def demo_with(folder, lm: dict, mimi_transformer: dict | None = None) -> MoshiModel:
    """The demo model copied to `folder` with `lm` merged into its config.json (and
    `mimi_transformer` into its Mimi's transformer section), loaded."""
    shutil.copytree(DEMO_MODEL_DIR, folder, dirs_exist_ok=True)
    for name, changes in (("config.json", lm), ("mimi_config.json", mimi_transformer)):
        if changes:
            config = json.loads((folder / name).read_text())
            (config if name == "config.json" else config["transformer"]).update(changes)
            (folder / name).write_text(json.dumps(config))
    return load_model(folder)
