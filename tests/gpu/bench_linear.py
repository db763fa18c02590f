"""Sweep of the fused matrix-vector kernel's tile sizes (engine.kernels.fused_linear) against
torch's product (cuBLAS) on the shapes of a frame, one row of activations, graph-replayed.

Each timed call reads a different copy of the weight (the copies together overflow the L2
cache), as a frame reads each layer's weights once. Prints, per shape, torch's time, the
best configuration's time and its effective bandwidth; writes everything as JSON.

    python -m tests.gpu.bench_linear OUT.json          # bf16 / fp32 weights
    python -m tests.gpu.bench_linear OUT.json --int8   # the LM's shapes with int8 weights
    python -m tests.gpu.bench_linear OUT.json --int4   # and with int4 weights (engine.weights.int4)
"""
from __future__ import annotations

import itertools
import json
import sys

import torch
from torch.nn import functional as F

from bench.graph_timing import replay_ms
from engine.kernels import fused_linear

SHAPES = {  # name: (N, K, dtype)
    "temporal qkv": (12288, 4096, torch.bfloat16),
    "temporal out": (4096, 4096, torch.bfloat16),
    "temporal ffn in": (22528, 4096, torch.bfloat16),
    "temporal ffn out": (4096, 11264, torch.bfloat16),
    "text head": (32000, 4096, torch.bfloat16),
    "depformer in": (1024, 4096, torch.bfloat16),
    "depformer qkv": (3072, 1024, torch.bfloat16),
    "depformer out": (1024, 1024, torch.bfloat16),
    "depformer ffn in": (5632, 1024, torch.bfloat16),
    "depformer ffn out": (1024, 2816, torch.bfloat16),
    "depformer head": (2048, 1024, torch.bfloat16),
    "mimi qkv": (1536, 512, torch.float32),
    "mimi ffn in": (2048, 512, torch.float32),
    "mimi ffn out": (512, 2048, torch.float32),
}
CONFIGS = [fused_linear._Config(bn, bk, w, s)
           for bn, bk, w, s in itertools.product((2, 4, 8), (512, 1024, 2048), (4, 8), (1, 3))]
INT8_SHAPES = ["temporal qkv", "temporal ffn in", "temporal ffn out", "depformer qkv", "depformer ffn in"]
INT8_CONFIGS = [fused_linear._Config(bn, bk, w, 3)
                for (bn, bk), w in itertools.product(((2, 4096), (4, 2048), (8, 1024), (8, 2048), (16, 512),
                                                      (16, 1024), (32, 256), (32, 512)), (4, 8))]
"""Int8 tiles: every program reads the whole input row besides its weight rows, so with int8
weights (half the bytes per row) more rows per program keep the input's share of the traffic
down; the accumulator [BN, BK] bounds BN * BK."""
INT4_SHAPES = INT8_SHAPES + ["temporal out", "depformer ffn out"]
INT4_CONFIGS = [fused_linear._Config(bn, bk, w, 3)
                for (bn, bk), w in itertools.product(((2, 4096), (4, 2048), (4, 4096), (8, 1024), (8, 2048),
                                                      (8, 4096), (16, 512), (16, 1024), (16, 2048), (32, 512),
                                                      (32, 1024)), (4, 8))]
"""Int4 tiles: a quarter of bf16's bytes per weight; a chunk reduces to one sum per group,
so tall tiles fit in registers and share the input row's loads among more output rows."""
CALLS = 24
L2_BYTES = 256 << 20


def _time(fn, weights, x) -> float:
    """Seconds per call, replaying a graph of CALLS calls over rotating weight copies."""
    def calls():
        for i in range(CALLS):
            fn(x, weights[i % len(weights)])

    return replay_ms(calls, 10) / 1000 / CALLS


def _weights(N: int, K: int, dtype: torch.dtype, kind: str, copies: int) -> list:
    from engine.kernels.operands import Int8Weight
    from engine.weights.int4 import quantize_groups
    from engine.weights.int8 import quantize_rows

    if kind == "int4":
        return [quantize_groups(torch.randn(N, K, device="cuda")) for _ in range(copies)]
    if kind == "int8":
        return [Int8Weight(*quantize_rows(torch.randn(N, K, device="cuda"))) for _ in range(copies)]
    return [torch.randn(N, K, device="cuda").to(dtype) for _ in range(copies)]


def _dense(w) -> torch.Tensor:
    from engine.kernels.operands import Int4Weight, Int8Weight
    from engine.weights.int4 import dequantize4
    from engine.weights.int8 import dequantize

    return dequantize4(w) if isinstance(w, Int4Weight) else dequantize(w) if isinstance(w, Int8Weight) else w


def main(path: str, kind: str = "float") -> None:
    results = {}
    shapes, configs = {"int8": (INT8_SHAPES, INT8_CONFIGS), "int4": (INT4_SHAPES, INT4_CONFIGS)}.get(
        kind, (list(SHAPES), CONFIGS))
    for name in shapes:
        N, K, dtype = SHAPES[name]
        nbytes = N * K * {"int8": 1, "int4": 0.5}.get(kind, dtype.itemsize)
        copies = max(2, min(CALLS, -(-L2_BYTES // int(nbytes))))
        weights = _weights(N, K, dtype, kind, copies)
        x = torch.randn(1, K, device="cuda").to(dtype)
        dense = [_dense(w).to(dtype) for w in weights[:2]] if kind != "float" else weights
        # torch's product on float weights of the same shape: what the bf16 path costs
        row = {"torch_s": _time(lambda a, w: F.linear(a, w), dense, x), "configs": {}}
        ref = F.linear(x.double(), _dense(weights[0]).double())
        for cfg in configs:
            if cfg.bk > triton_next_pow2(K):
                continue
            fused_linear._config = lambda *shape, cfg=cfg: cfg
            try:
                err = (fused_linear.linear(x, weights[0]).double() - ref).abs().max().item()
                row["configs"][str(tuple(cfg))] = {"s": _time(fused_linear.linear, weights, x), "max_err": err}
            except Exception as error:  # a configuration the compiler refuses (registers)
                row["configs"][str(tuple(cfg))] = {"error": str(error)[:200]}
        timed = {k: v for k, v in row["configs"].items() if "s" in v}
        best = min(timed, key=lambda k: timed[k]["s"])
        row["best"] = best
        results[name] = row
        print(f"{name:18s} N={N:6d} K={K:6d}: torch {row['torch_s'] * 1e6:7.1f} us, best {best} "
              f"{timed[best]['s'] * 1e6:7.1f} us ({nbytes / timed[best]['s'] / 1e12:.2f} TB/s of "
              f"{kind} weights)", flush=True)
        del weights, dense
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


def triton_next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a not in ("--int8", "--int4")]
    main(args[0] if args else "bench_linear.json",
         kind="int8" if "--int8" in sys.argv else "int4" if "--int4" in sys.argv else "float")
