"""Whether a model fits a device, asked before it loads: its weights in the chosen precision,
its streaming state for the longest conversation, and working memory, against the device's
free memory. Each family makes its plan (engine.families.Family.plan_memory) from its
checkpoint's headers or its configuration alone."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..errors import DeviceMemoryError

if TYPE_CHECKING:
    pass

WORKING_BYTES = 1 << 30
"""An allowance for what is neither weights nor state: the CUDA context (~0.5 GiB), the
graphs' memory pool, activations and outputs (a family may state its own)."""
GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    model: str
    weights: str
    """"bf16", "int8" or "int4", as RuntimeOptions.weights names them."""
    device: str
    weight_bytes: int
    """The weights as they will be loaded."""
    state_bytes: int
    """The streaming state with every ring full: the longest conversation (its whole
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
                f"{_size(self.weight_bytes)}, state for a {_length(self.context_s)} conversation "
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


def _length(seconds: float) -> str:
    return f"{seconds / 60:.0f}-minute" if seconds >= 90 else f"{seconds:.0f}-second"


def _size(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / (1 << 20):.0f} MiB"
