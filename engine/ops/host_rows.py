"""Tables a GPU model keeps in page-locked host memory, read at a position the device holds
(engine.kernels.host_rows): where such a table lives, and its rows."""
from __future__ import annotations

import torch

from ..kernels import unavailable_reason


def table_home(table: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`table` where a model on `device` keeps it: pinned host memory on a GPU the kernels run on,
    else the device itself."""
    device = torch.device(device)
    if device.type == "cuda" and unavailable_reason() is None:
        return table.to("cpu").pin_memory()
    return table.to(device)


def wrapped_rows(table: torch.Tensor, first: torch.Tensor, count: int) -> torch.Tensor:
    """table[(first + i) % len(table)] for i < count, on first's device (first: [1] int64)."""
    if table.device == first.device:
        return table.index_select(0, (torch.arange(count, device=first.device) + first) % table.shape[0])
    from ..kernels.host_rows import wrapped_rows as kernel

    return kernel(table, first, count)
