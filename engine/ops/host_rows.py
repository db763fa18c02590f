"""Tables a GPU model keeps in page-locked host memory, read at a position the device holds
(engine.kernels.host_rows): where such a table lives, and its rows."""
from __future__ import annotations

import logging

import torch

from ..kernels import unavailable_reason

log = logging.getLogger(__name__)
_PROBE_ROWS = 64


def table_home(table: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`table` where a model on `device` keeps it: pinned host memory on a GPU the kernels run on
    and whose kernels read it there, else the device itself."""
    device = torch.device(device)
    if device.type == "cuda" and unavailable_reason() is None:
        pinned = table.to("cpu").pin_memory()
        if _read_in_place(pinned, device):
            return pinned
    return table.to(device)


def _read_in_place(pinned: torch.Tensor, device: torch.device) -> bool:
    """Whether a kernel on `device` reads `pinned` where it lies, rows equal to a copy's. Unified
    addressing maps page-locked memory into every device's space; where a driver or a virtual
    machine does not, the table goes to the device (more memory, the same bits)."""
    from ..kernels.host_rows import wrapped_rows as kernel

    count = min(_PROBE_ROWS, pinned.shape[0])
    try:
        rows = kernel(pinned, torch.zeros(1, dtype=torch.long, device=device), count)
        if torch.equal(rows.cpu(), pinned[:count]):
            return True
        problem = "its rows differed from a copy's"
    except (ValueError, RuntimeError) as exc:  # Triton's "cannot be accessed from Triton", a driver error
        problem = str(exc)
    log.warning("a %s table stays on %s: kernels there cannot read it in host memory (%s)",
                tuple(pinned.shape), device, problem)
    return False


def wrapped_rows(table: torch.Tensor, first: torch.Tensor, count: int) -> torch.Tensor:
    """table[(first + i) % len(table)] for i < count, on first's device (first: [1] int64)."""
    if table.device == first.device:
        return table.index_select(0, (torch.arange(count, device=first.device) + first) % table.shape[0])
    from ..kernels.host_rows import wrapped_rows as kernel

    return kernel(table, first, count)
