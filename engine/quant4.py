"""Int4 weights: group-wise round-to-nearest along the input dimension, the layout of ours that
holds them, and quantizing a float or q8 checkpoint into it.

The format (`model.int4.safetensors`, metadata `{"format": "duplexcadence-int4",
"group_size": "64"}`): every linear weight `P` [N, K] of the LM (what engine.quant's
`linear_weight_names` names, as int8 quantizes) is stored as

- `P`: uint8 [N, K/2], two weights a byte: weight k = 2j in the low nibble of byte j, weight
  2j + 1 in the high nibble, each as q + 8 (q in [-8, 7]);
- `P_int4_scale`: bfloat16 [N, ceil(K / 64)], one scale per row and group of 64 inputs (the
  last group of a row may be shorter).

Weight k of row n is `q[n, k] * scale[n, k // 64]`, computed in fp32 (exact: a 4-bit integer
times a bf16). A group's scale is its signed extreme over -8, so the extreme is -8 exactly and
all 16 levels are used (a negative scale is fine: the product only multiplies), shrunk by the
factor of SHRINK that gives the group the least squared error (clipping the extreme to round
the rest finer: no calibration data, the weights alone). Embeddings, norms and Mimi stay as
the checkpoint has them. bench/int4_quality.py measured the choices (README).
"""
from __future__ import annotations

import torch
from torch import nn

from .kernels.operands import GROUP_SIZE, INT4_SCALE, Int4Weight
from .ops.linear import dequantized as dequantize4
from .quant import SCB, Int8Weight, dequantize, linear_weight_names

__all__ = ["FORMAT", "GROUP_SIZE", "LM_INT4_NAME", "SCALE", "Int4Weight", "dequantize4", "int4_layout",
           "int4_metadata", "is_int4", "layout_problem", "pack", "quantize_checkpoint4", "quantize_groups",
           "read_metadata"]

LM_INT4_NAME = "model.int4.safetensors"
FORMAT = "duplexcadence-int4"
SCALE = INT4_SCALE
SCALE_DTYPE = torch.bfloat16
SHRINK = tuple(1.0 - 0.025 * i for i in range(9))
"""Scale factors tried per group (1.0 down to 0.8), the one with the least squared error kept."""


def pack(q: torch.Tensor) -> torch.Tensor:
    """int [N, K] in [-8, 7], K even -> uint8 [N, K/2] (even k in the low nibble)."""
    u = (q.to(torch.int16) + 8).to(torch.uint8)
    return u[:, 0::2] | (u[:, 1::2] << 4)


def _grouped(w: torch.Tensor, group: int) -> torch.Tensor:
    """w [N, K] -> [N, G, group], the last group padded with zeros."""
    n, k = w.shape
    pad = -k % group
    return torch.nn.functional.pad(w, (0, pad)).view(n, (k + pad) // group, group)


def quantize_groups(w: torch.Tensor, group: int = GROUP_SIZE, shrink: tuple[float, ...] = SHRINK,
                    scale_dtype: torch.dtype = SCALE_DTYPE) -> Int4Weight:
    """w [N, K] float (K even) -> its Int4Weight. Each group's scale is rounded to `scale_dtype`
    before the weights are rounded with it, so q * scale is what the group is rounded to."""
    n, k = w.shape
    if k % 2:
        raise ValueError(f"int4 weights pack two inputs a byte: {k} inputs is odd")
    w = w.float()
    if not torch.isfinite(w).all():
        raise ValueError("weights with NaN or infinite values cannot be quantized")
    wg = _grouped(w, group)
    extreme = wg.gather(-1, wg.abs().argmax(-1, keepdim=True))  # [N, G, 1], signed
    best_q = best_s = best_err = None
    for f in shrink:
        s = (extreme * (f / -8.0)).to(scale_dtype).float()
        q = torch.round(wg / torch.where(s == 0, 1.0, s)).clamp_(-8, 7)
        err = (q * s - wg).square().sum(-1, keepdim=True)
        if best_err is None:
            best_q, best_s, best_err = q, s, err
            continue
        better = err < best_err
        best_q, best_s, best_err = torch.where(better, q, best_q), torch.where(better, s, best_s), \
            torch.minimum(err, best_err)
    q = best_q.flatten(1)[:, :k]
    return Int4Weight(pack(q), best_s.squeeze(-1).to(scale_dtype), group)


def int4_layout(module: nn.Module, group: int = GROUP_SIZE) -> list[str]:
    """Replace, in place, every linear weight of `module` (engine.quant.linear_weight_names) by
    a uint8 parameter [N, K/2] plus its bf16 `_int4_scale` parameter [N, ceil(K/group)].
    Returns the quantized parameters' names."""
    names = []
    for prefix, child in module.named_modules():
        for name in linear_weight_names(child):
            w = getattr(child, name)
            n, k = w.shape
            if k % 2:
                raise ValueError(f"{prefix}.{name}: int4 weights pack two inputs a byte, {k} inputs is odd")
            setattr(child, name, nn.Parameter(torch.empty(n, k // 2, dtype=torch.uint8, device=w.device),
                                              requires_grad=False))
            child.register_parameter(name + SCALE, nn.Parameter(
                torch.empty(n, -(-k // group), dtype=SCALE_DTYPE, device=w.device), requires_grad=False))
            names.append(f"{prefix}.{name}" if prefix else name)
    return names


def is_int4(tensors: dict) -> bool:
    """Whether a checkpoint's tensors are in the int4 layout."""
    return any(key.endswith(SCALE) for key in tensors)


def quantize_checkpoint4(tensors: dict, names: list[str], device: torch.device) -> dict:
    """A float or q8 checkpoint's tensors with the parameters `names` in the int4 layout, one
    tensor at a time on `device`; the results wait on the host. A q8 weight is dequantized
    (q * scb / 127, exact in fp32) and quantized again."""
    out = dict(tensors)
    for name in names:
        w = tensors.get(name)
        if w is None or w.dim() != 2:
            continue  # loading names the problem
        if w.dtype == torch.int8 and name + SCB in tensors:
            w = dequantize(Int8Weight(w.to(device), tensors[name + SCB].to(device)))
            del out[name + SCB]
        elif not w.dtype.is_floating_point:
            continue
        q = quantize_groups(w.to(device))
        out[name], out[name + SCALE] = q.q.cpu(), q.scale.cpu()
    return out


def layout_problem(tensors: dict, metadata: dict | None) -> str | None:
    """What is wrong with an int4 file's tensors and metadata for this layout, or None."""
    metadata = metadata or {}
    if metadata.get("format") != FORMAT:
        return f"metadata format is {metadata.get('format')!r}, expected {FORMAT!r}"
    if metadata.get("group_size") != str(GROUP_SIZE):
        return f"group size {metadata.get('group_size')!r}, this version reads {GROUP_SIZE}"
    for key, scale in tensors.items():
        if not key.endswith(SCALE):
            continue
        packed = tensors.get(key.removesuffix(SCALE))
        if packed is None:
            return f"key {key} has no packed weights {key.removesuffix(SCALE)}"
        if packed.dtype != torch.uint8 or packed.dim() != 2:
            return f"key {key.removesuffix(SCALE)} has dtype {packed.dtype}, expected a uint8 matrix (int4 packed)"
        if scale.dtype != SCALE_DTYPE or tuple(scale.shape) != (packed.shape[0], -(-2 * packed.shape[1] // GROUP_SIZE)):
            return (f"key {key} is {scale.dtype} {list(scale.shape)}, expected bfloat16 "
                    f"[{packed.shape[0]}, {-(-2 * packed.shape[1] // GROUP_SIZE)}]")
    return None


def read_metadata(path) -> dict:
    """A safetensors file's metadata ({} without any)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.metadata() or {}


def int4_metadata() -> dict:
    """The metadata an int4 file carries."""
    return {"format": FORMAT, "group_size": str(GROUP_SIZE)}
