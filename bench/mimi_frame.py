"""Where one streaming frame of the official Mimi spends its GPU time: the encode and the decode
of a frame (random weights, fp32, as a session runs them), each captured in a CUDA graph,
timed replayed, then profiled: every kernel name with its launches and µs per frame, heaviest
first (each kernel counted from where the one before it ended: bench.kernels.exclusive).

    python3 -m bench.mimi_frame OUT.json [--replays 50] [--top 25] [--launches]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from .kernels import add_profile_arguments, profile_parts


def measure(replays: int, top: int = 25, launches: bool = False) -> dict:
    from engine.families.moshi.mimi.codec import Mimi
    from engine.families.moshi.mimi.mimi_config_json import official_config
    from engine.state import FullStore

    torch.manual_seed(0)
    mimi = Mimi(official_config(), 8, "mimi").to("cuda").eval()
    store = FullStore(mimi.regions(), "cuda")
    pcm = torch.randn(1, 1, mimi.frame_size, device="cuda") * 0.1
    with torch.no_grad():
        codes = mimi.encode_step(pcm, store)
    return profile_parts({"encode": lambda: mimi.encode_step(pcm, store),
                          "decode": lambda: mimi.decode_step(codes, store)}, replays, top, launches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--replays", type=int, default=50, help="graph replays timed (default: 50)")
    add_profile_arguments(parser, top=25)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.exit(2, "bench.mimi_frame: needs a CUDA GPU\n")
    result = measure(args.replays, args.top, args.launches)
    result["command"] = f"python3 -m bench.mimi_frame OUT.json --replays {args.replays}"
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
