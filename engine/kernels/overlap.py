"""Overlapped launches (programmatic dependent launch, Hopper and later): each kernel of ours
may start while the kernel before it in the stream is still finishing, and waits for it only
where it first reads what that kernel (or any before it) wrote.

At batch 1 a frame is about a thousand short kernels, most of them reading a few MB of
weights; between two of them the GPU drains one grid and ramps up the next. Launched
overlapped, a kernel's programs are placed on the multiprocessors the previous grid frees,
and a matrix-vector product loads its first weight tile (weights no kernel writes) before it
waits. Arithmetic and its order are untouched, so outputs are the same bits either way.

The protocol, in every kernel launched with `launch()`'s options:
- `begin(PDL)` first: the next kernel may be launched once every program of this one has
  started (it then waits in its turn);
- nothing produced on the device is read, and nothing is written, before `wait(PDL)`, which
  returns once the previous kernel has finished and its writes are visible (that kernel
  waited for its own predecessor the same way, so everything earlier is finished too);
  `enter(PDL)` is the two at once, for a kernel with nothing to load before it waits.

Only where the device supports it (compute capability 9.0 and later) and not under Triton's
interpreter, and only while `ENABLED`: on by default (on an H200, bench.overlap measured the
moshiko frame 1.025x faster with it, bit-identical, and the GPU suite passes under it);
`OVERLAP_ENV`=0 turns it off for a whole process; bench.overlap and the GPU test switch it
between sessions. A change needs new graphs: a captured graph keeps the launches it recorded.
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
