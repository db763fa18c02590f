"""On a real GPU: the driver-only probe the installed app uses before it has a CUDA build of
torch (app/gpu/cuda_torch.py) sees the GPU torch sees, and the window's device line names it."""
import pytest
import torch

from app.gpu.cuda_torch import find_nvidia_gpu, why_this_device

pytestmark = pytest.mark.gpu


def test_the_driver_probe_sees_torchs_gpu(record):
    gpu = find_nvidia_gpu()
    assert gpu is not None
    record("gpu", gpu.name)
    record("driver_cuda", gpu.driver_cuda_text)
    assert gpu.name == torch.cuda.get_device_name(0)
    major, minor = (int(x) for x in torch.version.cuda.split(".")[:2])
    assert gpu.driver_cuda >= (major, minor)  # the driver runs the CUDA release torch was built with


def test_the_window_names_the_gpu_and_cuda_release():
    assert why_this_device("cuda:0") == f"{torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}"
    # The CPU chosen on purpose (--device cpu) is not blamed on a missing GPU.
    assert why_this_device("cpu") == "CPU, as asked (a CUDA GPU is available)"
