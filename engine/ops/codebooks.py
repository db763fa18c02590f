"""Mimi's residual vector quantizer: each codebook's nearest centroid to what the codebooks
before it left, and the sum of the chosen centroids. On CUDA, the Triton kernels of
engine.kernels.codebooks (one launch per codebook, one for the sum); elsewhere the torch
formulas below. The sum is the same bits on both; the nearest centroid is argmin of the
distance on both, which the two compute in different orders (torch through a matrix
product), so a centroid within rounding of another's distance can differ between them.
"""
from __future__ import annotations

import torch

from . import dispatch


def nearest_codes(x: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """x [rows, dim], centroids [n, bins, dim] -> codes [n, rows] (int64)."""
    if dispatch.use_triton(x) and x.dtype == centroids.dtype == torch.float32:  # Mimi's, as loaded
        from ..kernels.codebooks import nearest

        return nearest(x, centroids)
    codes = []
    for table in centroids:
        idx = torch.cdist(x[None], table[None], p=2)[0].argmin(dim=-1)
        x = x - table[idx]
        codes.append(idx)
    return torch.stack(codes)


def summed_centroids(codes: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """codes [n, rows], centroids [n, bins, dim] -> [rows, dim]: each row's centroids added in
    codebook order."""
    if dispatch.use_triton(centroids):
        from ..kernels.codebooks import summed

        return summed(codes, centroids)
    total = centroids[0][codes[0]]
    for table, idx in zip(centroids[1:], codes[1:]):
        total = total + table[idx]
    return total
