"""MiniCPM-o's weights in int8 or int4, on the engine's formats (engine.weights): each linear
layer of the LLM (its attention and MLP products and its head) and of the TTS's backbone in
int8 with a scale per row, or in int4 with a scale per 64 inputs; the LLM's embedding table
(1.2 GB in bf16), the TTS's text table (0.23 GB) and the audio encoder's layers (0.6 GB) in int8
rows in both. The rest (the encoder's convolutions and projection, norms, the TTS's audio table,
projector and head) stays in the model dtype, the tail in fp32 (its flow in fp16 for int4).
Quantized on the first load in a format, one tensor at a time on the device, so the bf16 model
is never held whole, and kept (kept_weights.py)."""
from __future__ import annotations

import re
from collections.abc import Callable

import torch

from ...ops.linear import Int8Weight
from ...weights.int4 import quantize_groups, quantize_table
from ...weights.int8 import quantize_rows
from ...weights.row_blocks import in_row_blocks

FORMATS = ("bf16", "int8", "int4")
HALF_FLOW = ("int4",)
"""Formats whose tail runs its flow in fp16 on a GPU (the stock Token2wav's float16 option; its vocoder
stays fp32): 0.29 GiB less, for the 8 GB card int4 is for."""
QUANTIZER = "2"
"""Raised when the int8 quantization changes, so that a kept int8 copy (kept_weights.py) is
made again; int4's is engine.weights.int4's."""
_PRODUCT = re.compile(r"(llm|tts)\.model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight"
                      r"|llm\.lm_head\.weight")
_TABLES = ("llm.model.embed_tokens.weight", "tts.emb_text.weight")
_ENCODER = re.compile(r"apm\.layers\.\d+\.(self_attn\.[qkv]_proj|self_attn\.out_proj|fc1|fc2)\.weight")


def is_product(key: str) -> bool:
    """Whether a checkpoint key is a weight these formats quantize as a product's."""
    return _PRODUCT.fullmatch(key) is not None


def is_quantized(key: str) -> bool:
    """Whether int8 and int4 keep this key quantized (a product, a table or an encoder layer's product)."""
    return is_product(key) or key in _TABLES or _ENCODER.fullmatch(key) is not None


def converter(weights: str) -> Callable[[str, torch.Tensor, torch.device, torch.dtype], object] | None:
    """The conversion `read_weights` applies to each tensor as it arrives (None for bf16)."""
    if weights not in FORMATS:
        raise ValueError(f"weights {weights!r}: MiniCPM-o runs in {', '.join(FORMATS)}")
    if weights == "bf16":
        return None

    def convert(key: str, tensor: torch.Tensor, device: torch.device, dtype: torch.dtype):
        # A block of rows at a time onto the device: neither the float weight (the head: 1.2 GB in
        # bf16) nor its quantizer's temporaries are ever there whole.
        if is_product(key):
            if weights == "int8":
                return Int8Weight(*in_row_blocks(quantize_rows, tensor, device, dtype))
            return in_row_blocks(quantize_groups, tensor, device, dtype)
        if key in _TABLES:
            return in_row_blocks(quantize_table, tensor, device, dtype)
        if _ENCODER.fullmatch(key):
            return Int8Weight(*in_row_blocks(quantize_rows, tensor, device, dtype))
        return tensor.to(device=device, dtype=dtype)

    return convert


def stored_bytes(key: str, shape: tuple[int, ...], weights: str, element: int) -> int:
    """Bytes a tensor of `shape` takes in memory under `weights` (float ones at `element` bytes)."""
    count = 1
    for size in shape:
        count *= size
    if weights != "bf16" and is_product(key):
        if weights == "int8":
            return count + 4 * shape[0]
        return count // 2 + 2 * shape[0] * -(-shape[1] // 64)
    if weights != "bf16" and (key in _TABLES or _ENCODER.fullmatch(key)):
        return count + 4 * shape[0]
    return count * element
