"""Int4 weights: group-wise round-to-nearest along the input dimension, our layout for them, and
quantizing a float or q8 checkpoint into it. In `model.int4.safetensors` (metadata `{"format":
"duplexcadence-int4", "group_size": "64", "embeddings": "int8", "quantizer": "1"}`) a linear weight
`P` [N, K] (`linear_weight_names`) is `P` uint8 [N, K/2] (weight 2j in byte j's low nibble, 2j + 1
in its high one, each q + 8, q in [-8, 7]) and `P_int4_scale` bf16 [N, ceil(K / 64)] (a row's last
group may be shorter): weight k of row n is q * scale[n, k // 64] in fp32, exactly. A group's scale
is its signed extreme over -8 (all 16 levels used), shrunk by the factor of SHRINK with the least
squared error (no calibration data). An embedding table `T` (`is_table`) is `T` int8 [V, D] rounded
per row and `T_int8_scale` float32 [V], the row's max |T| / 127 (0 for a zero row): one fp32 product
rounded once, the same in torch and kernels, and no bf16 scale rounding pushes an extreme past 127
levels; ZERO_TOKEN still looks up zeros. An older file's bf16 tables (no "embeddings" metadata) are
quantized on load, as an export would. Norms, Mimi and PersonaPlex's voice prompts stay as stored.
"""
from __future__ import annotations

import re
from functools import partial

import torch
from torch import nn

from ..kernels.operands import GROUP_SIZE, INT4_SCALE, INT8_ROW_SCALE, Int4Weight, Int8Rows
from ..ops.linear import LEVELS, Table
from ..ops.linear import dequantized as dequantize4
from .int8 import SCB, Int8Weight, dequantize, linear_weight_names
from .row_blocks import in_row_blocks

__all__ = ["FORMAT", "GROUP_SIZE", "LM_INT4_NAME", "ROW_SCALE", "SCALE", "Int4Weight", "Int8Rows", "dequantize4",
           "int4_layout", "int4_metadata", "is_int4", "is_table", "layout_problem", "pack", "quantize_checkpoint4",
           "quantize_groups", "quantize_table", "read_metadata", "table_of"]

LM_INT4_NAME = "model.int4.safetensors"
FORMAT = "duplexcadence-int4"
SCALE = INT4_SCALE
SCALE_DTYPE = torch.bfloat16
ROW_SCALE = INT8_ROW_SCALE
EMBEDDINGS = "int8"
"""The metadata's "embeddings": the tables' layout (absent in files from before they were int8)."""
QUANTIZER = "1"
"""The metadata's "quantizer": the rounding's version (SHRINK and the scale search), to be raised
when it changes, so that a kept int4 copy (engine.weights.int4_kept) is made again rather than reused."""
_TABLE = re.compile(r"(emb|depformer_emb)\.\d+\.weight|(text_emb|depformer_text_emb)\.weight")
"""The LM's embedding tables by their official keys (engine.families.moshi.lm.moshi_lm's names): a checkpoint's
keys say which of its tensors are tables with no module at hand (quantize_checkpoint4)."""
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
    before the weights are rounded with it, so q * scale is what the group is rounded to. A
    block of rows at a time (row_blocks.py): the search's temporaries are eight times its input."""
    return in_row_blocks(partial(_quantize_groups, group=group, shrink=shrink, scale_dtype=scale_dtype), w)


def _quantize_groups(w: torch.Tensor, group: int, shrink: tuple[float, ...], scale_dtype: torch.dtype) -> Int4Weight:
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


def is_table(key: str) -> bool:
    """Whether a checkpoint key (or parameter name) is one of the LM's embedding tables."""
    return _TABLE.fullmatch(key) is not None


def quantize_table(w: torch.Tensor) -> Int8Rows:
    """w [V, D] float -> int8 rows, each on its own scale (its absolute maximum / 127, fp32),
    rounded to nearest with that scale. An all-zero row stays zero (scale 0). A block of rows
    at a time (row_blocks.py)."""
    return in_row_blocks(_quantize_table, w)


def _quantize_table(w: torch.Tensor) -> Int8Rows:
    w = w.float()
    if not torch.isfinite(w).all():
        raise ValueError("embeddings with NaN or infinite values cannot be quantized")
    scale = w.abs().amax(dim=1) / LEVELS
    q = torch.round(w / torch.where(scale > 0, scale, 1.0).unsqueeze(1)).clamp_(-LEVELS, LEVELS)
    return Int8Rows(q.to(torch.int8), scale)


def table_of(module: nn.Embedding) -> Table:
    """An embedding's table as engine.ops.linear.embedding takes it: its float weight, or its
    Int8Rows in the int4 layout."""
    w = module.weight
    return Int8Rows(w, getattr(module, "weight" + ROW_SCALE)) if w.dtype == torch.int8 else w


def int4_layout(module: nn.Module, group: int = GROUP_SIZE) -> list[str]:
    """Replace, in place, every linear weight of `module` (engine.weights.int8.linear_weight_names) by
    a uint8 parameter [N, K/2] plus its bf16 `_int4_scale` parameter [N, ceil(K/group)], and
    every embedding table (`is_table`) by an int8 one plus its float32 `_int8_scale` [V].
    Returns the linear weights' names (the tables' keys are the ones `is_table` names)."""
    names = []
    for prefix, child in module.named_modules():
        if isinstance(child, nn.Embedding) and is_table(f"{prefix}.weight"):
            _to_int8_table(child)
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


def _to_int8_table(module: nn.Embedding) -> None:
    v, d = module.weight.shape
    device = module.weight.device
    module.weight = nn.Parameter(torch.empty(v, d, dtype=torch.int8, device=device), requires_grad=False)
    module.register_parameter("weight" + ROW_SCALE, nn.Parameter(
        torch.empty(v, dtype=torch.float32, device=device), requires_grad=False))


def is_int4(tensors: dict) -> bool:
    """Whether a checkpoint's tensors are in the int4 layout."""
    return any(key.endswith(SCALE) for key in tensors)


def quantize_checkpoint4(tensors: dict, names: list[str], device: torch.device) -> dict:
    """A float or q8 checkpoint's tensors with the parameters `names` in the int4 layout, and
    its float embedding tables (`is_table`) in int8 (those of an int4 file from before they
    were int8 too), one tensor at a time on `device`; the results wait on the host. A q8
    weight is dequantized (q * scb / 127, exact in fp32) and quantized again."""
    out = dict(tensors)
    for key, w in tensors.items():
        if is_table(key) and w.dim() == 2 and w.dtype.is_floating_point:
            table = in_row_blocks(quantize_table, w, device)
            out[key], out[key + ROW_SCALE] = table.q.cpu(), table.scale.cpu()
    for name in names:
        w = tensors.get(name)
        if w is None or w.dim() != 2:
            continue  # loading names the problem
        if w.dtype == torch.int8 and name + SCB in tensors:
            w = dequantize(Int8Weight(w.to(device), tensors[name + SCB].to(device)))
            del out[name + SCB]
        elif not w.dtype.is_floating_point:
            continue
        q = in_row_blocks(quantize_groups, w, device)
        out[name], out[name + SCALE] = q.q.cpu(), q.scale.cpu()
    return out


def layout_problem(tensors: dict, metadata: dict | None) -> str | None:
    """What is wrong with an int4 file's tensors and metadata for this layout, or None."""
    metadata = metadata or {}
    if metadata.get("format") != FORMAT:
        return f"metadata format is {metadata.get('format')!r}, expected {FORMAT!r}"
    if metadata.get("group_size") != str(GROUP_SIZE):
        return f"group size {metadata.get('group_size')!r}, this version reads {GROUP_SIZE}"
    if metadata.get("embeddings", EMBEDDINGS) != EMBEDDINGS:
        return f"embeddings {metadata['embeddings']!r}, this version reads {EMBEDDINGS!r}"
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
    return _tables_problem(tensors, "embeddings" in metadata)


def _tables_problem(tensors: dict, int8: bool) -> str | None:
    """What is wrong with the int8 tables, or None; `int8`: the metadata says the tables are
    (else a file from before they were: float tables are quantized on load)."""
    for key, scale in tensors.items():
        if not key.endswith(ROW_SCALE):
            continue
        name = key.removesuffix(ROW_SCALE)
        table = tensors.get(name)
        if table is None:
            return f"key {key} has no embedding table {name}"
        if table.dtype != torch.int8 or table.dim() != 2:
            return f"key {name} has dtype {table.dtype}, expected an int8 matrix (an int8 embedding table)"
        if scale.dtype != torch.float32 or tuple(scale.shape) != (table.shape[0],):
            return f"key {key} is {scale.dtype} {list(scale.shape)}, expected float32 [{table.shape[0]}]"
    floating = next((k for k, v in tensors.items() if is_table(k) and v.dtype != torch.int8), None)
    if int8 and floating:
        return f"key {floating} has dtype {tensors[floating].dtype}, expected int8 (metadata embeddings int8)"
    return None


def read_metadata(path) -> dict:
    """A safetensors file's metadata ({} without any)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.metadata() or {}


def int4_metadata() -> dict:
    """The metadata an int4 file carries."""
    return {"format": FORMAT, "group_size": str(GROUP_SIZE), "embeddings": EMBEDDINGS, "quantizer": QUANTIZER}
