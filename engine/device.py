"""Which device the engine runs on, chosen in one place for the app and every subcommand."""
from __future__ import annotations

import os


def select_device(name: str | None) -> str:
    """`name` ("cpu", "cuda", "cuda:N") checked against this machine, or CUDA when there is a
    GPU and the CPU otherwise (None or "auto"). A GPU is made torch's current device: the
    Triton kernels, graph capture and timing events run on the current device. Raises
    ValueError naming the device."""
    import torch

    if name in (None, "auto"):
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return name
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {name}: no CUDA GPU is available")
        index = name.partition(":")[2] if ":" in name else "0"
        if not index.isdigit() or int(index) >= torch.cuda.device_count():
            raise ValueError(f"device {name}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
        torch.cuda.set_device(int(index))
        return f"cuda:{index}"
    raise ValueError(f"device {name}: use cpu, cuda or cuda:N")


def limit_cpu_threads(device: str) -> None:
    """On the CPU, leave a core to the rest of the machine (the GUI, audio callbacks, another
    busy process). When one of torch's OpenMP workers is descheduled every parallel region
    waits for it: the demo model ran 50x slower on a busy 2-core machine with 2 threads than
    with 1, and `offline` 3x slower with one other busy process."""
    if device == "cpu":
        import torch
        torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
