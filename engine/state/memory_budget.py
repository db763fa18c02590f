"""One ceiling on a device's memory for torch's allocator and the demand store's mappings
together: what a smaller card would allow, enforced on a larger one.

torch's caching allocator can be capped (`set_per_process_memory_fraction`), but demand-sized
state is mapped outside it (engine.state.vmm), so a cap on torch alone would let the state
grow past the card. While a budget is set, every granule a VmmBuffer maps is charged to it
first: a mapping that would take torch's reserved memory plus all mappings past the budget
raises DeviceMemoryError instead, and torch's cap is lowered by what is mapped, so either
side running out of room fails the same way. The CUDA context and compiled kernels (about
0.5 GiB, outside both) are not counted, as a card's usable memory does not count them.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch

from ..errors import DeviceMemoryError

GIB = 1 << 30


@dataclasses.dataclass
class _Budget:
    limit: int
    total: int
    mapped: int = 0


_budgets: dict[int, _Budget] = {}


def _ordinal(device: torch.device | str | int) -> int:
    device = torch.device(device)
    return device.index if device.index is not None else torch.cuda.current_device()


@contextlib.contextmanager
def memory_budget(limit_bytes: int, device: torch.device | str | int = "cuda"):
    """Within the block, torch's allocations plus demand-mapped state on `device` stay under
    `limit_bytes` (mappings made before the block are not counted: enter it before the store
    is made)."""
    ordinal = _ordinal(device)
    if ordinal in _budgets:
        raise RuntimeError(f"cuda:{ordinal} already has a memory budget")
    total = torch.cuda.get_device_properties(ordinal).total_memory
    if limit_bytes > total:
        raise ValueError(f"a budget of {limit_bytes / GIB:.1f} GiB is more than cuda:{ordinal} has "
                         f"({total / GIB:.1f} GiB)")
    _budgets[ordinal] = budget = _Budget(limit_bytes, total)
    _cap_torch(ordinal, budget)
    try:
        yield budget
    finally:
        del _budgets[ordinal]
        torch.cuda.set_per_process_memory_fraction(1.0, ordinal)


def charge(ordinal: int, nbytes: int) -> None:
    """Called before `nbytes` are mapped (negative: after they are unmapped) on `ordinal`."""
    budget = _budgets.get(ordinal)
    if budget is None:
        return
    if nbytes > 0:
        used = torch.cuda.memory_reserved(ordinal) + budget.mapped
        if used + nbytes > budget.limit:
            raise DeviceMemoryError(
                f"cuda:{ordinal}: mapping {nbytes >> 20} MiB more streaming state would exceed the memory "
                f"budget of {budget.limit / GIB:.2f} GiB ({used / GIB:.2f} GiB in use)")
    budget.mapped += nbytes
    _cap_torch(ordinal, budget)


def _cap_torch(ordinal: int, budget: _Budget) -> None:
    torch.cuda.set_per_process_memory_fraction(max(budget.limit - budget.mapped, 0) / budget.total, ordinal)


def room(device: torch.device | str | int = "cuda") -> int:
    """Bytes this process may still take on `device`: the device's free memory, or less where a
    budget leaves less (a smaller card's, enforced on this one)."""
    ordinal = _ordinal(device)
    free = torch.cuda.mem_get_info(ordinal)[0]
    budget = _budgets.get(ordinal)
    if budget is None:
        return free
    return min(free, budget.limit - torch.cuda.memory_reserved(ordinal) - budget.mapped)
