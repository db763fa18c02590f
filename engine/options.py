"""Runtime options: one dataclass the GUI, the CLI and the session share, and the names the
GUI shows for them.

`graph_replay` and `demand_sized_state` are the DuplexCadence runtime (docs/architecture.md):
on by default, since they never change the output; they exist as switches to show the
difference. `policy` picks autoregressive generation ("ar") or a DiffuPlex policy ("listen",
"speak"). Values are checked here; whether this machine can honour them is the session's
answer (`DuplexSession.capabilities()`).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
from collections.abc import Callable

from .config.checks import is_int, is_number

POLICIES = {
    "ar": "AR (backbone every frame)",
    "listen": "DiffuPlex LISTEN",
    "speak": "DiffuPlex SPEAK",
}
"""Policy -> what the GUI calls it."""


@dataclasses.dataclass(frozen=True)
class Toggle:
    """A runtime switch: a bool field of RuntimeOptions of the same name, on by default since it
    never changes the output. Honoured in one place (engine.runtime: `stages` for graph replay,
    `placement` for demand-sized state); where a device cannot honour it, it is accepted and
    has no effect, and `unavailable` says why."""
    label: str
    help: str
    unavailable: Callable[[str], str | None]
    """A device type ("cuda", "cpu") -> why it cannot honour the toggle, or None."""


def _has_cuda_bindings() -> bool:
    try:
        return importlib.util.find_spec("cuda.bindings") is not None
    except ModuleNotFoundError:  # no `cuda` namespace package at all
        return False


def _graph_replay_unavailable(device_type: str) -> str | None:
    return None if device_type == "cuda" else "CUDA graph replay needs a CUDA GPU"


def _demand_sized_unavailable(device_type: str) -> str | None:
    if device_type != "cuda":
        return "demand-sized state needs CUDA virtual memory (on the CPU: an emulation that saves no memory)"
    if not _has_cuda_bindings():
        return "demand-sized state needs the cuda-bindings package (pip install 'duplexcadence[gpu]')"
    return None


TOGGLES = {
    "graph_replay": Toggle("CUDA graph replay",
                           "Replay captured CUDA graphs instead of launching every kernel from Python.",
                           _graph_replay_unavailable),
    "demand_sized_state": Toggle("Demand-sized streaming state",
                                 "Back streaming state with memory only as the conversation needs it, "
                                 "at a stable address.", _demand_sized_unavailable),
}
"""The runtime toggles by option name."""


def toggle_reasons(device_type: str) -> dict[str, str | None]:
    """Each runtime toggle: None if a device of this type can honour it, else why not."""
    return {name: toggle.unavailable(device_type) for name, toggle in TOGGLES.items()}
WEIGHTS = {"bf16": "bf16 (16-bit weights)", "int8": "int8 (8-bit weights, per-row scales)",
           "int4": "int4 (4-bit weights, a scale per 64 inputs)"}
"""Weight precisions a model loads in -> what the GUI calls them."""
VERIFY = ("semantic", "off")
MAX_BLOCK = 16


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
    policy: str = "ar"
    text_temperature: float = 0.7
    text_top_k: int = 25
    audio_temperature: float = 0.8
    audio_top_k: int = 250
    greedy: bool = False
    seed: int = 0
    graph_replay: bool = True
    demand_sized_state: bool = True
    tau: float = 0.5
    """DiffuPlex: consume a predicted frame only with confidence >= tau."""
    block: int = 4
    """DiffuPlex: K, future frames one wake predicts (at most the predictor's block)."""
    verify: str = "semantic"
    """DiffuPlex: compare each predicted frame with the user's real audio ("semantic": the
    user's semantic code; "off": never), a divergence waking the backbone early."""
    weights: str | None = None
    """The LM's linear weights: "bf16", "int8" (engine.weights.int8) or "int4"
    (engine.weights.int4), chosen when the model loads (load_model(weights=...)); None: as
    loaded. A session's options carry its model's."""

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
        for name in ("text_temperature", "audio_temperature"):
            value = getattr(self, name)
            if not is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0 (0 = greedy), got {value!r}")
        for name in ("text_top_k", "audio_top_k"):
            value = getattr(self, name)
            if not is_int(value) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0 (0 = no top-k), got {value!r}")
        if not is_int(self.seed) or not 0 <= self.seed < 2 ** 63:
            raise ValueError(f"seed must be an integer in [0, 2**63), got {self.seed!r}")
        if not is_number(self.tau) or not 0 <= self.tau <= 1:
            raise ValueError(f"tau must be a number in [0, 1], got {self.tau!r}")
        if not is_int(self.block) or not 1 <= self.block <= MAX_BLOCK:
            raise ValueError(f"block must be an integer in [1, {MAX_BLOCK}], got {self.block!r}")
        if self.weights is not None and self.weights not in WEIGHTS:
            raise ValueError(f"unknown weights {self.weights!r}; choose one of {', '.join(WEIGHTS)}")
        if self.verify not in VERIFY:
            raise ValueError(f"unknown verify {self.verify!r}; choose one of {', '.join(VERIFY)}")
        for name in ("greedy", *TOGGLES):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")

    def replace(self, **changes) -> RuntimeOptions:
        return dataclasses.replace(self, **changes)

