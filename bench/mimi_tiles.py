"""One replayed Mimi frame (bench.mimi_frame) under other tile rules for SEANet's streaming
convolutions and Mimi's fp32 products: how the rules in engine.kernels.stream_conv and
fused_linear._config were chosen. Each rule prints the encode's and the decode's replayed ms,
their products' µs, and each convolution launch's µs in order (/n: the programs splitting its
depth; the launch after a split adds the partial sums).

    python3 -m bench.mimi_tiles [RULE ...]   (default: every rule)
"""
from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from unittest import mock

import torch
import triton

# name: (chunks: (depth, chunk width), deepest first; programs that fill the GPU ("busy": 264,
# two a multiprocessor); most programs splitting one tile's depth; fp32 products up to 2048
# deep as (rows a program, warps)). "before": the rules before deep chunks, narrow time tiles
# and four-row products; "now": the engine's rules.
RULES = {
    "before": (None, 128, 8, (2, 8)),
    "chunks128": (((1024, 128),), 128, 8, (2, 8)),
    "chunks128-busy": (((1024, 128),), 264, 16, (2, 8)),
    "chunks256": (((2048, 256),), 128, 8, (2, 8)),
    "chunks64": (((512, 64),), 128, 8, (2, 8)),
    "chunks256+128-busy": (((2048, 256), (1024, 128)), 264, 16, (2, 8)),
    "chunks256+128-busy-split32": (((2048, 256), (1024, 128)), 264, 32, (2, 8)),
    "chunks256+128-busy-rows8": (((2048, 256), (1024, 128)), 264, 16, (8, 4)),
    "chunks256+128-busy-rows16w8": (((2048, 256), (1024, 128)), 264, 16, (16, 8)),
    "chunks256+128-busy-rows4": (((2048, 256), (1024, 128)), 264, 16, (4, 4)),
    "now": (((1024, 128),), 264, 16, (4, 4)),
}


def _before_conv(c_out: int, t_out: int, depth: int) -> tuple[int, int, int, int, int]:
    bm, bn = 16 if c_out <= 16 else 32, max(16, min(64, triton.next_power_of_2(t_out)))
    split = max(1, min(8, 128 // (triton.cdiv(c_out, bm) * triton.cdiv(t_out, bn)), depth // 128))
    span = triton.cdiv(triton.cdiv(depth, split), 32) * 32
    return bm, bn, triton.cdiv(depth, span), span, 32


def _before_convtr(rows: int, t_in: int, c_in: int) -> tuple[int, int, int, int, int]:
    bm, bn = 64, max(16, min(64, triton.next_power_of_2(t_in)))
    split = max(1, min(8, triton.cdiv(256, triton.cdiv(rows, bm) * triton.cdiv(t_in, bn)), c_in // 128))
    span = triton.cdiv(triton.cdiv(c_in, split), 32) * 32
    return bm, bn, triton.cdiv(c_in, span), span, 32


@contextlib.contextmanager
def rule(name: str) -> Iterator[None]:
    from engine.kernels import fused_linear, stream_conv, stream_convtr

    chunks, busy, max_split, (rows, warps) = RULES[name]
    config = fused_linear._config

    def products(N, K, dtype, weights="float"):
        got = config(N, K, dtype, weights)
        if dtype == torch.float32 and weights == "float" and K <= 2048:
            return fused_linear._Config(rows, got.bk, warps, 3)
        return got

    with contextlib.ExitStack() as stack:
        patch = stack.enter_context
        patch(mock.patch.object(fused_linear, "_config", products))
        patch(mock.patch.object(stream_conv, "_BUSY", busy))
        patch(mock.patch.object(stream_conv, "MAX_SPLIT", max_split))
        if chunks is None:
            patch(mock.patch.object(stream_conv, "tiles", _before_conv))
            patch(mock.patch.object(stream_convtr, "tiles", _before_convtr))
        else:
            patch(mock.patch.object(stream_conv, "chunk",
                                    lambda depth: next((bk for deep, bk in chunks if depth >= deep), stream_conv.BK)))
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rules", nargs="*", default=list(RULES), metavar="RULE",
                        help=f"rules to measure (default: all): {', '.join(RULES)}")
    args = parser.parse_args()
    unknown = [name for name in args.rules if name not in RULES]
    if unknown:
        parser.error(f"unknown rule {unknown[0]!r}")
    if not torch.cuda.is_available():
        parser.exit(2, "bench.mimi_tiles: needs a CUDA GPU\n")
    from .mimi_frame import measure

    for name in args.rules:
        with rule(name):
            result = measure(30, 0)
        for part in ("encode", "decode"):
            launches = result[part]["launches"]
            convs = [f"{us:.0f}" + (f"/{grid[2]}" if grid and grid[2] > 1 else "")
                     for kernel, grid, us in launches if "_conv_kernel" in kernel or "_columns_kernel" in kernel]
            products = sum(us for kernel, _, us in launches if "_gemv_kernel" in kernel)
            print(f"{name} | {part} {result[part]['replayed_ms']:.3f} ms | products {products:.0f} µs | "
                  + " ".join(convs), flush=True)


if __name__ == "__main__":
    main()
