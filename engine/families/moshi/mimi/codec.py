"""The Mimi codec: SEANet + transformer on each side, 25 <-> 12.5 Hz resampling, split RVQ.

encode: pcm -> SEANet encoder -> encoder transformer -> downsample -> quantizer -> codes
decode: codes -> quantizer -> upsample -> decoder transformer -> SEANet decoder -> pcm

Every stage takes `store`: None runs a whole signal at once; a store holding this
model's regions runs one chunk of a stream. The encode side and the decode side keep
disjoint regions, so a duplex session can encode the user while it decodes the model.
A host-side (numpy) stream over a Mimi is `MimiStream(mimi)` (stream.py).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ....state import Region, Store
from ....transformer import StreamingTransformer
from .mimi_config import MimiConfig, ProjectedTransformerConfig
from .quantizer import SplitResidualVQ
from .resample import ConvDownsample, ConvTrUpsample
from .seanet import SeanetDecoder, SeanetEncoder


class ProjectedTransformer(nn.Module):
    """Transformer over [B, C, T] latents, with linear projections when C != d_model."""

    def __init__(self, cfg: ProjectedTransformerConfig, name: str):
        super().__init__()
        d = cfg.core.d_model
        self.transformer = StreamingTransformer(cfg.core, f"{name}.transformer")
        self.input_proj = nn.Linear(cfg.input_dimension, d, bias=False) if cfg.input_dimension != d else None
        self.output_projs = nn.ModuleList([
            nn.Linear(d, cfg.output_dimension, bias=False) if cfg.output_dimension != d else nn.Identity()])

    def regions(self) -> list[Region]:
        return self.transformer.regions()

    def forward(self, x: torch.Tensor, store: Store | None = None) -> torch.Tensor:
        x = x.transpose(1, 2)
        if self.input_proj is not None:
            x = self.input_proj(x)
        return self.output_projs[0](self.transformer(x, store)).transpose(1, 2)


class Mimi(nn.Module):
    def __init__(self, cfg: MimiConfig, num_codebooks: int = 8, name: str = "mimi"):
        super().__init__()
        self.cfg, self.name = cfg, name
        dim, stride = cfg.seanet.dimension, cfg.resample_stride
        self.encoder = SeanetEncoder(cfg.seanet, f"{name}.encoder")
        self.encoder_transformer = ProjectedTransformer(cfg.transformer, f"{name}.encoder_transformer")
        self.downsample = ConvDownsample(f"{name}.downsample", stride, dim) if stride > 1 else None
        self.quantizer = SplitResidualVQ(cfg.quantizer, num_codebooks)
        self.upsample = ConvTrUpsample(f"{name}.upsample", stride, dim) if stride > 1 else None
        self.decoder_transformer = ProjectedTransformer(cfg.transformer, f"{name}.decoder_transformer")
        self.decoder = SeanetDecoder(cfg.seanet, f"{name}.decoder")

    @property
    def frame_size(self) -> int:
        return self.cfg.frame_size

    @property
    def sample_rate(self) -> int:
        return self.cfg.sample_rate

    @property
    def num_codebooks(self) -> int:
        return self.quantizer.num_codebooks

    @property
    def cardinality(self) -> int:
        return self.cfg.quantizer.bins

    @property
    def device(self) -> torch.device:
        return self.quantizer.rvq_first.input_proj.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.quantizer.rvq_first.input_proj.weight.dtype

    # --- declared state -------------------------------------------------------------

    def encoder_regions(self) -> list[Region]:
        stages = [self.encoder, self.encoder_transformer, self.downsample]
        return [r for s in stages if s is not None for r in s.regions()]

    def decoder_regions(self) -> list[Region]:
        stages = [self.upsample, self.decoder_transformer, self.decoder]
        return [r for s in stages if s is not None for r in s.regions()]

    def regions(self) -> list[Region]:
        return self.encoder_regions() + self.decoder_regions()

    # --- torch level ------------------------------------------------------------------

    def _encode(self, pcm: torch.Tensor, store: Store | None) -> torch.Tensor:
        latent = self.encoder_transformer(self.encoder(pcm, store), store)
        if self.downsample is not None:
            latent = self.downsample(latent, store)
        return self.quantizer.encode(latent)

    def _decode(self, codes: torch.Tensor, store: Store | None) -> torch.Tensor:
        latent = self.quantizer.decode(codes)
        if self.upsample is not None:
            latent = self.upsample(latent, store)
        return self.decoder(self.decoder_transformer(latent, store), store)

    @torch.no_grad()
    def encode_step(self, pcm: torch.Tensor, store: Store) -> torch.Tensor:
        """One frame of a stream: pcm [1, 1, frame_size] -> codes [1, num_codebooks, 1]."""
        if tuple(pcm.shape) != (1, 1, self.frame_size):
            raise ValueError(f"encode_step takes pcm of shape [1, 1, {self.frame_size}], got {list(pcm.shape)}")
        return self._encode(pcm, store)

    @torch.no_grad()
    def decode_step(self, codes: torch.Tensor, store: Store) -> torch.Tensor:
        """One frame of a stream: codes [1, K, 1] (K <= total codebooks) -> pcm [1, 1, frame_size]."""
        if codes.dim() != 3 or codes.shape[0] != 1 or codes.shape[2] != 1:
            raise ValueError(f"decode_step takes codes of shape [1, K, 1], got {list(codes.shape)}")
        return self._decode(codes, store)

    @torch.no_grad()
    def encode_tensor(self, pcm: torch.Tensor) -> torch.Tensor:
        """Whole signal: pcm [B, 1, N] -> codes [B, num_codebooks, ceil(N / frame_size)].
        The last frame is zero-padded, as a stream would have to be."""
        pad = -pcm.shape[-1] % self.frame_size
        return self._encode(nn.functional.pad(pcm, (0, pad)), None)

    @torch.no_grad()
    def decode_tensor(self, codes: torch.Tensor) -> torch.Tensor:
        """Whole signal: codes [B, K, T] -> pcm [B, 1, T * frame_size]."""
        return self._decode(codes, None)

    # --- numpy level ------------------------------------------------------------------

    def encode(self, pcm: np.ndarray) -> np.ndarray:
        """pcm float [N] at sample_rate -> codes int64 [num_codebooks, ceil(N / frame_size)]."""
        x = self.check_pcm(pcm, None)
        return self.encode_tensor(x.view(1, 1, -1))[0].cpu().numpy()

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """codes int [K, T] -> pcm float32 [T * frame_size]."""
        c = self.check_codes(codes, 2)
        return self.decode_tensor(c[None])[0, 0].float().cpu().numpy()

    def check_pcm(self, pcm: np.ndarray, length: int | None) -> torch.Tensor:
        pcm = np.asarray(pcm)
        if pcm.ndim != 1 or not np.issubdtype(pcm.dtype, np.floating):
            raise ValueError(f"pcm must be a 1-D float array, got {pcm.dtype} of shape {list(pcm.shape)}")
        if length is not None and pcm.shape[0] != length:
            raise ValueError(f"pcm frame must hold {length} samples, got {pcm.shape[0]}")
        if pcm.shape[0] == 0:
            raise ValueError("pcm is empty")
        if not np.isfinite(pcm).all():
            raise ValueError("pcm holds NaN or infinite samples")
        return torch.from_numpy(np.ascontiguousarray(pcm, dtype=np.float32)).to(self.device, self.dtype)

    def check_codes(self, codes: np.ndarray, ndim: int) -> torch.Tensor:
        codes = np.asarray(codes)
        if codes.ndim != ndim or not np.issubdtype(codes.dtype, np.integer):
            raise ValueError(f"codes must be a {ndim}-D integer array, got {codes.dtype} of shape {list(codes.shape)}")
        if not 1 <= codes.shape[0] <= self.cfg.quantizer.n_q:
            raise ValueError(f"codes hold {codes.shape[0]} codebooks; this Mimi has 1..{self.cfg.quantizer.n_q}")
        if codes.size == 0:
            raise ValueError("codes hold no frames")
        if (codes.min() < 0 or codes.max() >= self.cardinality):
            raise ValueError(f"codes must lie in [0, {self.cardinality})")
        return torch.from_numpy(codes.astype(np.int64)).to(self.device)
