"""How many output rows a program of a fused product should take when the product applies an
RMSNorm in its pass (engine.kernels.fused_linear NORM_ROWS): every program reads the input row
and the norm's weights once for all its rows, so the more rows a program takes, the fewer
times they are read, and the fewer programs keep loads in flight. Times the temporal transformer (32 layers)
and the depformer (6 layers, 8 steps) at Moshi's sizes, bf16, random weights, fused layers
graph-replayed.

    python -m tests.gpu.bench_layers
"""
from __future__ import annotations

import torch

from bench.graph_timing import replay_ms
from engine.families.moshi.lm.lm_config import CONFIGS
from engine.kernels import fused_linear
from engine.state import FullStore
from engine.transformer import StreamingTransformer

ROWS = (2, 4, 8)


def _time(transformer: StreamingTransformer, steps: int) -> float:
    store = FullStore(transformer.regions(), "cuda")
    x = torch.randn(1, 1, transformer.cfg.d_model, device="cuda", dtype=torch.bfloat16)

    def frame():
        if transformer.cfg.clock == "fixed":
            store[transformer.pos_region].zero_()
        for step in range(steps):
            transformer(x, store, step=step)

    return replay_ms(frame, 20, warmup=3)


@torch.no_grad()
def main() -> None:
    cfg = CONFIGS["moshiko"]
    for name, tcfg, steps in (("temporal", cfg.temporal(), 1), ("depformer", cfg.depformer(), cfg.dep_q)):
        transformer = StreamingTransformer(tcfg, name)
        for p in transformer.parameters():
            p.data.normal_(0, 0.02)
        transformer = transformer.to("cuda", torch.bfloat16)
        for rows in ROWS:
            fused_linear.NORM_ROWS = rows
            print(f"{name:9s} {rows} rows a program with the norm {_time(transformer, steps):.3f} ms", flush=True)
        del transformer
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
