"""Where a Triton kernel test runs: on CUDA when there is one, else under Triton's interpreter
on the CPU (TRITON_INTERPRET=1), else it skips (CI has no Triton)."""
import os

import pytest
import torch


def triton_device() -> str:
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no CUDA: run with TRITON_INTERPRET=1 to check the kernel under Triton's interpreter")
    return "cpu"
