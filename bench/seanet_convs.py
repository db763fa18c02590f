"""Each of SEANet's streaming convolutions, one by one, on CUDA: the official Mimi's shapes
(random weights, fp32), every convolution of one encoded and decoded frame, each timed
graph-replayed as cuDNN runs it (torch's formula, TF32 as torch defaults), as our streaming
kernel runs it without splitting its depth, and as it runs it now (the depth split where the
layer has few output tiles: engine.kernels.stream_conv.tiles). The convolutions over
SMALL_CONV_BYTES of weights, which stay on cuDNN, are timed on the kernel too: the figures for
moving that line.

    python3 -m bench.seanet_convs OUT.json [--calls 20] [--replays 20]

Prints a table (µs per call, the mean over the replays) and writes it as JSON.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import types
from pathlib import Path
from unittest import mock

import torch

VARIANTS = ("cudnn", "kernel, unsplit", "kernel")


def _layers(mimi, device) -> list[dict]:
    """Every streaming convolution of one frame: its layer and copies of its inputs."""
    import engine.mimi.conv as mimi_conv
    from engine.ops import conv as conv_ops
    from engine.state import FullStore

    calls, run = [], mimi_conv.streaming_conv

    def recorded(x, tail, layer, elu, residual):
        calls.append({"layer": layer, "x": x.clone(), "tail": None if tail is None else tail.clone(), "elu": elu,
                      "residual": None if residual is None else residual.clone()})
        return run(x, tail, layer, elu, residual)

    store = FullStore(mimi.regions(), device)
    plain = types.SimpleNamespace(use_triton=lambda x: False)
    with mock.patch.object(mimi_conv, "streaming_conv", recorded), mock.patch.object(conv_ops, "dispatch", plain), \
            torch.no_grad():
        pcm = torch.randn(1, 1, mimi.frame_size, device=device) * 0.1
        mimi.decode_step(mimi.encode_step(pcm, store), store)
    return [c for c in calls if c["layer"].groups == 1 and isinstance(c["layer"], torch.nn.Conv1d)]


@contextlib.contextmanager
def _variant(name: str):
    from engine.kernels import stream_conv
    from engine.ops import conv as conv_ops

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(conv_ops, "dispatch",
                                              types.SimpleNamespace(use_triton=lambda x: name != "cudnn")))
        stack.enter_context(mock.patch.object(conv_ops, "SMALL_CONV_BYTES", 1 << 40))
        if name == "kernel, unsplit":
            stack.enter_context(mock.patch.object(stream_conv, "MAX_SPLIT", 1))
        yield


def _time(call: dict, calls: int, replays: int) -> float:
    """µs per call: `calls` calls captured in one graph, replayed."""
    from engine.ops.conv import streaming_conv

    from .graph_timing import replay_ms

    tail = None if call["tail"] is None else call["tail"].clone()

    def work():
        for _ in range(calls):
            streaming_conv(call["x"], tail, call["layer"], call["elu"], call["residual"])
    return replay_ms(work, replays, warmup=2) * 1000 / calls


def measure(calls: int, replays: int) -> dict:
    from engine.config.mimi_json import official_config
    from engine.kernels.stream_conv import tiles
    from engine.mimi.codec import Mimi
    from engine.ops.conv import SMALL_CONV_BYTES

    torch.manual_seed(0)
    mimi = Mimi(official_config(), 8, "mimi").to("cuda").eval()
    rows = []
    with torch.no_grad():
        for i, call in enumerate(_layers(mimi, "cuda")):
            layer = call["layer"]
            c_out, c_in, k = layer.weight.shape
            t_out = (0 if call["tail"] is None else call["tail"].shape[-1]) + call["x"].shape[-1]
            t_out = (t_out - (k - 1) * layer.dilation[0] - 1) // layer.stride[0] + 1
            row = {"call": i, "c_in": c_in, "c_out": c_out, "kernel": k, "stride": layer.stride[0], "t_out": t_out,
                   "weight_mb": round(layer.weight.numel() * 4 / 1e6, 3),
                   "on_kernel_now": layer.weight.numel() * 4 <= SMALL_CONV_BYTES,
                   "split": tiles(c_out, t_out, c_in * k)[2]}
            for name in VARIANTS:
                with _variant(name):
                    row[name] = round(_time(call, calls, replays), 2)
            print(json.dumps(row), flush=True)
            rows.append(row)
    now = {name: round(sum(r[name] for r in rows if r["on_kernel_now"]) + sum(
        r["cudnn"] for r in rows if not r["on_kernel_now"]), 1) for name in VARIANTS[1:]}
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows,
            "sum_us": {name: round(sum(r[name] for r in rows), 1) for name in VARIANTS},
            "sum_us_as_dispatched": {"cudnn": round(sum(r["cudnn"] for r in rows), 1), **now}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--calls", type=int, default=20, help="calls captured in one graph (default: 20)")
    parser.add_argument("--replays", type=int, default=20, help="graph replays timed (default: 20)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.exit(2, "bench.seanet_convs: needs a CUDA GPU\n")
    result = measure(args.calls, args.replays)
    result["command"] = f"python3 -m bench.seanet_convs OUT.json --calls {args.calls} --replays {args.replays}"
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print("| call | c_in -> c_out | kernel/stride | t_out | MB | split | " + " | ".join(VARIANTS) + " |")
    for r in result["rows"]:
        print(f"| {r['call']} | {r['c_in']} -> {r['c_out']} | {r['kernel']}/{r['stride']} | {r['t_out']} | "
              f"{r['weight_mb']} | {r['split']} | " + " | ".join(f"{r[n]:.1f}" for n in VARIANTS) + " |")
    print("sum, µs:", result["sum_us"], "as dispatched:", result["sum_us_as_dispatched"])


if __name__ == "__main__":
    main()
