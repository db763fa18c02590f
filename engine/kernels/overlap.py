"""Overlapped launches (programmatic dependent launch, Hopper and later): each kernel of ours may
start while the one before it in the stream is finishing, and waits only where it first reads what
that kernel (or an earlier one) wrote. A frame is many short kernels; overlapped, a kernel's
programs take the multiprocessors the previous grid frees, and a matrix-vector product loads its
first weight tile (weights no kernel writes) before it waits. Arithmetic and its order are
untouched: same bits either way. In every kernel launched with `launch()`'s options: `begin(PDL)`
first (the next kernel may launch once all of this one's programs started); nothing produced on the
device read, nothing written, before `wait(PDL)`, which returns once the previous kernel finished
and its writes are visible (it waited for its own predecessor, so all earlier ones are done);
`enter(PDL)` is both. Only on compute capability 9.0+, not under Triton's interpreter, and while
`ENABLED` (by default; `OVERLAP_ENV`=0 turns it off for a process; bench.overlap and the GPU test
switch it between sessions). A change needs new graphs: a captured graph keeps its launches.
"""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

OVERLAP_ENV = "DUPLEXCADENCE_OVERLAPPED_LAUNCHES"
ENABLED = os.environ.get(OVERLAP_ENV) != "0"
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # read once: launch() runs for every kernel


@triton.jit
def begin(PDL: tl.constexpr):
    """Lets the next kernel in the stream launch as soon as every program here has started."""
    if PDL:
        gdc_launch_dependents()


@triton.jit
def wait(PDL: tl.constexpr):
    """Returns once the previous kernel in the stream has finished, its writes visible."""
    if PDL:
        gdc_wait()


@triton.jit
def enter(PDL: tl.constexpr):
    """begin then wait: a kernel with nothing to do before the previous kernel has finished."""
    begin(PDL)
    wait(PDL)


@functools.cache
def _supported(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (9, 0)


def launch(device: torch.device, overlapped: bool = True) -> dict:
    """The keywords a launch of ours passes: the kernels' PDL flag and Triton's launch option.
    `overlapped=False`: a kernel measured slower overlapped launches plainly."""
    if (ENABLED and overlapped and device.type == "cuda" and not _INTERPRETED
            and _supported(device.index if device.index is not None else torch.cuda.current_device())):
        return {"PDL": True, "launch_pdl": True}
    return {"PDL": False}
