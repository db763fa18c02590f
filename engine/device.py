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
        grow_segments_in_place()
        return f"cuda:{index}"
    raise ValueError(f"device {name}: use cpu, cuda or cuda:N")


def grow_segments_in_place() -> None:
    """Torch's CUDA allocator in expandable segments, unless the user's allocator settings name them:
    a load quantizes and stacks weights a block at a time, and with a segment per large allocation
    the freed temporaries stay reserved between the weights (1 GiB of an int4 MiniCPM-o process).
    Expandable segments map pages where they are needed and give them back. Addresses and
    arithmetic are unchanged, so output is too; set at any time, it governs the segments made after."""
    import torch

    configured = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + os.environ.get("PYTORCH_ALLOC_CONF", "")
    if "expandable_segments" in configured:
        return
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None:  # torch before 2.9
        setter = torch.cuda.memory._set_allocator_settings
    setter("expandable_segments:True")


def limit_cpu_threads(device: str) -> None:
    """On the CPU, leave a core to the rest of the machine (the GUI, audio callbacks, another
    busy process). When one of torch's OpenMP workers is descheduled every parallel region
    waits for it: the demo model ran 50x slower on a busy 2-core machine with 2 threads than
    with 1, and `offline` 3x slower with one other busy process."""
    if device == "cpu":
        import torch
        torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
