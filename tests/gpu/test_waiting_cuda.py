"""On a real GPU: a frame's wait (engine.runtime.waiting) returns only once the work queued
before it is done."""
import pytest
import torch

from engine.runtime.waiting import wait_for

pytestmark = pytest.mark.gpu
CYCLES = 200_000_000  # about 0.1 s of the GPU spinning


def test_the_wait_returns_after_the_queued_work():
    done = torch.cuda.Event()
    torch.cuda._sleep(CYCLES)
    done.record()
    assert not done.query()
    wait_for(torch.device("cuda"))
    assert done.query()
