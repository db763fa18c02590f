"""Where MiniCPM-o's language model spends a unit's GPU time, at Qwen3-8B's full size (random weights,
bf16 on CUDA, the passes a conversation runs): a pass of 1 row (a decode step, `<unit>`), 2 rows (a
unit's finalize) and 10 rows (a second's audio) at a given context, as torch's ops and as the fused
layers the conversation runs (with how far their logits differ), and the host time of choosing a
token. Each pass is captured in a CUDA graph, timed replayed, then profiled kernel by kernel
(bench.kernels). With `--products`, each projection alone, ours (engine.ops.linear) against torch's
(cuBLAS), each call reading another copy of the weight as a pass reads each layer's once.

    python3 -m bench.qwen3_passes OUT.json [--context 300] [--layers 36] [--products] [--top 20]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch.nn import functional as F

from .graph_timing import replay_ms
from .kernels import add_profile_arguments, profile_parts

REPLAYS = 20
ROWS = (1, 2, 10)
HIDDEN, INTERMEDIATE, VOCAB = 4096, 12288, 151936
CONFIG = dict(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_attention_heads=32, num_key_value_heads=8,
              head_dim=128, rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=40960,
              tie_word_embeddings=False, vocab_size=VOCAB)
"""Qwen3-8B's decoder (engine.families.minicpmo.weight_shapes cites the values)."""
PRODUCTS = {"q": (4096, HIDDEN), "k, v": (1024, HIDDEN), "o": (HIDDEN, 4096), "gate, up": (INTERMEDIATE, HIDDEN),
            "down": (HIDDEN, INTERMEDIATE), "lm_head": (VOCAB, HIDDEN)}
LAYER_WEIGHTS = {"self_attn.q_proj.weight": PRODUCTS["q"], "self_attn.k_proj.weight": PRODUCTS["k, v"],
                 "self_attn.v_proj.weight": PRODUCTS["k, v"], "self_attn.o_proj.weight": PRODUCTS["o"],
                 "mlp.gate_proj.weight": PRODUCTS["gate, up"], "mlp.up_proj.weight": PRODUCTS["gate, up"],
                 "mlp.down_proj.weight": PRODUCTS["down"]}
NORMS = {"self_attn.q_norm.weight": 128, "self_attn.k_norm.weight": 128, "input_layernorm.weight": HIDDEN,
         "post_attention_layernorm.weight": HIDDEN}


def llm_weights(layers: int, device: torch.device) -> dict[str, torch.Tensor]:
    """The checkpoint's `llm.` tensors, scaled as bench.minicpmo_weights initialises its full-size one."""
    g = torch.Generator(device=device).manual_seed(0)

    def normal(shape, mean: float, std: float) -> torch.Tensor:
        return (torch.randn(shape, generator=g, device=device) * std + mean).to(torch.bfloat16)

    w = {"llm.model.embed_tokens.weight": normal((VOCAB, HIDDEN), 0.0, 1.0),
         "llm.lm_head.weight": normal((VOCAB, HIDDEN), 0.0, 3.0 / 64),
         "llm.model.norm.weight": normal((HIDDEN,), 1.0, 0.1)}
    for i in range(layers):
        w.update({f"llm.model.layers.{i}.{name}": normal(shape, 0.0, shape[1] ** -0.5)
                  for name, shape in LAYER_WEIGHTS.items()})
        w.update({f"llm.model.layers.{i}.{name}": normal((n,), 1.0, 0.1) for name, n in NORMS.items()})
    return w


def passes(layers: int, context: int) -> tuple[dict, dict]:
    """The passes run as torch's ops and as the fused layers (the conversation's, on its stacked products),
    over the same random cache, and how far the fused logits are from torch's: {rows: [max |difference| /
    max |logit|, same argmax]}."""
    from engine.families.minicpmo.qwen3 import Qwen3Model
    from engine.families.minicpmo.qwen3_weights import stack_products

    device = torch.device("cuda")
    config = dict(CONFIG, num_hidden_layers=layers)
    weights = llm_weights(layers, device)
    models = {"torch ops": Qwen3Model(config, weights, device, torch.bfloat16, capacity=context + 512)}
    stack_products(weights, "llm.model.layers.", layers)
    models["fused"] = Qwen3Model(config, weights, device, torch.bfloat16, capacity=context + 512)
    assert models["fused"].fuses and not models["torch ops"].fuses
    for model in models.values():
        torch.manual_seed(1)
        model.keys.normal_(0, 1)  # keys and values for the context the passes attend to
        model.values.normal_(0, 1)
    parts, agreement = {}, {}
    for rows in ROWS:
        x = torch.randn(rows, HIDDEN, device=device, dtype=torch.bfloat16)
        for kind, model in models.items():
            def work(x=x, rows=rows, model=model):
                model.position.fill_(context)
                logits, _ = model._pass(x, model.span(context + rows), last_only=False)
                return logits

            parts[f"pass of {rows} rows, {kind}"] = work
        with torch.no_grad():
            ours, theirs = (parts[f"pass of {rows} rows, {kind}"]() for kind in models)
        agreement[rows] = [float((ours - theirs).abs().max() / theirs.abs().max()),
                           bool(torch.equal(ours.argmax(-1), theirs.argmax(-1)))]
        print(f"{rows} rows: fused logits off torch's by {agreement[rows][0]:.2e} of the largest, "
              f"same argmax: {agreement[rows][1]}", flush=True)
    return parts, agreement


def decoding_ms(calls: int = 50) -> float:
    """Host milliseconds per text token chosen (text_decoding.TextDecoder at the product's settings) from a
    [1, V] row of logits on the GPU: what a decode step adds to its pass."""
    import time

    from engine.families.minicpmo.protocol_settings import UnitSettings
    from engine.families.minicpmo.text_decoding import TextDecoder

    decoder = TextDecoder(UnitSettings(), chunk_eos=VOCAB - 1, turn_eos=VOCAB - 2, eos=VOCAB - 3,
                          forbidden=[VOCAB - 4])
    generator = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(1, VOCAB, device="cuda") * 3
    decoder.decode(logits, generator)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        decoder.decode(logits, generator)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1000 / calls


def products(device: torch.device) -> dict:
    """{name: {rows: [ours ms, torch ms]}} per projection, graph-replayed over rotating weight copies."""
    from engine.ops.linear import linear

    out = {}
    for name, (n, k) in PRODUCTS.items():
        copies = max(2, (512 << 20) // (n * k * 2) + 1)  # more than the L2 cache holds
        weights = [torch.randn(n, k, device=device).to(torch.bfloat16) for _ in range(copies)]
        out[name] = {}
        for rows in ROWS:
            x = torch.randn(rows, k, device=device, dtype=torch.bfloat16)
            times = []
            for product in (linear, F.linear):
                def calls(product=product, x=x, weights=weights):
                    for w in weights:
                        product(x, w)

                times.append(round(replay_ms(calls, 10) / len(weights), 4))
            out[name][rows] = times
            print(f"{name:9} [{n} x {k}] {rows:2} rows: ours {times[0]:.4f} ms, torch {times[1]:.4f} ms", flush=True)
        del weights
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--context", type=int, default=300, help="positions the passes attend to (default: 300)")
    parser.add_argument("--layers", type=int, default=36, help="decoder layers (default: Qwen3-8B's 36)")
    parser.add_argument("--products", action="store_true", help="also each projection alone, ours and torch's")
    add_profile_arguments(parser, top=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.exit(2, "bench.qwen3_passes: needs a CUDA GPU\n")
    from engine.kernels import split_sums

    split_sums.ready(torch.device("cuda"))
    result = {"context": args.context, "layers": args.layers}
    if args.products:
        result["products"] = products(torch.device("cuda"))
    result["decoding_ms"] = decoding_ms()
    print(f"choosing a text token: {result['decoding_ms']:.3f} ms of host time", flush=True)
    with torch.no_grad():
        parts, result["fused_agreement"] = passes(args.layers, args.context)
        result.update(profile_parts(parts, REPLAYS, args.top, args.launches))
    if not args.launches:  # every launch of six passes: most of a megabyte of JSON
        for part in parts:
            del result[part]["launches"]
    result["command"] = (f"python3 -m bench.qwen3_passes OUT.json --context {args.context} --layers {args.layers}"
                         + (" --products" if args.products else ""))
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
