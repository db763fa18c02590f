"""Mimi's residual vector quantizer in a few kernels: the nearest centroid of each codebook in one
launch per codebook, and the sum of the chosen centroids in one launch.

Encoding: codebook i's kernel takes the residual left by codebook i - 1 and that codebook's choice,
subtracts its centroid (every program, for its own use; the first program also keeps the result for
codebook i + 1), and computes the squared distance to BB centroids per program, sum((c - x)^2) in
fp32. The programs meet in one 64-bit atomic minimum per row: the distance's bits (non-negative, so
they order as the values) above the centroid's index, so the smallest distance wins and a tie goes
to the lower index, as argmin's first minimum does, whatever order the programs run in.

Decoding sums the chosen centroids row by row in codebook order: the torch formula's chain of
additions, bit for bit.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import overlap

_NONE = (1 << 63) - 1  # the atomic minimum's start: above every (distance, index) key
_INDEX = 0xFFFFFFFF


@triton.jit
def _nearest_kernel(X, RES, CENT, KEYS, book, rows, bins, dim, s_res_b, s_res_r, s_cent_b, s_cent_n,
                    BB: tl.constexpr, BD: tl.constexpr, PDL: tl.constexpr):
    """Codebook `book`, grid (rows, centroid tiles): rows on the axis without the 65535 limit."""
    overlap.enter(PDL)
    row = tl.program_id(0)
    tile = tl.program_id(1)
    d = tl.arange(0, BD)
    d_ok = d < dim
    if book == 0:
        x = tl.load(X + row * dim + d, mask=d_ok, other=0.0)
    else:  # what the codebook before left: its residual minus its chosen centroid
        chosen = tl.load(KEYS + (book - 1) * rows + row) & 0xFFFFFFFF
        x = tl.load(RES + (book - 1) * s_res_b + row * s_res_r + d, mask=d_ok, other=0.0) \
            - tl.load(CENT + (book - 1) * s_cent_b + chosen * s_cent_n + d, mask=d_ok, other=0.0)
    if tile == 0:
        tl.store(RES + book * s_res_b + row * s_res_r + d, x, mask=d_ok)
    n = tile * BB + tl.arange(0, BB)
    n_ok = n < bins
    c = tl.load(CENT + book * s_cent_b + n[:, None] * s_cent_n + d[None, :], mask=n_ok[:, None] & d_ok[None, :],
                other=0.0)
    diff = c - x[None, :]
    dist = tl.sum(diff * diff, axis=1)  # >= 0: its bits order as the values do
    key = (dist.to(tl.int32, bitcast=True).to(tl.int64) << 32) | n.to(tl.int64)
    key = tl.where(n_ok, key, 9223372036854775807)
    tl.atomic_min(KEYS + book * rows + row, tl.min(key, axis=0))


def nearest(x: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """x [rows, dim] fp32, centroids [n, bins, dim] fp32 -> codes [n, rows] int64: codebook by
    codebook, the nearest centroid to what the codebooks before it left of x."""
    n, bins, dim = centroids.shape
    rows = x.shape[0]
    if x.shape[1] != dim or x.dtype != centroids.dtype or centroids.stride(2) != 1:
        raise ValueError(f"nearest codes: rows {tuple(x.shape)} against centroids {tuple(centroids.shape)}")
    x = x.contiguous()
    keys = torch.full((n, rows), _NONE, dtype=torch.int64, device=x.device)
    residual = torch.empty(n, rows, dim, dtype=x.dtype, device=x.device)
    bd = triton.next_power_of_2(dim)
    bb = max(1, min(triton.next_power_of_2(bins), 4096 // bd))  # a [BB, BD] tile of 4096 values
    for book in range(n):  # each codebook waits for the one before it: one launch each
        _nearest_kernel[(rows, triton.cdiv(bins, bb))](
            x, residual, centroids, keys, book, rows, bins, dim, residual.stride(0), residual.stride(1),
            centroids.stride(0), centroids.stride(1), BB=bb, BD=bd, num_warps=4, **overlap.launch(x.device))
    return keys & _INDEX


@triton.jit
def _sum_kernel(CODES, CENT, OUT, rows, n, dim, s_codes, s_cent_b, s_cent_n,
                BD: tl.constexpr, PDL: tl.constexpr):
    overlap.enter(PDL)
    row = tl.program_id(0)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    d_ok = d < dim
    total = tl.load(CENT + tl.load(CODES + row) * s_cent_n + d, mask=d_ok, other=0.0)
    for i in range(1, n):
        total += tl.load(CENT + i * s_cent_b + tl.load(CODES + i * s_codes + row) * s_cent_n + d,
                         mask=d_ok, other=0.0)
    tl.store(OUT + row * dim + d, total, mask=d_ok)


def summed(codes: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """codes [n, rows] int64, centroids [n, bins, dim] -> [rows, dim]: each row's chosen
    centroids added in codebook order."""
    n, bins, dim = centroids.shape
    rows = codes.shape[1]
    if codes.shape[0] != n or centroids.stride(2) != 1:
        raise ValueError(f"summed codes: codes {tuple(codes.shape)} against centroids {tuple(centroids.shape)}")
    codes = codes.contiguous()
    out = torch.empty(rows, dim, dtype=centroids.dtype, device=centroids.device)
    bd = min(1024, triton.next_power_of_2(dim))
    _sum_kernel[(rows, triton.cdiv(dim, bd))](codes, centroids, out, rows, n, dim, codes.stride(0),
                                              centroids.stride(0), centroids.stride(1), BD=bd,
                                              **overlap.launch(centroids.device))
    return out
