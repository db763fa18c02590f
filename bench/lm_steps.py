"""Where the LM's two stages of one frame spend their GPU time, at a model's full size (random
weights, bf16 on CUDA, fused layers as a session runs them): the backbone step (temporal
transformer, output norm, text head) at a given context length, and the depformer's steps
with their sampling; with `--wake K`, also a DiffuPlex wake of the backbone at the same
context (2K + 1 positions, a rank-16 LoRA on the K future ones, as bench --diffuplex draws
it), so a wake and an AR step are compared kernel by kernel. Each is captured in a CUDA
graph, timed replayed, then profiled: every kernel name with its launches and µs per frame,
heaviest first (each kernel counted from where the one before it ended:
bench.kernels.exclusive).

    python3 -m bench.lm_steps OUT.json [--model moshiko] [--context 1500] [--wake K] [--top 20] [--launches]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from .kernels import add_profile_arguments, profile_parts

REPLAYS = 50


def _model(name: str):
    from engine.families.moshi.lm.lm_config import CONFIGS
    from engine.families.moshi.lm.moshi_lm import MoshiLM

    torch.manual_seed(0)
    lm = MoshiLM(CONFIGS[name])
    for p in lm.parameters():
        p.data.normal_(0, 0.02)
    return lm.to("cuda", torch.bfloat16).eval()


def _adapter(lm, future: int):
    """A rank-16 predictor on every target, B drawn too (as bench.diffuplex draws it), bound to
    the last `future` rows of a wake."""
    from engine.families.moshi.diffuplex.predictor import new_predictor

    from .diffuplex import RANK

    predictor = new_predictor(lm.cfg, rank=RANK, block=future)
    with torch.no_grad():
        for b in predictor.lora_b.values():
            b.normal_(0, 1e-3)
    return predictor.to("cuda", torch.bfloat16).at_last(future)


def measure(name: str, context: int, top: int = 20, launches: bool = False, wake: int = 0) -> dict:
    from engine.families.moshi.lm.token_sampling import SamplingParams, sample
    from engine.state import FullStore

    lm = _model(name)
    store = FullStore(lm.regions(2 * wake + 1), "cuda")
    kv = store[lm.transformer.kv_region]
    kv.normal_(0, 1)  # keys and values for the context the step attends to
    hidden = torch.randn(1, 1, lm.cfg.dim, device="cuda", dtype=torch.bfloat16)
    audio = SamplingParams(0.8, 250)

    def backbone():
        store[lm.transformer.pos_region].fill_(context)
        lm.backbone(hidden, store)

    def depformer():
        lm.restart_depformer(store)
        prev = torch.zeros(1, dtype=torch.int64, device="cuda")
        for k in range(lm.cfg.dep_q):  # drawing from the default generator, which a graph takes as it is
            prev = sample(lm.depformer_step(k, prev, hidden, store), audio, None)

    parts = {"backbone": backbone, "depformer": depformer}
    if wake:
        rows = torch.randn(1, 2 * wake + 1, lm.cfg.dim, device="cuda", dtype=torch.bfloat16)
        adapter = _adapter(lm, wake)

        def wake_step():
            store[lm.transformer.pos_region].fill_(context)
            lm.backbone(rows, store, adapter, future=wake)

        parts[f"wake of {2 * wake + 1} positions"] = wake_step
    return {"model": name, "context": context, "wake": wake, **profile_parts(parts, REPLAYS, top, launches)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--model", default="moshiko", help="LM configuration (default: moshiko)")
    parser.add_argument("--context", type=int, default=1500, help="positions the backbone attends to (default: 1500)")
    parser.add_argument("--wake", type=int, default=0, metavar="K",
                        help="also a DiffuPlex wake of K future frames (2K + 1 positions, its LoRA)")
    add_profile_arguments(parser, top=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.exit(2, "bench.lm_steps: needs a CUDA GPU\n")
    result = measure(args.model, args.context, args.top, args.launches, args.wake)
    result["command"] = (f"python3 -m bench.lm_steps OUT.json --model {args.model} --context {args.context}"
                         + (f" --wake {args.wake}" if args.wake else ""))
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
