"""Build the small demo Mimi shipped in assets/demo_model/ (random weights, fixed seed).

Written exactly as a released Mimi is laid out (`tokenizer-e351c8d8-checkpoint125.safetensors`
and `mimi_config.json`), so the app and tests run the whole pipeline without the real codec. Its
sound is meaningless; what matters is that codes vary with the input (codebooks drawn around the
latents a synthetic signal produces, level by level) and that decoded audio stays at a sane
level (the last decoder conv rescaled to an RMS of about 0.1).

Run: python packaging/make_demo_mimi.py [out_dir]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.families.moshi.mimi.codec import Mimi  # noqa: E402
from engine.families.moshi.mimi.mimi_config_json import parse_config  # noqa: E402
from engine.families.moshi.mimi.mimi_loading import CHECKPOINT_NAME, CONFIG_NAME  # noqa: E402
from engine.ops.codebooks import nearest_codes  # noqa: E402

SEED = 20240917
# Official structure, narrower: the file stays under 4 MB and a 10 s clip codes in well
# under a second on two cores. bins stays 2048 (the demo LM's card); a 16-wide codebook
# keeps the 8 codebooks at 1 MB.
DEMO_OVERRIDES = {
    "seanet": {"n_filters": 8, "dimension": 64},
    "quantizer": {"dimension": 16, "n_q": 8, "bins": 2048, "input_dimension": 64,
                  "output_dimension": 64},
    "transformer": {"d_model": 64, "num_heads": 4, "num_layers": 2, "dim_feedforward": 256,
                    "input_dimension": 64, "output_dimensions": [64]},
}
TARGET_RMS = 0.1


def calibration_audio(sample_rate: int, seconds: float = 4.0) -> np.ndarray:
    """Speech-like synthetic audio: a gliding harmonic voice, noise bursts, pauses."""
    rng = np.random.default_rng(SEED)
    t = np.arange(int(sample_rate * seconds)) / sample_rate
    pitch = 140 + 40 * np.sin(2 * np.pi * 0.8 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / sample_rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 8))
    noise = rng.standard_normal(t.shape) * (np.sin(2 * np.pi * 2.3 * t) > 0.7)
    pauses = np.floor(t / 0.35) % 4 != 3
    return (0.2 * (voice + 0.5 * noise) * pauses).astype(np.float32)


def _randomize_weights(model: Mimi, gen: torch.Generator) -> None:
    for name, p in sorted(model.named_parameters()):
        if p.dim() > 1:
            p.copy_(torch.randn(p.shape, generator=gen) * p[0].numel() ** -0.5)
        elif "layer_scale" in name:
            p.fill_(0.1)
        elif name.endswith("norm1.weight") or name.endswith("norm2.weight"):
            p.fill_(1.0)
        else:  # biases
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02)


def _fit_codebooks(model: Mimi, latent: torch.Tensor, gen: torch.Generator) -> None:
    bins = model.cfg.quantizer.bins
    for rvq in (model.quantizer.rvq_first, model.quantizer.rvq_rest):
        residual = rvq.input_proj(latent).transpose(1, 2).reshape(-1, rvq.input_proj.out_channels)
        for book in rvq.codebooks(len(rvq.vq.layers)):
            mean, std = residual.mean(dim=0), residual.std(dim=0)
            centroids = mean + std * torch.randn(bins, residual.shape[1], generator=gen)
            usage = 0.5 + torch.rand(bins, generator=gen)
            book.embedding_sum.copy_(centroids * usage[:, None])
            book.cluster_usage.copy_(usage)
            book._initialized.fill_(1.0)
            table = book.centroids()
            residual = residual - table[nearest_codes(residual, table[None])[0]]


@torch.no_grad()
def build_demo() -> Mimi:
    cfg = parse_config(DEMO_OVERRIDES, "<demo Mimi config>")
    gen = torch.Generator().manual_seed(SEED)
    model = Mimi(cfg).eval()
    _randomize_weights(model, gen)
    audio = torch.from_numpy(calibration_audio(cfg.sample_rate)).view(1, 1, -1)
    latent = model.encoder_transformer(model.encoder(audio))
    if model.downsample is not None:
        latent = model.downsample(latent)
    _fit_codebooks(model, latent, gen)
    final = model.decoder.model[-1].layer
    rms = model.decode_tensor(model.encode_tensor(audio)).pow(2).mean().sqrt()
    final.weight.mul_(TARGET_RMS / rms)
    final.bias.mul_(TARGET_RMS / rms)
    return model


def write_demo(out_dir: Path) -> None:
    model = build_demo()
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(out_dir / CHECKPOINT_NAME))
    (out_dir / CONFIG_NAME).write_text(json.dumps(model.cfg.to_dict(), indent=2) + "\n")


if __name__ == "__main__":
    write_demo(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "demo_model")
