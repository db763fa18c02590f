"""Int8 weights: the official q8 layout, per-row quantization, and the weights as the products take them.

The official q8 checkpoints (`model.q8.safetensors`) store every linear layer of the LM as an
int8 `weight` [out, in] plus a float32 `weight_scb` [out], the row's absolute maximum
(attention's stacked `in_proj_weight` has `in_proj_weight_scb`); embeddings and norms stay
in bf16. A row's weights are `weight * weight_scb / 127`. Activations stay bf16: the product
accumulates int8 x bf16 in fp32 and scales once, so the only loss is the weights' rounding.

`int8_layout` turns a module built on the meta device into that layout before its weights
are read, so a 7B LM is never held in bf16 on the GPU. The products themselves, on torch or
Triton, are engine.ops.linear's.
"""
from __future__ import annotations

import torch
from torch import nn

from ..kernels.operands import INT4_SCALE
from ..ops.linear import LEVELS, Int4Weight, Int8Weight
from .row_blocks import in_row_blocks

SCB = "_scb"
"""Suffix of a quantized parameter's per-row scale, as the official q8 files name it."""


def quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] float -> (int8 [N, K], float32 [N]): each row scaled so its largest magnitude
    is 127 and rounded to nearest, from the weights in fp16, as Kyutai's quantizer does (exact
    for bf16 weights, whose values fp16 holds). An all-zero row stays zero. A block of rows at a
    time (row_blocks.py)."""
    return in_row_blocks(_quantize_rows, w)


def _quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    w = w.to(torch.float16).float()
    if not torch.isfinite(w).all():
        raise ValueError("weights beyond fp16's range cannot be quantized as the q8 layout is")
    scb = w.abs().amax(dim=1)
    q = torch.round(w * (LEVELS / torch.where(scb > 0, scb, 1.0)).unsqueeze(1))
    return q.clamp_(-LEVELS, LEVELS).to(torch.int8), scb


def dequantize(w: Int8Weight) -> torch.Tensor:
    """The float32 weights an Int8Weight stands for."""
    return w.q.float() * (w.scb / LEVELS).unsqueeze(1)


def weight_of(module: nn.Module, name: str = "weight") -> torch.Tensor | Int8Weight | Int4Weight:
    """A module's weight as the products take it: a tensor, an Int8Weight in the q8 layout, or
    an Int4Weight in our int4 layout (engine.weights.int4)."""
    w = getattr(module, name)
    if w.dtype == torch.uint8:
        return Int4Weight(w, getattr(module, name + INT4_SCALE))
    return Int8Weight(w, getattr(module, name + SCB)) if w.dtype == torch.int8 else w


def linear_weight_names(module: nn.Module) -> tuple[str, ...]:
    """The linear weights `module` holds itself (not its children's): nn.Linear's `weight`,
    or what a module names in its `linear_weights` attribute (the transformer's attention:
    its stacked `in_proj_weight`; its `out_proj`: `weight`)."""
    if isinstance(module, nn.Linear):
        return ("weight",)
    return tuple(getattr(module, "linear_weights", ()))


def int8_layout(module: nn.Module) -> list[str]:
    """Replace, in place, every linear weight of `module` (linear_weight_names) by an int8
    parameter of the same shape plus its float32 `_scb` parameter. Returns the quantized
    parameters' names."""
    names = []
    for prefix, child in module.named_modules():
        for name in linear_weight_names(child):
            _to_int8(child, name)
            names.append(f"{prefix}.{name}" if prefix else name)
    return names


def _to_int8(module: nn.Module, name: str) -> None:
    w = getattr(module, name)
    device = w.device
    setattr(module, name, nn.Parameter(torch.empty(w.shape, dtype=torch.int8, device=device), requires_grad=False))
    module.register_parameter(name + SCB, nn.Parameter(torch.empty(w.shape[0], device=device), requires_grad=False))


def is_q8(tensors: dict) -> bool:
    """Whether a checkpoint's tensors are in the q8 layout."""
    return any(key.endswith(SCB) for key in tensors)


def quantize_checkpoint(tensors: dict, names: list[str], device: torch.device) -> dict:
    """A bf16/fp32 checkpoint's tensors with the parameters `names` quantized per row, one
    tensor at a time on `device` (fast, and only one float weight there at a time); the
    results wait on the host, so the device never holds the weights twice."""
    out = dict(tensors)
    for name in names:
        w = tensors.get(name)
        if w is not None and w.dim() == 2 and w.dtype.is_floating_point:  # otherwise loading names the problem
            q, scb = in_row_blocks(quantize_rows, w, device)
            out[name], out[name + SCB] = q.cpu(), scb.cpu()
    return out
