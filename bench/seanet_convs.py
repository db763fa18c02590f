"""Each of SEANet's streaming convolutions, one by one, on CUDA: the official Mimi's shapes
(random weights, fp32), every convolution and transposed convolution of one encoded and decoded
frame, each timed graph-replayed as cuDNN runs it (torch's formula, TF32 as torch defaults) and
as our streaming kernels run it (engine.kernels.stream_conv, stream_convtr): as they run now, in
plain fp32 arithmetic rather than TF32, and a convolution with its depth split over up to four
programs a multiprocessor ("wide"). In a frame the LM's weights have just gone through the L2
cache, so each call here first overwrites a buffer larger than the cache (timed alone and
subtracted); --warm leaves the cache as the previous call left it.

    python3 -m bench.seanet_convs OUT.json [--calls 20] [--replays 20] [--warm]

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

VARIANTS = ("cudnn", "kernel", "kernel, fp32", "kernel, wide")
_FLUSH_BYTES = 256 << 20  # several times an H100/H200's 50 MB L2


def _layers(mimi, device) -> list[dict]:
    """Every streaming convolution and transposed convolution of one frame (ungrouped: Mimi's
    own upsampling, one filter a channel, stays on torch): its layer and copies of its inputs
    ("tail" a convolution's input tail, "partial" a transposed one's kept sums)."""
    import engine.families.moshi.mimi.streaming_conv as mimi_conv
    from engine.ops import conv as conv_ops
    from engine.state import FullStore

    calls, run, run_transposed = [], mimi_conv.streaming_conv, mimi_conv.streaming_conv_transpose

    def copy(t):
        return None if t is None else t.clone()

    def recorded(x, tail, layer, elu, residual):
        calls.append({"layer": layer, "x": x.clone(), "tail": copy(tail), "elu": elu, "residual": copy(residual)})
        return run(x, tail, layer, elu, residual)

    def recorded_transposed(x, partial, layer, elu):
        calls.append({"layer": layer, "x": x.clone(), "partial": copy(partial), "elu": elu})
        return run_transposed(x, partial, layer, elu)

    store = FullStore(mimi.regions(), device)
    plain = types.SimpleNamespace(use_triton=lambda x: False)
    with mock.patch.object(mimi_conv, "streaming_conv", recorded), \
            mock.patch.object(mimi_conv, "streaming_conv_transpose", recorded_transposed), \
            mock.patch.object(conv_ops, "dispatch", plain), torch.no_grad():
        pcm = torch.randn(1, 1, mimi.frame_size, device=device) * 0.1
        mimi.decode_step(mimi.encode_step(pcm, store), store)
    return [c for c in calls if c["layer"].groups == 1]


@contextlib.contextmanager
def _variant(name: str):
    from engine.kernels import stream_conv
    from engine.ops import conv as conv_ops

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(conv_ops, "dispatch",
                                              types.SimpleNamespace(use_triton=lambda x: name != "cudnn")))
        if name == "kernel, wide":
            stack.enter_context(mock.patch.object(stream_conv, "MAX_SPLIT", 32))
            stack.enter_context(mock.patch.object(stream_conv, "_BUSY", 4 * 132))
        if name == "kernel, fp32":
            stack.enter_context(mock.patch.object(stream_conv, "PRECISION", "ieee"))
        yield


def _time(call: dict, calls: int, replays: int, flush: torch.Tensor | None) -> float:
    """µs per call: `calls` calls captured in one graph, replayed (each after a flush of the
    L2 cache when `flush` is given, its time subtracted)."""
    from engine.ops.conv import streaming_conv, streaming_conv_transpose

    from .graph_timing import replay_ms

    state = call.get("tail", call.get("partial"))
    state = None if state is None else state.clone()

    def work(conv: bool = True):
        for _ in range(calls):
            if flush is not None:
                flush.add_(1)
            if conv and "partial" in call:
                streaming_conv_transpose(call["x"], state, call["layer"], call["elu"])
            elif conv:
                streaming_conv(call["x"], state, call["layer"], call["elu"], call["residual"])
    flushing = 0.0 if flush is None else replay_ms(lambda: work(conv=False), replays, warmup=2)
    return (replay_ms(work, replays, warmup=2) - flushing) * 1000 / calls


def measure(calls: int, replays: int, warm: bool) -> dict:
    from engine.families.moshi.mimi.codec import Mimi
    from engine.families.moshi.mimi.mimi_config_json import official_config
    from engine.kernels import stream_conv, stream_convtr

    torch.manual_seed(0)
    flush = None if warm else torch.zeros(_FLUSH_BYTES // 4, device="cuda")
    mimi = Mimi(official_config(), 8, "mimi").to("cuda").eval()
    rows = []
    with torch.no_grad():
        for i, call in enumerate(_layers(mimi, "cuda")):
            layer, t_in = call["layer"], call["x"].shape[-1]
            transposed = "partial" in call
            if transposed:
                c_in, c_out, k = layer.weight.shape
                t_out, split = layer.stride[0] * t_in, stream_convtr.tiles(c_out * k, t_in, c_in)[2]
            else:
                c_out, c_in, k = layer.weight.shape
                t_out = (0 if call["tail"] is None else call["tail"].shape[-1]) + t_in
                t_out = (t_out - (k - 1) * layer.dilation[0] - 1) // layer.stride[0] + 1
                split = stream_conv.tiles(c_out, t_out, c_in * k)[2]
            row = {"call": i, "transposed": transposed, "c_in": c_in, "c_out": c_out, "k": k,
                   "stride": layer.stride[0], "t_out": t_out, "weight_mb": round(layer.weight.numel() * 4 / 1e6, 3),
                   "split": split}
            for name in VARIANTS:
                with _variant(name):
                    row[name] = round(_time(call, calls, replays, flush), 2)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cache": "warm" if warm else "cold",
            "rows": rows,
            "sum_us": {name: round(sum(r[name] for r in rows), 1) for name in VARIANTS}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--calls", type=int, default=20, help="calls captured in one graph (default: 20)")
    parser.add_argument("--replays", type=int, default=20, help="graph replays timed (default: 20)")
    parser.add_argument("--warm", action="store_true", help="leave the L2 cache as the previous call left it")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.exit(2, "bench.seanet_convs: needs a CUDA GPU\n")
    result = measure(args.calls, args.replays, args.warm)
    result["command"] = (f"python3 -m bench.seanet_convs OUT.json --calls {args.calls} --replays {args.replays}"
                         + " --warm" * args.warm)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print("| call | c_in -> c_out (T: transposed) | k/stride | t_out | MB | split | " + " | ".join(VARIANTS) + " |")
    for r in result["rows"]:
        print(f"| {r['call']} | {r['c_in']} -> {r['c_out']}{' T' * r['transposed']} | {r['k']}/{r['stride']} | "
              f"{r['t_out']} | {r['weight_mb']} | {r['split']} | " + " | ".join(f"{r[n]:.1f}" for n in VARIANTS) + " |")
    print("sum, µs:", result["sum_us"])


if __name__ == "__main__":
    main()
