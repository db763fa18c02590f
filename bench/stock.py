"""The stock runtime (Kyutai's `moshi` 0.2.13, its CUDA graphs on) driven frame by frame.

Builds the full-size model with random weights on the GPU and writes them in the official
on-disk layout, so ours loads exactly what the stock runtime runs.
Per-stage times come from CUDA events around the stock runtime's own graphed calls.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from engine.families.moshi.frame import FRAME_KEYS
from engine.loading.safetensors_files import official_layout
from engine.period import FRAME_SIZE
from engine.runtime.timing import FrameTimer

SERVER_WARMUP_FRAMES = 4
"""Frames of silence the reference server runs before its first connection (ServerState.warmup)."""


def write_stock_checkpoint(folder: Path, dep_q: int, seed: int) -> None:
    """Full-size random weights built by the stock runtime, written in the official layout
    (plus config.json in its LM-kwargs format and a text tokenizer) for both runtimes to load."""
    from moshi.models import loaders
    from safetensors.torch import save_file

    from engine.families.moshi.lm.lm_config import CONFIGS, to_lm_kwargs
    from engine.files.paths import DEMO_MODEL_DIR

    cfg = CONFIGS["personaplex" if dep_q == 16 else "moshiko"]
    kwargs = to_lm_kwargs(cfg)
    torch.manual_seed(seed)
    mimi = loaders.get_mimi(None, device="cuda")
    with torch.no_grad():  # a fresh reference Mimi's codebooks are all zero: give them entries
        for name, buf in mimi.named_buffers():
            if name.endswith("embedding_sum"):
                buf.normal_(0, 1)
            elif name.endswith("cluster_usage"):
                buf.uniform_(0.5, 1.5)
            elif name.endswith("_initialized"):
                buf.fill_(1)
    save_file(official_layout(mimi.state_dict()), str(folder / loaders.MIMI_NAME))
    del mimi
    lm = loaders.get_moshi_lm(None, lm_kwargs=_stock_kwargs(kwargs), device="cuda", dtype=torch.bfloat16)
    save_file(official_layout(lm.state_dict()), str(folder / loaders.MOSHI_NAME))
    del lm
    torch.cuda.empty_cache()
    (folder / "config.json").write_text(json.dumps(kwargs))
    shutil.copy(DEMO_MODEL_DIR / loaders.TEXT_TOKENIZER_NAME, folder / loaders.TEXT_TOKENIZER_NAME)


def _stock_kwargs(kwargs: dict) -> dict:
    """LMModel keyword arguments only (config.json may carry our metadata keys too)."""
    from engine.families.moshi.lm.lm_config import METADATA_KEYS, PROMPT_TOKENS_KEY

    return {k: v for k, v in kwargs.items() if k not in (*METADATA_KEYS, PROMPT_TOKENS_KEY)}


def load_stock(folder: Path):
    """The stock runtime's own loaders over the same files (Mimi in fp32, the LM in bf16, as it
    runs; a q8 checkpoint's LM through its bitsandbytes layers)."""
    from moshi.models import loaders

    from engine.loading import locate

    mimi = loaders.get_mimi(folder / loaders.MIMI_NAME, device="cuda", num_codebooks=8)
    return mimi.eval(), stock_lm(locate.lm_file(folder, json.loads((folder / "config.json").read_text())),
                                 "cuda", torch.bfloat16)


def stock_lm(lm_file: Path, device: str, dtype: torch.dtype):
    """The stock LMModel from a checkpoint file with a config.json beside it (a q8 file: quantized)."""
    from moshi.models import loaders

    from engine.loading.safetensors_files import read_safetensors_layout
    from engine.weights.int8 import is_q8

    kwargs = _stock_kwargs(json.loads((lm_file.parent / "config.json").read_text()))
    kwargs["quantize"] = is_q8(read_safetensors_layout(lm_file))
    info = loaders.CheckpointInfo(lm_file, lm_file.parent / loaders.MIMI_NAME,
                                  lm_file.parent / loaders.TEXT_TOKENIZER_NAME, lm_config=kwargs)
    lm = info.get_moshi(device=device, dtype=dtype).eval()
    if kwargs["quantize"] and dtype != torch.float32:
        # moshi 0.2.13's loader casts every float tensor of the file to the model's dtype, the
        # q8 scales too, which its own QLinear then refuses ("Expected `weight_scb` to have
        # type float"): put the file's float32 scales back, as its quantize module intends.
        from safetensors import safe_open

        with safe_open(str(lm_file), "pt", device=str(device)) as f:
            names = f.keys()  # safe_open has no __iter__
            scales = {k: f.get_tensor(k) for k in names if k.endswith("_scb")}
        unexpected = lm.load_state_dict(scales, strict=False, assign=True).unexpected_keys
        if unexpected:
            raise RuntimeError(f"{lm_file}: the stock LM has no parameter for {unexpected[0]}")
    return lm


def stock_state_bytes(*modules) -> int:
    """Bytes of every tensor held in the stock modules' streaming states (KV caches, conv
    tails, token caches), each counted once."""
    seen: dict[int, int] = {}

    def visit(obj, depth=0):
        if depth > 4 or obj is None:
            return
        if isinstance(obj, torch.Tensor):
            if obj.is_cuda:
                seen[obj.untyped_storage().data_ptr()] = obj.untyped_storage().nbytes()
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                visit(item, depth + 1)
        elif hasattr(obj, "__dict__") and not isinstance(obj, torch.nn.Module):
            for value in vars(obj).values():
                visit(value, depth + 1)

    for module in modules:
        for sub in module.modules():
            visit(getattr(sub, "_streaming_state", None))
    return sum(seen.values())


class StockRunner:
    """encode -> LMGen.step -> decode, as the reference's own server loop does it."""

    def __init__(self, mimi, lm):
        from moshi.models.lm import LMGen

        self.mimi, self.lm = mimi, lm
        self.gen = LMGen(lm)  # the reference's default sampling
        self.timer = FrameTimer("cuda", FRAME_KEYS)  # the same stages as ours
        self.records: list[dict[str, float]] = []
        self._wrap_graphed_calls()

    def _wrap_graphed_calls(self):
        # LMGen builds its graphed callables when streaming starts; time them from outside.
        self._enter()
        state = self.gen._streaming_state
        main, depth = state.graphed_main, state.graphed_depth
        timer = self.timer

        def timed_main(*args):
            timer.mark(None)
            out = main(*args)
            timer.mark("backbone")
            return out

        def timed_depth(*args):
            timer.mark(None)
            out = depth(*args)
            timer.mark("depformer")
            return out

        state.graphed_main, state.graphed_depth = timed_main, timed_depth

    def _enter(self):
        self._mimi_ctx = self.mimi.streaming(1)
        self._gen_ctx = self.gen.streaming(1)
        self._mimi_ctx.__enter__()
        self._gen_ctx.__enter__()

    def warm_up(self) -> float:
        """The stock runtime's own warm-up, as its server does it before taking a connection
        (`ServerState.warmup`: frames of silence, on which its CUDA graphs are captured), then
        the reset a new connection gets (graphs kept). Returns its seconds; it leaves no record."""
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(SERVER_WARMUP_FRAMES):
            self.step(np.zeros(FRAME_SIZE, np.float32))
        self.mimi.reset_streaming()
        self.gen.reset_streaming()
        torch.cuda.synchronize()
        self.records.clear()
        return time.perf_counter() - start

    def close(self):
        self._gen_ctx.__exit__(None, None, None)
        self._mimi_ctx.__exit__(None, None, None)

    @torch.no_grad()
    def step(self, pcm: np.ndarray) -> np.ndarray:
        self.timer.begin()
        x = torch.from_numpy(pcm).to(self.lm.device).view(1, 1, -1)
        self.timer.mark(None)
        codes = self.mimi.encode(x)
        self.timer.mark("encode")
        tokens = self.gen.step(codes)
        if tokens is None:
            out = np.zeros_like(pcm)
        else:
            self.timer.mark(None)
            wav = self.mimi.decode(tokens[:, 1:9])
            self.timer.mark("decode")
            out = wav[0, 0].cpu().numpy()  # the frame's one host sync
        torch.cuda.synchronize()
        self.records.append(self.timer.end())
        return out
