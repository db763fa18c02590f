"""Whether a model fits a device, asked before it loads: its weights in the chosen precision,
its streaming state for the longest conversation, and working memory, against the device's
free memory. Reads only the checkpoint's header."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .errors import DeviceMemoryError

if TYPE_CHECKING:
    from .config.lm import LMConfig

WORKING_BYTES = 1 << 30
"""An allowance for what is neither weights nor state: the CUDA context (~0.5 GiB), the
graphs' memory pool, activations, logits, and Mimi's state and workspace. On the H200 a
moshiko frame's peak beyond weights and state is under 0.2 GiB of torch's allocations."""
GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    model: str
    weights: str
    """"bf16", "int8" or "int4", as RuntimeOptions.weights names them."""
    device: str
    weight_bytes: int
    """The LM as it will be loaded, plus the Mimi codec (float32, as on disk)."""
    state_bytes: int
    """The LM's streaming state with every ring full: the longest conversation (its whole
    attention context; longer ones wrap around in the same memory)."""
    context_s: float
    free_bytes: int | None
    """Free memory on the device now; None on the CPU (not checked)."""
    working_bytes: int = WORKING_BYTES

    @property
    def need_bytes(self) -> int:
        return self.weight_bytes + self.state_bytes + self.working_bytes

    @property
    def fits(self) -> bool:
        return self.free_bytes is None or self.need_bytes <= self.free_bytes

    def describe(self) -> str:
        precision = self.weights if self.weights != "bf16" or self.device.startswith("cuda") else "float32"
        need = (f"{self.model}, {precision} weights: needs about {_size(self.need_bytes)} (weights "
                f"{_size(self.weight_bytes)}, state for a {self.context_s / 60:.0f}-minute conversation "
                f"{_size(self.state_bytes)}, working {_size(self.working_bytes)})")
        if self.free_bytes is None:
            return need + " of system memory"
        return need + f"; {_size(self.free_bytes)} free on {self.device}"

    def check(self) -> None:
        """Raises DeviceMemoryError, saying what would fit, when the model does not."""
        if self.fits:
            return
        hint = {"bf16": " Choose int8 or int4 weights, or", "int8": " Choose int4 weights, or"}.get(self.weights, "")
        raise DeviceMemoryError(f"{self.describe()}: it does not fit.{hint} close what else uses the GPU.")


def _size(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / (1 << 20):.0f} MiB"


def plan_memory(path_or_name: str | Path, weights: str | None, device: str | torch.device) -> MemoryPlan:
    """The memory `load_model(path_or_name, device, weights=weights)` and a session need."""
    from .duplex_model import read_lm_checkpoint
    from .paths import MIMI_NAME, file_in
    from .quant import is_q8
    from .quant4 import is_int4

    ckpt = read_lm_checkpoint(path_or_name, layout_only=True)
    mimi = file_in(ckpt.root, ckpt.meta.get("mimi_name", MIMI_NAME), f"{ckpt.root}/config.json", key="mimi_name")
    stored = "int8" if is_q8(ckpt.tensors) else "int4" if is_int4(ckpt.tensors) else "bf16"
    return plan_for_config(ckpt.name, ckpt.cfg, weights or stored, device,
                           mimi.stat().st_size if mimi.is_file() else 0)


def plan_for_config(name: str, cfg: LMConfig, weights: str, device: str | torch.device,
                    mimi_bytes: int) -> MemoryPlan:
    """The same plan from a model's configuration alone: for a model not downloaded yet."""
    from .frame import FRAME_RATE
    from .lm.moshi_lm import MoshiLM
    from .quant import int8_layout
    from .quant4 import int4_layout

    device = torch.device(device)
    with torch.device("meta"):
        lm = MoshiLM(cfg).to(torch.bfloat16 if device.type == "cuda" else torch.float32)
        if weights == "int8":
            int8_layout(lm)
        elif weights == "int4":
            int4_layout(lm)
    weight_bytes = sum(p.numel() * p.element_size() for p in lm.parameters()) + mimi_bytes
    state = sum(r.bytes_full() for r in lm.regions())
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    return MemoryPlan(name, weights, str(device), weight_bytes, state, cfg.context / FRAME_RATE, free)
