"""The streaming transformer's configuration as data (shared by Mimi and the LM)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    d_model: int
    num_heads: int
    num_layers: int
    dim_feedforward: int
    context: int | None
    norm: str = "layer_norm"  # "layer_norm" (eps 1e-5) | "rms_norm_f32" (eps 1e-8, computed in fp32)
    gating: str = "none"  # "none": GELU FFN | "silu": SiLU-gated FFN
    layer_scale: float | None = None
    rope: bool = True
    max_period: float = 10000.0
    weights_per_step: int = 0  # >0: one attention/FFN weight set per step (depformer)
    clock: str = "frame"
    """The KV ring's clock (engine.state): "frame" for the LM, "mimi_step" for Mimi; "fixed" for
    the depformer, whose position restarts every frame so its KV never outgrows one frame."""

    def __post_init__(self):
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of num_heads {self.num_heads}")
        if self.norm not in ("layer_norm", "rms_norm_f32"):
            raise ValueError(f"unknown norm {self.norm!r}")
        if self.gating not in ("none", "silu"):
            raise ValueError(f"unknown gating {self.gating!r}")
        if self.weights_per_step and self.gating == "none":
            raise ValueError("weights_per_step needs a gated FFN (as in the reference)")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def gated_hidden(self) -> int:
        # The reference's rule for the width of a gated FFN.
        if self.dim_feedforward == 4 * self.d_model:
            return 21 * self.d_model // 8
        return 2 * self.dim_feedforward // 3

    @property
    def ring(self) -> int:
        """KV ring capacity: the context, or one entry per step for per-step weights."""
        if self.context is not None:
            return self.context
        if self.weights_per_step:
            return self.weights_per_step
        raise ValueError("a streaming transformer needs a context")
