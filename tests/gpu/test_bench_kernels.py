"""The benchmark's kernel profiler on CUDA (bench.kernels): the markers it drops by wrapping a
frame timer's `mark` for the profiled frames give each stage the kernels queued in it, the
timer still times those frames, and it is left as it was."""
import pytest
import torch

from bench.kernels import profile_stages
from engine.runtime.timing import FrameTimer

pytestmark = pytest.mark.gpu


def test_each_stage_gets_the_kernels_queued_in_it():
    timer, x, timings = FrameTimer("cuda"), torch.zeros(1024, device="cuda"), []

    def step():
        timer.begin()
        timer.mark(None)  # the first stage's clock starts here, as in the session's frame
        x.add_(1)  # one elementwise kernel each
        timer.mark("encode")
        for _ in range(3):
            x.add_(1)
        timer.mark("backbone")
        torch.cuda.synchronize()
        timings.append(timer.end())

    step()
    stages = profile_stages(step, timer, frames=4)
    assert {s: stages[s]["kernels"] for s in stages if s != "frame"} == {"encode": 1, "backbone": 3, "other": 0}
    assert stages["frame"]["kernels"] == 4 and stages["backbone"]["busy_ms"] > 0
    assert len(timings) == 5 and all(t["encode"] > 0 and t["backbone"] > 0 for t in timings)
    assert "mark" not in vars(timer)  # the class's own mark again
    assert x[0].item() == 4 * 5
