"""Where a fused product's prologue (norm, SiLU gate) should run: inside every program of the
product, or in a kernel of its own before it (engine.kernels.fused_linear
SEPARATE_PROLOGUE_BYTES). Times the temporal transformer (32 layers) and the depformer
(6 layers, 8 steps) at Moshi's sizes, bf16, random weights, fused layers graph-replayed.

    python -m tests.gpu.bench_layers
"""
from __future__ import annotations

import torch

from bench.graph_timing import replay_ms
from engine.config.lm import CONFIGS
from engine.kernels import fused_linear
from engine.state import FullStore
from engine.transformer import StreamingTransformer

THRESHOLDS = {"all in the product": 1 << 62, "own kernel above 16 MiB of reads": 16 << 20,
              "own kernel always": 0}


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
        for label, threshold in THRESHOLDS.items():
            fused_linear.SEPARATE_PROLOGUE_BYTES = threshold
            print(f"{name:9s} {label:32s} {_time(transformer, steps):.3f} ms", flush=True)
        del transformer
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
