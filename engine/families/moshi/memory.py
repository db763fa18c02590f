"""What a Moshi-family model and its conversation need of a device's memory: the LM as it will
be loaded plus the Mimi codec (float32, as on disk), and the LM's streaming state for its
whole context. On the H200 a moshiko frame's peak beyond weights and state is under 0.2 GiB of
torch's allocations, inside the allowance engine.loading.memory_plan makes for working memory."""
from __future__ import annotations

from pathlib import Path

import torch

from ...files.paths import MIMI_NAME, file_in
from ...loading.memory_plan import MemoryPlan
from ...weights.int4 import int4_layout, is_int4
from ...weights.int8 import int8_layout, is_q8
from .lm.lm_config import LMConfig
from .lm.moshi_lm import MoshiLM
from .model import read_lm_checkpoint

FRAME_RATE = 12.5
"""Mimi's frames a second: the LM's context is counted in them."""


def plan_memory(root: Path, repo: str | None, weights: str | None, device: str | torch.device) -> MemoryPlan:
    """The memory `load(root, repo, device, weights=weights)` and a session need."""
    ckpt = read_lm_checkpoint(root, layout_only=True, repo=repo)
    mimi = file_in(ckpt.root, ckpt.meta.get("mimi_name", MIMI_NAME), f"{ckpt.root}/config.json", key="mimi_name")
    stored = "int8" if is_q8(ckpt.tensors) else "int4" if is_int4(ckpt.tensors) else "bf16"
    return plan_for_config(ckpt.name, ckpt.cfg, weights or stored, device,
                           mimi.stat().st_size if mimi.is_file() else 0)


def plan_for_config(name: str, cfg: LMConfig, weights: str, device: str | torch.device,
                    mimi_bytes: int) -> MemoryPlan:
    """The same plan from a model's configuration alone: for a model not downloaded yet."""
    device = torch.device(device)
    with torch.device("meta"):
        lm = MoshiLM(cfg).to(torch.bfloat16 if device.type == "cuda" else torch.float32)
        if weights == "int8":
            int8_layout(lm)
        elif weights == "int4":
            int4_layout(lm)
    weight_bytes = sum(p.numel() * p.element_size() for p in lm.parameters()) + mimi_bytes
    state = sum(r.bytes_full() for r in lm.regions())
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    return MemoryPlan(name, weights, str(device), weight_bytes, state, cfg.context / FRAME_RATE, free)
