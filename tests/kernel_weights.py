"""Random linear weights in each form the product kernels take, for their tests."""
import torch

from engine.kernels.operands import Int8Weight
from engine.weights.int4 import quantize_groups
from engine.weights.int8 import quantize_rows


def random_weight(kind: str, n: int, k: int, dtype: torch.dtype, device: str):
    """[n, k] weights scaled by 1 / sqrt(k): "float" in `dtype`, "int8" (Int8Weight) or "int4"
    (Int4Weight), on `device`."""
    w = torch.randn(n, k) / k ** 0.5
    if kind == "int8":
        return Int8Weight(*(t.to(device) for t in quantize_rows(w)))
    if kind == "int4":
        q = quantize_groups(w)
        return type(q)(q.q.to(device), q.scale.to(device), q.group)
    return w.to(dtype).to(device)
