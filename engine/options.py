"""Runtime options: one dataclass the GUI, the CLI and the session share.

`graph_replay` and `demand_sized_state` switch the DuplexCadence runtime ideas on and off
(DESIGN.md section 2); `policy` picks autoregressive generation ("ar") or a DiffuPlex policy
("listen", "speak"; section 3). Values are checked here; whether this build can honour them
is the session's answer (`DuplexSession.capabilities()`).
"""
from __future__ import annotations

import dataclasses
import math

POLICIES = ("ar", "listen", "speak")


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
    policy: str = "ar"
    text_temperature: float = 0.7
    text_top_k: int = 25
    audio_temperature: float = 0.8
    audio_top_k: int = 250
    greedy: bool = False
    seed: int = 0
    graph_replay: bool = False
    demand_sized_state: bool = False

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
        for name in ("text_temperature", "audio_temperature"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0 (0 = greedy), got {value!r}")
        for name in ("text_top_k", "audio_top_k"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0 (0 = no top-k), got {value!r}")
        if not _is_int(self.seed) or not 0 <= self.seed < 2 ** 63:
            raise ValueError(f"seed must be an integer in [0, 2**63), got {self.seed!r}")
        for name in ("greedy", "graph_replay", "demand_sized_state"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")

    def replace(self, **changes) -> "RuntimeOptions":
        return dataclasses.replace(self, **changes)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return _is_int(v) or isinstance(v, float)
