"""Which placement a conversation's state gets: demand-sized where the options ask for it and
the device can honour it (CUDA with the driver bindings; on the CPU, the emulation), else
full retention."""
from __future__ import annotations

import torch

from ..options import TOGGLES, RuntimeOptions
from .demand import DemandStore
from .full import FullStore
from .regions import Region, Store


def placement_for(device: torch.device, options: RuntimeOptions) -> type:
    """The placement the options ask for: demand-sized where it can run (CUDA with the driver
    bindings; on the CPU, the emulation), else full retention."""
    usable = device.type != "cuda" or TOGGLES["demand_sized_state"].unavailable(device.type) is None
    return DemandStore if options.demand_sized_state and usable else FullStore


def new_store(regions: list[Region], device: torch.device, options: RuntimeOptions) -> Store:
    return placement_for(device, options)(regions, device)
