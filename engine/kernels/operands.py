"""The types the kernels take besides plain tensors, importable without Triton."""
from __future__ import annotations

from typing import NamedTuple

import torch

LEVELS = 127.0
"""An int8 weight's levels each side of zero: a row's weights are q * scb / LEVELS."""


class Int8Weight(NamedTuple):
    """A linear weight in the q8 layout (engine.weights.int8): one scale per output row."""
    q: torch.Tensor  # int8 [N, K]
    scb: torch.Tensor  # float32 [N]: each row's absolute maximum

    @property
    def shape(self) -> torch.Size:
        return self.q.shape

    def of_step(self, step: int, rows: int) -> Int8Weight:
        """Rows [step * rows, (step + 1) * rows): one step's weights of a per-step stack."""
        return Int8Weight(self.q[step * rows:(step + 1) * rows], self.scb[step * rows:(step + 1) * rows])


GROUP_SIZE = 64
"""Inputs per scale of an int4 weight (engine.weights.int4)."""
INT4_SCALE = "_int4_scale"
"""Suffix of an int4 parameter's group scales, beside the packed parameter (engine.weights.int4)."""


class Int4Weight(NamedTuple):
    """A linear weight in our int4 layout (engine.weights.int4): weight k of row n is
    (nibble k of row n - 8) * scale[n, k // group], the even k in a byte's low nibble."""
    q: torch.Tensor  # uint8 [N, K/2]
    scale: torch.Tensor  # bfloat16 [N, ceil(K / group)]
    group: int = GROUP_SIZE

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.q.shape[0], 2 * self.q.shape[1]))

    def of_step(self, step: int, rows: int) -> Int4Weight:
        """Rows [step * rows, (step + 1) * rows): one step's weights of a per-step stack."""
        return Int4Weight(self.q[step * rows:(step + 1) * rows], self.scale[step * rows:(step + 1) * rows],
                          self.group)


class Norm(NamedTuple):
    """A norm applied to a product's input row: "rms" (weight = alpha, no bias) or "layer"."""
    kind: str
    weight: torch.Tensor
    bias: torch.Tensor | None
    eps: float


INT8_ROW_SCALE = "_int8_scale"
"""Suffix of an int8 embedding table's row scales, beside the table (engine.weights.int4)."""


class Int8Rows(NamedTuple):
    """An embedding table in int8 (engine.weights.int4's int4 layout): row v is q[v] * scale[v],
    computed in fp32 and rounded once to the activation dtype."""
    q: torch.Tensor  # int8 [V, D]
    scale: torch.Tensor  # float32 [V]: each row's absolute maximum / 127


def rows_input(x: torch.Tensor, kernel: str) -> torch.Tensor:
    """x as both product kernels read it: [rows, K] with unit column stride."""
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(f"{kernel}: input must be [rows, K] with unit column stride, got {tuple(x.shape)}")
    return x


def product_operands(x: torch.Tensor, w, act: str | None, residual: torch.Tensor | None, kernel: str
                     ) -> tuple[torch.Tensor, int, torch.Tensor]:
    """(x checked, K, the output [M, N]) of x @ w.T, the residual checked against the output;
    for act="silu_gate" x holds the gate's two halves, so K is half its width."""
    x = rows_input(x, kernel)
    k = x.shape[1] // 2 if act == "silu_gate" else x.shape[1]
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    if residual is not None and (residual.shape != out.shape or residual.stride(1) != 1):
        raise ValueError(f"{kernel}: residual {tuple(residual.shape)} for output {tuple(out.shape)}")
    return x, k, out


def norm_args(norm: Norm | None, dummy: torch.Tensor) -> tuple:
    """A prologue norm's (weight, bias, eps) as the kernels take them (`dummy` where none)."""
    if norm is None:
        return dummy, dummy, 0.0
    return norm.weight, norm.bias if norm.bias is not None else norm.weight, norm.eps


def epilogue_args(dummy: torch.Tensor, n: int, residual: torch.Tensor | None, scale: torch.Tensor | None,
                  qkv: tuple | None) -> tuple[tuple, dict]:
    """The residual and QKV epilogues' arguments, as both product kernels (fused_linear,
    rows_kernels) take them: (RES, SCALE, sr_m, POS, KV, ring, skv_r, skv_c, skv_h, skv_d,
    sq_m, sq_h, d_model, rope_coef) and the constexprs HAS_SCALE, HAS_ROPE, HEAD_DIM. `dummy`
    stands for the tensors an epilogue does not read; `qkv`: (pos, kv ring, q out, RoPE
    coefficient or None, head dim) for n = 3 * d_model outputs."""
    res, res_scale, sr_m = (dummy, dummy, 0) if residual is None else (residual, scale if scale is not None
                                                                       else dummy, residual.stride(0))
    pos, kv, ring, skv, sq_m, sq_h, d_model, coef, head_dim = dummy, dummy, 1, (0, 0, 0, 0), 0, 0, 1, None, 2
    if qkv is not None:
        pos, kv, q_out, coef, head_dim = qkv
        ring, skv = kv.shape[0], kv.stride()
        sq_m, sq_h, d_model = q_out.stride(0), q_out.stride(1), n // 3
    args = (res, res_scale, sr_m, pos, kv, ring, *skv, sq_m, sq_h, d_model, coef or 0.0)
    return args, dict(HAS_SCALE=scale is not None, HAS_ROPE=coef is not None, HEAD_DIM=head_dim)
