"""Time ring attention against stock masked attention over the whole ring, both replayed
from CUDA graphs, at Moshi temporal scale (all 32 layers of one frame), a DiffuPlex wake's
9 queries and Mimi scale; then sweep the Triton kernels' tuning knobs (the split kernel's, the
merge's: by the last split program or a launch of its own, and for several queries the kernel
that serves them all from one program per chunk of keys), each result printed as it is measured.

Usage: python -m tests.gpu.bench_ring_attention OUT.json
"""
import itertools
import json
import sys

import torch
from torch.nn import functional as F

from engine.kernels.ring_attention_triton import triton_ring_attention
from engine.ops.attention import ring_attention
from tests.gpu.replay_timing import capture, replay_ms
from tests.gpu.ring_reference import ring_positions

SHAPES = {  # layers, heads, head dim, ring = context, queries per call
    "moshi_temporal": (32, 32, 128, 3000, 1),
    "diffuplex_wake": (32, 32, 128, 3000, 9),  # catch-up, current and K = 4 future positions
    "mimi_transformer": (8, 8, 64, 250, 2),
}
COPY_BYTES_PER_S = 4.3e12  # device-to-device copy rate measured on this kind (KINDS.md)


def _inputs(layers, H, D, ring, T):
    region = torch.randn(ring, layers, 2, H, D, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(1, H, T, D, device="cuda", dtype=torch.bfloat16)
    return region, q, torch.zeros(1, dtype=torch.int64, device="cuda")


def bench(name, layers, H, D, ring, T):
    """One graph per variant, captured once; only the position in device memory changes."""
    region, q, pos = _inputs(layers, H, D, ring, T)
    stock_k = torch.randn(layers, 1, H, ring, D, device="cuda", dtype=torch.bfloat16)  # moshi's layout
    stock_v = torch.randn_like(stock_k)

    def ours():
        for layer in range(layers):
            ring_attention(q, region[:, layer], pos, T, ring)

    def stock():
        pos_q = pos + torch.arange(T, device="cuda")
        pos_k = ring_positions(ring, pos, T)
        delta = pos_q.view(-1, 1) - pos_k.view(1, -1)
        mask = (pos_k.view(1, -1) >= 0) & (delta >= 0) & (delta < ring)
        for layer in range(layers):
            F.scaled_dot_product_attention(q, stock_k[layer], stock_v[layer], attn_mask=mask)

    ours_graph, stock_graph = capture(ours), capture(stock)
    rows = []
    for live in sorted({T, ring // 8, ring // 2, ring}):
        pos.fill_(live - T)
        floor_ms = live * layers * 2 * H * D * 2 / COPY_BYTES_PER_S * 1e3
        rows.append(dict(shape=name, live_entries=live, ours_ms=replay_ms(ours_graph),
                         stock_ms=replay_ms(stock_graph), kv_read_floor_ms=floor_ms))
    return rows


def _knobs(T):
    """The split kernel's knobs, and for several queries ring_attention_queries' kernel's."""
    for waves, block_n, warps in itertools.product((4, 8, 16), (16, 32), (1, 2, 4)):
        yield dict(waves=waves, block_n=block_n, num_warps=warps, fused_merge=True, per_query=True)
        for merge_warps in (1, 4):
            yield dict(waves=waves, block_n=block_n, num_warps=warps, merge_warps=merge_warps, fused_merge=False,
                       per_query=True)
    for waves, block_n, warps, merge_warps in itertools.product((4, 8, 16), (16, 32), (4, 8), (1, 4)):
        if T > 1:
            yield dict(waves=waves, block_n=block_n, num_warps=warps, merge_warps=merge_warps, per_query=False)


def sweep(name, layers, H, D, ring, T):
    region, q, pos = _inputs(layers, H, D, ring, T)
    rows = []
    for knobs in _knobs(T):

        def ours(knobs=knobs):
            for layer in range(layers):
                triton_ring_attention(q, region[:, layer], pos, T, ring, **knobs)

        graph = capture(ours)
        for live in (ring // 8, ring // 4, ring):  # 375, 750 (a two-minute bench's median frame), 3000
            pos.fill_(live - T)
            rows.append(dict(shape=name, live_entries=live, ms=replay_ms(graph, 20), **knobs))
            print(f"  {name:18} {live:5d} {rows[-1]['ms']:8.4f} ms  {knobs}", flush=True)  # a cut call keeps these
    return rows


def main(out_path):
    rows = [row for name, shape in SHAPES.items() for row in bench(name, *shape)]
    print(f"{'shape':18} {'live':>5} {'ours ms':>8} {'stock ms':>9} {'floor ms':>9}")
    for r in rows:
        print(f"{r['shape']:18} {r['live_entries']:5d} {r['ours_ms']:8.4f} {r['stock_ms']:9.4f} "
              f"{r['kv_read_floor_ms']:9.4f}")
    knobs = [row for name, shape in SHAPES.items() for row in sweep(name, *shape)]
    with open(out_path, "w") as f:
        json.dump(dict(default_knobs=rows, sweep=knobs), f, indent=1)
    print("fastest knobs per shape and live length (the engine's now: waves 16, block_n 16, warps 1, merged by "
          "the last split program; from 3 queries all queries a program, waves 4, block_n 16, warps 4, merge warps 1):")
    for key, group in itertools.groupby(sorted(knobs, key=lambda r: (r["shape"], r["live_entries"], r["ms"])),
                                        key=lambda r: (r["shape"], r["live_entries"])):
        for r in list(group)[:3]:
            merge = "merged by the last split" if r.get("fused_merge") else f"merge warps {r['merge_warps']}"
            print(f"  {key[0]:18} {key[1]:5d} {r['ms']:8.4f} ms  waves {r['waves']:2d} block_n {r['block_n']:2d} "
                  f"warps {r['num_warps']} {merge}{'' if r.get('per_query', True) else ', all queries a program'}")


if __name__ == "__main__":
    main(sys.argv[1])
