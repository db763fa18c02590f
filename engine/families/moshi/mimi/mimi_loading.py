"""Loading a Mimi checkpoint in the official layout (plus an optional mimi_config.json)."""
from __future__ import annotations

from pathlib import Path

import torch

from ....errors import CheckpointError
from ....files.paths import MIMI_NAME as CHECKPOINT_NAME
from ....loading.safetensors_files import check_layout, load_into, read_safetensors
from .codec import Mimi
from .mimi_config_json import load_config, official_config

CONFIG_NAME = "mimi_config.json"


def load_mimi(path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
              num_codebooks: int = 8, name: str = "mimi") -> Mimi:
    """Load Mimi from a directory holding the official checkpoint file, or from the file itself.

    A `mimi_config.json` beside the checkpoint overrides the official configuration.
    `name` prefixes the model's state regions (give two instances different names if
    their regions share one store). Any problem raises CheckpointError naming the file.
    """
    path = Path(path)
    weights = path / CHECKPOINT_NAME if path.is_dir() else path
    config_path = weights.parent / CONFIG_NAME
    cfg = load_config(config_path) if config_path.exists() else official_config()
    q = cfg.quantizer
    if not q.n_q_semantic <= num_codebooks <= q.n_q:
        raise CheckpointError(f"{weights}: num_codebooks {num_codebooks} is outside the "
                              f"{q.n_q_semantic}..{q.n_q} codebooks this Mimi has")
    tensors = read_safetensors(weights)
    # Built without initializing weights: every parameter and buffer comes from the file.
    with torch.device("meta"):
        model = Mimi(cfg, num_codebooks, name)
    try:
        check_layout(model, tensors, weights)  # before the config's sizes are allocated
        model.to_empty(device="cpu")
        load_into(model, tensors, weights)
    except CheckpointError as exc:
        if config_path.exists():
            raise
        raise CheckpointError(f"{exc} (read as the official Mimi: no {CONFIG_NAME} beside it)") from None
    return model.to(device=device, dtype=dtype).eval()
