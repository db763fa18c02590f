"""Running a session over frames and comparing runs bit for bit (CPU and GPU toggle tests)."""
import numpy as np

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
