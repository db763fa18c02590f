"""What 4-bit weights cost, beside bitsandbytes' 4-bit quantizers at the same group size.

- matrices: random weights quantized each way; the relative error of the weights and of their
  product with random rows, per group size;
- teacher-forced (bench/fidelity.py's measure): the LM with its linear weights quantized each
  way against its float weights on the same token history (logits' error, top-1 agreement).
  "ours int4" is the int4 path itself; the others are the float LM with weights rounded as each
  quantizer rounds them (ours, min/max with zero points, bnb nf4 / fp4, and ours int8 for scale).

On random weights these compare methods, not a real checkpoint's quality. Run
`python -m bench.int4_quality --model demo --device cpu`, or `--shape moshiko --groups --matrix 0`
on a CUDA GPU (full-size random weights written by the stock runtime; needs moshi).
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from engine.weights.int4 import dequantize4, quantize_groups
from engine.weights.int8 import linear_weight_names

from .fidelity import _Ours, _teacher_forced

GROUPS = (32, 64, 128)


def zero_point_rounding(w: torch.Tensor, group: int) -> torch.Tensor:
    """w [N, K] rounded to 16 levels between each group's min and max (bf16 scale and zero); a
    last group shorter than `group` over the inputs it has."""
    n, k = w.shape
    if k % group:
        return torch.cat([zero_point_rounding(w[:, i:i + group], min(group, k - i)) for i in range(0, k, group)], 1)
    g = w.float().view(n, k // group, group)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    s = ((hi - lo) / 15).bfloat16().float()
    s = torch.where(s == 0, 1.0, s)
    z = torch.round(-lo / s).clamp(0, 15)
    return ((torch.round(g / s) + z).clamp(0, 15) - z).mul(s).view(n, k)


def bnb_rounding(w: torch.Tensor, kind: str, group: int = 64) -> torch.Tensor:
    """What bitsandbytes' 4-bit layers multiply by: `kind` ("nf4", "fp4") at blocksize `group`."""
    import bitsandbytes.functional as bnb

    packed, state = bnb.quantize_4bit(w.contiguous(), blocksize=group, quant_type=kind)
    return bnb.dequantize_4bit(packed, state).to(w.dtype)


def roundings(group: int) -> dict:
    """name -> a function rounding a float weight [N, K] to what that quantizer multiplies by."""
    return {f"ours int4 g{group}": lambda w: dequantize4(quantize_groups(w, group)).to(w.dtype),
            f"ours int4 g{group}, no scale search":
                lambda w: dequantize4(quantize_groups(w, group, (1.0,))).to(w.dtype),
            f"zero points g{group}": lambda w: zero_point_rounding(w, group).to(w.dtype),
            f"bnb nf4 g{group}": lambda w: bnb_rounding(w, "nf4", group),
            f"bnb fp4 g{group}": lambda w: bnb_rounding(w, "fp4", group)}


@torch.no_grad()
def matrix_errors(size: int = 4096, groups=GROUPS, seed: int = 0, device: str = "cpu") -> dict:
    g = torch.Generator(device).manual_seed(seed)
    w = (torch.randn(size, size, generator=g, device=device) * 0.02).bfloat16().float()
    x = torch.randn(64, size, generator=g, device=device).bfloat16().float()
    ref = x @ w.T
    out = {}
    for group in groups:
        for name, rounding in roundings(group).items():
            wq = rounding(w).float()
            out[name] = {"weight_rel_err": ((wq - w).norm() / w.norm()).item(),
                         "product_rel_err": ((x @ wq.T - ref).norm() / ref.norm()).item(),
                         "bits_per_weight": 4 + (16 if name.startswith("ours") else 32) / group
                         + (16 / group if name.startswith("zero") else 0)}
    return {"size": size, "seed": seed, "errors": out}


def _rounded_lm(model_dir, device, rounding):
    """The float LM with each linear weight replaced by what `rounding` gives."""
    from engine import load_model

    lm = load_model(model_dir, device=device).lm
    for _, module in lm.named_modules():
        for name in linear_weight_names(module):
            w = getattr(module, name)
            w.copy_(rounding(w.data))
    return lm


@torch.no_grad()
def measure(model_dir, frames: int, seed: int = 0, device: str = "cpu", groups=()) -> dict:
    """Teacher-forced: ours int4 and int8, bitsandbytes' NF4 and FP4 at blocksize 64, and (per
    group size in `groups`) every rounding of `roundings`, each LM against the float LM of
    `model_dir`."""
    from engine import load_model
    from engine.state import FullStore

    def ours(lm):
        return _Ours(lm, FullStore(lm.regions(), device))

    reference = ours(load_model(model_dir, device=device).lm)
    pairs = {"ours int4": (reference, ours(load_model(model_dir, device=device, weights="int4").lm)),
             "ours int8": (reference, ours(load_model(model_dir, device=device, weights="int8").lm))}
    # bitsandbytes blocks the flattened tensor: across rows where a row is shorter than a block.
    named = {"bnb nf4": lambda w: bnb_rounding(w, "nf4"), "bnb fp4": lambda w: bnb_rounding(w, "fp4")}
    for group in groups:
        named.update(roundings(group))
    for name, rounding in named.items():
        pairs[name] = (reference, ours(_rounded_lm(model_dir, device, rounding)))
    cfg = reference.lm.cfg
    frames = min(frames, cfg.context)
    runtimes = _teacher_forced(pairs, cfg, frames, seed, device)
    return {"frames": frames, "reference": f"the same LM with float weights ({str(reference.lm.dtype)[6:]})",
            "runtimes": runtimes}


def measure_demo(frames: int = 200, seed: int = 0, groups=()) -> dict:
    from engine.files.paths import DEMO_MODEL_DIR

    return measure(DEMO_MODEL_DIR, frames, seed, "cpu", groups)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", help="a checkpoint folder or 'demo'")
    where.add_argument("--shape", choices=("moshiko", "personaplex"), help="full-size random weights (CUDA)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--groups", type=int, nargs="*", default=list(GROUPS),
                        help="group sizes of the float roundings compared (none: `--groups` alone, which a "
                             "full-size LM needs to fit: each rounding is a float LM of its own)")
    parser.add_argument("--matrix", type=int, default=4096, help="size of the random matrices (0: skip)")
    parser.add_argument("--output", type=Path, required=True, help="the JSON report to write")
    args = parser.parse_args(argv)
    report = {"device": args.device, "torch": torch.__version__}
    if args.matrix:
        report["matrices"] = matrix_errors(args.matrix, args.groups, args.seed, args.device)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model  # "demo" or a folder: what load_model takes
        if args.shape:
            from .run import SHAPES
            from .stock import write_stock_checkpoint
            model_dir = Path(tmp)
            write_stock_checkpoint(model_dir, SHAPES[args.shape], seed=args.seed)
        report["teacher_forced"] = measure(model_dir, args.frames, args.seed, args.device, args.groups)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    from .fidelity import format_fidelity
    print(format_fidelity(report["teacher_forced"]))


if __name__ == "__main__":
    main()
