"""The stock runtime (Kyutai's `moshi` 0.2.13, its CUDA graphs on) driven frame by frame.

Builds the full-size model with random weights on the GPU and hands out the same weights
in the official on-disk layout, so ours can load exactly what the stock runtime runs.
Per-stage times come from CUDA events around the stock runtime's own graphed calls.
"""
from __future__ import annotations

import re

import numpy as np
import torch

from .timing import FrameTimer

_SPLIT = re.compile(r"^(.*)\.(in_projs|out_projs)\.(\d+)\.weight$")


def official_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Stack the reference's split attention weights back as stored on disk, on the CPU."""
    out, stacks = {}, {}
    for key, value in state.items():
        m = _SPLIT.match(key)
        if m:
            prefix, kind, idx = m.groups()
            name = f"{prefix}.in_proj_weight" if kind == "in_projs" else f"{prefix}.out_proj.weight"
            stacks.setdefault(name, []).append((int(idx), value))
        else:
            out[key] = value.detach().to("cpu", copy=True)
    for name, parts in stacks.items():
        out[name] = torch.cat([t for _, t in sorted(parts, key=lambda p: p[0])]).to("cpu")
    return out


def build_stock(lm_kwargs: dict, mimi_config: dict, num_codebooks: int, device: str, seed: int):
    from moshi.models import loaders

    torch.manual_seed(seed)
    mimi = loaders.get_mimi(None, mimi_config, device=device, num_codebooks=num_codebooks)
    with torch.no_grad():  # the reference's fresh codebooks are all zero: give them entries
        for name, buf in mimi.named_buffers():
            if name.endswith("embedding_sum"):
                buf.normal_(0, 1)
            elif name.endswith("cluster_usage"):
                buf.uniform_(0.5, 1.5)
            elif name.endswith("_initialized"):
                buf.fill_(1)
    lm = loaders.get_moshi_lm(None, lm_kwargs=lm_kwargs, device=device, dtype=torch.bfloat16)
    return mimi.eval(), lm.eval()


class StockRunner:
    """encode -> LMGen.step -> decode, as the reference's own server loop does it."""

    def __init__(self, mimi, lm, sampling: dict):
        from moshi.models.lm import LMGen

        self.mimi, self.lm = mimi, lm
        self.gen = LMGen(lm, **sampling)
        self.timer = FrameTimer(["encode", "backbone", "depformer", "decode"])
        self._wrap_graphed_calls()

    def _wrap_graphed_calls(self):
        # LMGen builds its graphed callables when streaming starts; time them from outside.
        self._enter()
        state = self.gen._streaming_state
        main, depth = state.graphed_main, state.graphed_depth
        timer = self.timer

        def timed_main(*args):
            with timer.stage("backbone"):
                return main(*args)

        def timed_depth(*args):
            with timer.stage("depformer"):
                return depth(*args)

        state.graphed_main, state.graphed_depth = timed_main, timed_depth

    def _enter(self):
        self._mimi_ctx = self.mimi.streaming(1)
        self._gen_ctx = self.gen.streaming(1)
        self._mimi_ctx.__enter__()
        self._gen_ctx.__enter__()

    def close(self):
        self._gen_ctx.__exit__(None, None, None)
        self._mimi_ctx.__exit__(None, None, None)

    @torch.no_grad()
    def step(self, pcm: np.ndarray) -> np.ndarray:
        self.timer.begin()
        x = torch.from_numpy(pcm).to(self.lm.device).view(1, 1, -1)
        with self.timer.stage("encode"):
            codes = self.mimi.encode(x)
        tokens = self.gen.step(codes)
        if tokens is None:
            out = np.zeros_like(pcm)
        else:
            with self.timer.stage("decode"):
                wav = self.mimi.decode(tokens[:, 1:9])
            out = wav[0, 0].cpu().numpy()  # the frame's one host sync
        self.timer.end()
        return out
