"""A wake's products (engine.kernels.rows_linear) against one AR step's (fused_linear) on the
temporal transformer's shapes, graph-replayed, each call reading a different copy of the weight
(the copies overflow L2), as a wake reads each layer's weights once. Per shape and weight kind:
M = 1, M = 9 and 17 (a wake at K = 4 and 8) plain and with the LoRA, and cuBLAS at the same M;
each also as a multiple of M = 1's (target: a wake's row <= 1.05x). Writes JSON.

    python -m tests.gpu.bench_rows_linear OUT.json [--int8 | --int4]   # default: bf16 weights
    python -m tests.gpu.bench_rows_linear OUT.json --sweep             # also rows_linear's tiles

`--sweep` times every configuration of CONFIGS for M = 9 and prints the best against the one
`rows_linear._config` picks: the data for its rule.
"""
from __future__ import annotations

import functools
import itertools
import json
import sys

import torch
from torch.nn import functional as F

from bench.graph_timing import replay_ms
from engine.kernels import fused_linear, rows_linear
from tests.gpu.bench_linear import CALLS, L2_BYTES, SHAPES, _dense, _weights

TEMPORAL = ["temporal qkv", "temporal out", "temporal ffn in", "temporal ffn out"]
WAKES = {9: 4, 17: 8}  # rows: the masked future rows K a wake of 2K + 1 rows corrects
RANK = 8
DEVICE = "cuda"
CONFIGS = [rows_linear._Config(0, bn, bk, 4, 3, split)
           for bn, bk, split in itertools.product((16, 32, 64), (128, 256), (1, 2, 4, 8))]
"""Tiles and splits of K to sweep (BM stays rows_linear's: 16 or 32 rows); int4 takes
BK // 64 groups an iteration."""


def _time(fn, weights, x) -> float:
    """Seconds per call, replaying a graph of CALLS calls over rotating weight copies."""
    def calls():
        for i in range(CALLS):
            fn(x, weights[i % len(weights)])

    return replay_ms(calls, 10) / 1000 / CALLS


def _lora(N: int, K: int, rows: int) -> tuple:
    a = (torch.randn(RANK, K, device=DEVICE) / K ** 0.5).bfloat16()
    return a, (torch.randn(N, RANK, device=DEVICE) / RANK).bfloat16(), 2.0, rows


def _lora_ref(x: torch.Tensor, lora: tuple) -> torch.Tensor:
    """The correction in fp64, zero above the corrected rows."""
    a, b, scale, rows = lora
    out = torch.zeros(x.shape[0], b.shape[0], dtype=torch.float64, device=x.device)
    out[-rows:] = (x[-rows:].double() @ a.double().T) @ (b.double() * scale).T
    return out


def _sweep(entry: dict, x: torch.Tensor, weights: list, lora: tuple) -> None:
    """Every configuration's time and error (against the chosen one's result) into entry."""
    chosen, picked = rows_linear.linear(x, weights[0], lora=lora), rows_linear._config
    entry["configs"] = {}
    try:
        for cfg in CONFIGS:
            rows_linear._config = lambda M, *shape, cfg=cfg: cfg._replace(bm=16 if M <= 16 else 32)
            try:
                err = (rows_linear.linear(x, weights[0], lora=lora).float() - chosen.float()).abs().max().item()
                entry["configs"][str(tuple(cfg)[1:])] = {
                    "s": _time(functools.partial(rows_linear.linear, lora=lora), weights, x), "diff": err}
            except Exception as error:  # a configuration the compiler refuses (registers, shared memory)
                entry["configs"][str(tuple(cfg)[1:])] = {"error": str(error)[:200]}
    finally:
        rows_linear._config = picked
    timed = {k: v for k, v in entry["configs"].items() if "s" in v}
    entry["best"] = min(timed, key=lambda k: timed[k]["s"])


def _row(name: str, kind: str, sweep: bool) -> dict:
    N, K, dtype = SHAPES[name]
    nbytes = N * K * {"int8": 1, "int4": 0.5}.get(kind, dtype.itemsize)
    copies = max(2, min(CALLS, -(-L2_BYTES // int(nbytes))))
    weights = _weights(N, K, dtype, kind, copies)
    dense = [_dense(w).to(dtype) for w in weights[:2]] if kind != "float" else weights
    ref_w = _dense(weights[0]).double()
    row = {}
    for M in (1, *WAKES):
        x = torch.randn(M, K, device=DEVICE).to(dtype)
        ref = F.linear(x.double(), ref_w)
        entry = {"torch_s": _time(lambda a, w: F.linear(a, w), dense, x)}
        kernel = fused_linear.linear if M == 1 else rows_linear.linear
        entry["s"] = _time(kernel, weights, x)
        entry["max_err"] = (kernel(x, weights[0]).double() - ref).abs().max().item()
        if M in WAKES:
            lora = _lora(N, K, WAKES[M])
            with_lora = functools.partial(rows_linear.linear, lora=lora)
            entry["lora_s"] = _time(with_lora, weights, x)
            entry["lora_max_err"] = (with_lora(x, weights[0]).double() - ref - _lora_ref(x, lora)).abs().max().item()
            if sweep and min(WAKES) == M:
                _sweep(entry, x, weights, lora)
        row[M] = entry
    del weights, dense
    torch.cuda.empty_cache()
    return row


def main(path: str, kind: str = "float", sweep: bool = False) -> None:
    results = {}
    for name in TEMPORAL:
        row = results[name] = _row(name, kind, sweep)
        one = row[1]["s"]
        parts = [f"M=1 {one * 1e6:6.1f} us (torch {row[1]['torch_s'] * 1e6:6.1f})"]
        for M in WAKES:
            e = row[M]
            parts.append(f"M={M} {e['s'] * 1e6:6.1f} us = {e['s'] / one:4.2f}x, +LoRA {e['lora_s'] / one:4.2f}x "
                         f"(torch {e['torch_s'] / one:4.2f}x)")
        errs = max(max(e["max_err"], e.get("lora_max_err", 0.0)) for e in row.values())
        print(f"{name:17s} {kind}: " + "; ".join(parts) + f"; max err {errs:.3g}", flush=True)
        for M in (min(WAKES),) if sweep else ():
            best = row[M]["best"]
            print(f"  M={M} best (BN, BK, warps, stages, split) {best}: {row[M]['configs'][best]['s'] / one:4.2f}x "
                  f"against the chosen {row[M]['lora_s'] / one:4.2f}x", flush=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a not in ("--int8", "--int4", "--sweep")]
    main(args[0] if args else "bench_rows_linear.json",
         kind="int8" if "--int8" in sys.argv else "int4" if "--int4" in sys.argv else "float",
         sweep="--sweep" in sys.argv)
