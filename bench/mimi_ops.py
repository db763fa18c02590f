"""How many operations Mimi's SEANet and quantizer dispatch in one streaming frame of the demo
codec: torch's formulas (ATen operations, views aside; on CUDA each is one kernel or more:
cuDNN's layout conversions, cdist's matrix-product route) against the kernels engine.ops picks
on CUDA (their launches, plus the ATen operations left around them). Runs the kernels under
Triton's interpreter on the CPU, so no GPU is needed:

    TRITON_INTERPRET=1 python3 -m bench.mimi_ops

Prints one JSON line: {piece: [torch ATen ops, kernel-path launches + ATen ops]}.
"""
from __future__ import annotations

import collections
import contextlib
import json
import os
import types
from unittest import mock

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from .frame_ops import UNCOUNTED


class _Counting(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types=(), args=(), kwargs=None):
        self.ops += not str(func).startswith(UNCOUNTED)
        return func(*args, **(kwargs or {}))


def _counted_launches(stack: contextlib.ExitStack, counter: collections.Counter) -> None:
    """Each kernel entry point counts its launches and runs uncounted (the interpreter's own
    tensor work is not the GPU's), for as long as `stack` is open."""
    import engine.kernels.codebooks as codebooks
    import engine.kernels.stream_conv as stream_conv
    import engine.kernels.stream_convtr as stream_convtr

    def wrap(module, name, launches):
        run = getattr(module, name)

        def counted(*args, **kwargs):
            counter["launches"] += launches(*args)
            with _disable_current_modes():
                return run(*args, **kwargs)
        stack.enter_context(mock.patch.object(module, name, counted))

    def conv_launches(x, tail, weight, bias, stride, dilation, *rest):  # the product, the partials' sum
        c_out, c_in, k = weight.shape                                     # where split, the tail's update
        t_out = ((0 if tail is None else tail.shape[-1]) + x.shape[-1] - (k - 1) * dilation - 1) // stride + 1
        return 1 + (stream_conv.tiles(c_out, t_out, c_in * k)[2] > 1) + (tail is not None)

    wrap(stream_conv, "stream_conv", conv_launches)
    # the product, the overlap-add, the partial sums' copy
    wrap(stream_convtr, "stream_conv_transpose", lambda x, partial, *rest: 2 + (partial is not None))
    wrap(codebooks, "nearest", lambda x, centroids: centroids.shape[0] + 2)  # the keys' fill and mask
    wrap(codebooks, "summed", lambda codes, centroids: 1)


def _frame(mimi, store, pcm: torch.Tensor, launches: collections.Counter) -> dict[str, int]:
    """Each piece's operations in one frame (its inputs computed outside the count)."""
    def counted(piece, *args) -> tuple[int, torch.Tensor]:
        launches.clear()
        with _Counting() as mode:
            out = piece(*args)
        return mode.ops + launches["launches"], out

    ops: dict[str, int] = {}
    ops["seanet encoder"], latent = counted(mimi.encoder, pcm, store)
    latent = mimi.encoder_transformer(latent, store)
    latent = latent if mimi.downsample is None else mimi.downsample(latent, store)
    ops["quantizer encode"], codes = counted(mimi.quantizer.encode, latent)
    ops["quantizer decode"], latent = counted(mimi.quantizer.decode, codes)
    latent = latent if mimi.upsample is None else mimi.upsample(latent, store)
    ops["seanet decoder"], _ = counted(mimi.decoder, mimi.decoder_transformer(latent, store), store)
    return ops


def count() -> dict[str, list[int]]:
    from engine.families.moshi.mimi import load_mimi
    from engine.files.paths import DEMO_MODEL_DIR, MIMI_NAME
    from engine.ops import codebooks, conv
    from engine.state import FullStore

    mimi = load_mimi(DEMO_MODEL_DIR / MIMI_NAME)
    rng = np.random.default_rng(0)
    pcm = [torch.from_numpy(rng.standard_normal((1, 1, mimi.frame_size)).astype(np.float32) * 0.1) for _ in range(3)]
    launches: collections.Counter = collections.Counter()
    result: dict[str, list[int]] = {}
    for kernels in (False, True):
        machine = types.SimpleNamespace(use_triton=lambda x, on=kernels: on)
        store = FullStore(mimi.regions())
        with contextlib.ExitStack() as stack, torch.no_grad():
            _counted_launches(stack, launches)
            for seam in (conv, codebooks):
                stack.enter_context(mock.patch.object(seam, "dispatch", machine))
            for chunk in pcm[:2]:  # the tails filled, as in a conversation
                mimi.decode_step(mimi.encode_step(chunk, store), store)
            for name, ops in _frame(mimi, store, pcm[2], launches).items():
                result.setdefault(name, []).append(ops)
    return result


def main() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("bench.mimi_ops runs the kernels under Triton's interpreter: set TRITON_INTERPRET=1")
    print(json.dumps(count()))


if __name__ == "__main__":
    main()
