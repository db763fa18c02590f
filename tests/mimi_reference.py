"""Test helpers: a small reference Mimi (moshi 0.2.13) saved in the official layout.

Fresh reference weights would make a weak test: codebooks are all zero (every code 0),
norms and biases are constants and the layer scales (0.01) hide the transformers. So
every weight is redrawn, and the codebooks are drawn at the scale of the latents they
quantize, level by level, so that codes vary from frame to frame.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import torch
from moshi.models.compression import MimiModel
from moshi.models.loaders import get_mimi
from safetensors.torch import save_file

from engine.families.moshi.mimi.mimi_config import OFFICIAL
from engine.families.moshi.mimi.mimi_loading import CHECKPOINT_NAME, CONFIG_NAME
from engine.loading.safetensors_files import official_layout

FRAME = 1920


def small_config(context: int = 16) -> dict:
    """A tiny Mimi in the reference's config format. The transformer width differs from
    the latent width so the projections exist; the context is short so rings wrap."""
    cfg = copy.deepcopy(OFFICIAL)
    cfg["seanet"].update(n_filters=4, dimension=32, n_residual_layers=2)
    cfg["quantizer"].update(dimension=16, n_q=10, bins=64, input_dimension=32, output_dimension=32)
    cfg["transformer"].update(d_model=48, num_heads=4, num_layers=2, dim_feedforward=64,
                              context=context, input_dimension=32, output_dimensions=[32])
    return cfg


def varied_audio(frames: int, seed: int = 0) -> np.ndarray:
    """Deterministic, varied audio: gliding tones, bursts of noise, silence gaps."""
    rng = np.random.default_rng(seed)
    t = np.arange(frames * FRAME) / 24000.0
    glide = np.sin(2 * np.pi * (150 * t + 400 * t ** 2))
    tone = 0.5 * np.sin(2 * np.pi * 1100 * t) * (np.sin(2 * np.pi * 1.3 * t) > 0)
    noise = rng.standard_normal(t.shape) * (np.sin(2 * np.pi * 0.7 * t) > 0.5)
    gate = (np.floor(t / 0.4) % 5 != 3)
    return (0.3 * (glide + tone + 0.5 * noise) * gate).astype(np.float32)


def build_reference(cfg: dict, num_codebooks: int = 8, seed: int = 0) -> MimiModel:
    torch.manual_seed(seed)
    model = get_mimi(None, cfg, num_codebooks=num_codebooks).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0, p[0].numel() ** -0.5)
            elif "layer_scale" in name:
                p.uniform_(0.2, 0.6)
            elif name.endswith("weight"):  # norm gains
                p.uniform_(0.7, 1.3)
            else:
                p.normal_(0, 0.1)
        _fit_codebooks(model, cfg)
    return model


def _fit_codebooks(model: MimiModel, cfg: dict) -> None:
    """Draw each codebook around the residual it will see on test audio."""
    audio = torch.from_numpy(varied_audio(12, seed=123)).view(1, 1, -1)
    latent = model._encode_to_unquantized_latent(audio)
    bins = cfg["quantizer"]["bins"]
    for rvq in (model.quantizer.rvq_first, model.quantizer.rvq_rest):
        residual = rvq.input_proj(latent)
        for layer in rvq.vq.layers:
            book = layer._codebook
            vectors = residual.transpose(1, 2).reshape(-1, residual.shape[1])
            std = vectors.std(dim=0, keepdim=True)
            centroids = vectors.mean(dim=0) + std * torch.randn(bins, vectors.shape[1])
            usage = torch.rand(bins) + 0.5
            book.embedding_sum.copy_(centroids * usage[:, None])
            book.cluster_usage.copy_(usage)
            book._initialized.fill_(1.0)
            book.register_buffer("_embedding", None, persistent=False)  # drop its cache
            residual = residual - layer.decode(layer.encode(residual))


def official_state(model: MimiModel) -> dict[str, torch.Tensor]:
    return official_layout(model.state_dict())


def save_official(model: MimiModel, cfg: dict | None, directory: Path) -> Path:
    """Write the checkpoint (and mimi_config.json if cfg is given) as released files are laid out."""
    directory.mkdir(parents=True, exist_ok=True)
    save_file(official_state(model), str(directory / CHECKPOINT_NAME))
    if cfg is not None:
        (directory / CONFIG_NAME).write_text(json.dumps(cfg, indent=1))
    return directory


def reference_stream_encode(model: MimiModel, audio: np.ndarray) -> np.ndarray:
    """Codes [K, frames] the way the reference streams: one 1920-sample frame per call."""
    x = torch.from_numpy(audio).view(1, 1, -1)
    out = []
    with torch.no_grad(), model.streaming(1):
        for start in range(0, x.shape[-1], FRAME):
            out.append(model.encode(x[..., start:start + FRAME]))
    return torch.cat(out, dim=-1)[0].numpy()


def reference_stream_decode(model: MimiModel, codes: np.ndarray) -> np.ndarray:
    c = torch.from_numpy(codes).long()[None]
    out = []
    with torch.no_grad(), model.streaming(1):
        for t in range(c.shape[-1]):
            out.append(model.decode(c[..., t:t + 1]))
    return torch.cat(out, dim=-1)[0, 0].numpy()
