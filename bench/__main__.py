"""`python3 -m bench`, from a checkout of the repository: ours against the stock runtime on a
CUDA GPU with random full-size weights (bench.run), DiffuPlex against our AR path
(bench.diffuplex), or Step-Audio2's token2wav against the stock one (bench.token2wav). The
installed app does not carry bench/; this is its only command.

Errors the user can fix are one line and exit 2, through the app's command line's own runner."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    bench = argparse.ArgumentParser(prog="python3 -m bench", description=__doc__.splitlines()[0].strip("`"))
    bench.add_argument("--model", choices=["moshiko", "personaplex"], default="moshiko",
                       help="the shape of the full-size random weights it builds, by name (default moshiko); "
                            "ours against moshi==0.2.13")
    bench.add_argument("--frames", type=int, help="frames per run (default 1500 = 120 s; 375 with --diffuplex)")
    bench.add_argument("--plain-frames", type=int, default=150,
                       help="frames for ours with the optimizations off (slow: fewer; default 150)")
    bench.add_argument("--seed", type=int, default=0, help="seed of the random weights and of sampling (default 0)")
    bench.add_argument("--int8-frames", type=int, default=3000,
                       help="frames of the int8 runs (stock q8, ours int8 under a memory budget; default 3000, "
                            "the whole context; 0: none)")
    bench.add_argument("--fidelity-frames", type=int, default=200,
                       help="teacher-forced frames comparing ours and stock bf16 to stock fp32 (0: skip)")
    bench.add_argument("--output", help="JSON report (default bench_MODEL.json, or bench_diffuplex_MODEL.json, "
                                        "in the working folder)")
    bench.add_argument("--diffuplex", action="store_true",
                       help="instead: DiffuPlex against our AR path, with acceptance forced to 0..K frames per wake "
                            "(personaplex only; a full-size predictor with random weights)")
    bench.add_argument("--block", type=int, default=4,
                       help="with --diffuplex: K, frames one wake predicts (default 4)")
    bench.add_argument("--tail", choices=["step-audio2"],
                       help="instead: the speech tail, Step-Audio2's token2wav, ours against the stock minicpmo-utils "
                            "1.0.7 (full-size random weights; --seed and --output apply, default output "
                            "bench_token2wav.json)")
    return bench


def run(args) -> None:
    if args.tail:
        from .token2wav import run_token2wav_bench
        run_token2wav_bench(Path(args.output or "bench_token2wav.json"), args.seed)
        return
    if args.diffuplex:
        from .diffuplex import run_diffuplex_bench
        output = Path(args.output or f"bench_diffuplex_{args.model}.json")
        run_diffuplex_bench(args.model, args.frames or 375, args.block, args.seed, output)
        return
    from .run import run_bench
    output = Path(args.output or f"bench_{args.model}.json")
    run_bench(args.model, args.frames or 1500, args.plain_frames, args.seed, output, args.fidelity_frames,
              args.int8_frames)


def main(argv: list[str] | None = None) -> int:
    from app.cli.commands import run_command
    return run_command(run, build_parser().parse_args(argv), "python3 -m bench")


if __name__ == "__main__":
    sys.exit(main())
