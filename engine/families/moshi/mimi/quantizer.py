"""Split residual vector quantizer: semantic codebook(s) + acoustic codebooks.

Both halves quantize the same latent, each through its own 1x1 input projection (the
acoustic half does not see the semantic residual); decoding sums the two halves' output
projections. Codebooks are stored as on disk: an EMA `embedding_sum` and `cluster_usage`
(centroid = sum / max(usage, 1e-5)) plus an `_initialized` flag that inference ignores.
"""
from __future__ import annotations

import torch
from torch import nn

from ....ops.codebooks import nearest_codes, summed_centroids
from .mimi_config import QuantizerConfig

_USAGE_EPS = 1e-5


class Codebook(nn.Module):
    def __init__(self, dim: int, bins: int):
        super().__init__()
        self.register_buffer("_initialized", torch.zeros(1))
        self.register_buffer("cluster_usage", torch.ones(bins))
        self.register_buffer("embedding_sum", torch.zeros(bins, dim))

    def centroids(self) -> torch.Tensor:
        return self.embedding_sum / self.cluster_usage.clamp(min=_USAGE_EPS)[:, None]

    def key(self) -> tuple:
        """Changes whenever the buffers are replaced or written (load, .to())."""
        return tuple((b.data_ptr(), b._version, b.dtype) for b in (self.embedding_sum, self.cluster_usage))


class _CodebookHolder(nn.Module):
    """The official key has one more level: `vq.layers.{i}._codebook.embedding_sum`."""

    def __init__(self, dim: int, bins: int):
        super().__init__()
        self._codebook = Codebook(dim, bins)


class _Layers(nn.Module):
    def __init__(self, n: int, dim: int, bins: int):
        super().__init__()
        self.layers = nn.ModuleList(_CodebookHolder(dim, bins) for _ in range(n))


class ResidualVQ(nn.Module):
    def __init__(self, n_q: int, cfg: QuantizerConfig):
        super().__init__()
        self.input_proj = nn.Conv1d(cfg.input_dimension, cfg.dimension, 1, bias=False)
        self.output_proj = nn.Conv1d(cfg.dimension, cfg.output_dimension, 1, bias=False)
        self.vq = _Layers(n_q, cfg.dimension, cfg.bins)
        self._centroids: dict[int, tuple[tuple, torch.Tensor]] = {}  # n: (the codebooks' keys, centroids)

    def codebooks(self, n: int) -> list[Codebook]:
        return [holder._codebook for holder in self.vq.layers[:n]]

    def centroids(self, n: int) -> torch.Tensor:
        """The first n codebooks' centroids [n, bins, dim]. Kept (for each n asked: encoding and
        decoding ask the same), and made again whenever a codebook's buffers change, so no frame
        divides and nothing derived goes stale."""
        books = self.codebooks(n)
        key = tuple(book.key() for book in books)
        if self._centroids.get(n, (None,))[0] != key:
            self._centroids[n] = key, torch.stack([book.centroids() for book in books])
        return self._centroids[n][1]

    def encode(self, latent: torch.Tensor, n: int) -> torch.Tensor:
        """latent [B, C, T] -> codes [B, n, T]."""
        B, _, T = latent.shape
        residual = self.input_proj(latent).transpose(1, 2).reshape(B * T, -1)
        return nearest_codes(residual, self.centroids(n)).view(n, B, T).transpose(0, 1)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, K, T] -> latent [B, C, T]."""
        B, K, T = codes.shape
        total = summed_centroids(codes.transpose(0, 1).reshape(K, B * T), self.centroids(K))
        return self.output_proj(total.view(B, T, -1).transpose(1, 2))


class SplitResidualVQ(nn.Module):
    def __init__(self, cfg: QuantizerConfig, num_codebooks: int):
        super().__init__()
        if not cfg.n_q_semantic <= num_codebooks <= cfg.n_q:
            raise ValueError(f"num_codebooks must be in [{cfg.n_q_semantic}, {cfg.n_q}], got {num_codebooks}")
        self.cfg = cfg
        self.num_codebooks = num_codebooks
        self.rvq_first = ResidualVQ(cfg.n_q_semantic, cfg)
        self.rvq_rest = ResidualVQ(cfg.n_q - cfg.n_q_semantic, cfg)

    def encode(self, latent: torch.Tensor) -> torch.Tensor:
        n_sem = self.cfg.n_q_semantic
        codes = self.rvq_first.encode(latent, n_sem)
        if self.num_codebooks > n_sem:
            codes = torch.cat([codes, self.rvq_rest.encode(latent, self.num_codebooks - n_sem)], dim=1)
        return codes

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        n_sem = self.cfg.n_q_semantic
        latent = self.rvq_first.decode(codes[:, :n_sem])
        if codes.shape[1] > n_sem:
            latent = latent + self.rvq_rest.decode(codes[:, n_sem:])
        return latent
