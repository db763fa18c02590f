"""The Moshi LM: a temporal transformer over the summed stream embeddings, a text head, and a
depformer that predicts one audio codebook per step.

Parameter names equal the official `model.safetensors` keys, so a checkpoint loads with no
renaming. The module holds weights only; streaming state lives in the caller's store
(the transformers' KV rings and counters, and the token delay lines of `delays.py`).
"""
from __future__ import annotations

import torch
from torch import nn

from ....ops.linear import linear, linear_embed, summed_embeddings
from ....state import Region, Store
from ....transformer import Adapter, RMSNormF32, StreamingTransformer
from ....weights.int4 import table_of
from ....weights.int8 import weight_of
from .lm_config import LMConfig
from .token_delays import DelayLines


def project(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """module(x) for x [..., in] (bf16 or int8 weights; engine.ops.linear chooses the kernel)."""
    return linear(x, weight_of(module))


class MoshiLM(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        d, dd = cfg.dim, cfg.depformer_dim
        # Token ids card / text_card are the "initial" (start-of-stream) tokens, hence the +1.
        self.emb = nn.ModuleList(nn.Embedding(cfg.card + 1, d) for _ in range(cfg.n_q))
        self.text_emb = nn.Embedding(cfg.text_card + 1, d)
        self.transformer = StreamingTransformer(cfg.temporal(), "lm.transformer")
        self.out_norm = RMSNormF32(d)
        self.text_linear = nn.Linear(d, cfg.text_card, bias=False)
        self.depformer_in = nn.ModuleList(nn.Linear(d, dd, bias=False) for _ in range(cfg.dep_q))
        # Step k's input token is the one predicted at step k-1 (the text token at step 0); the
        # last codebook is never an input, hence dep_q - 1 tables.
        self.depformer_text_emb = nn.Embedding(cfg.text_card + 1, dd)
        self.depformer_emb = nn.ModuleList(nn.Embedding(cfg.card + 1, dd) for _ in range(cfg.dep_q - 1))
        self.depformer = StreamingTransformer(cfg.depformer(), "lm.depformer")
        self.linears = nn.ModuleList(nn.Linear(dd, cfg.card, bias=False) for _ in range(cfg.dep_q))
        self.lines = DelayLines(cfg, "lm")

    @property
    def device(self) -> torch.device:
        return self.text_emb.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The activations' dtype: the norms' (the tables may be int8, engine.weights.int4)."""
        return self.out_norm.alpha.dtype

    def regions(self, wake: int = 1) -> list[Region]:
        """`wake`: the most frames one backbone wake covers (engine.transformer)."""
        return self.transformer.regions(wake) + self.depformer.regions() + self.lines.regions()

    def embed_streams(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [n_q + 1] (text first), or [R, n_q + 1] for R positions -> [1, R, dim].
        Summed in the reference's order (audio streams in turn, then text) so float rounding
        matches it bit for bit."""
        return summed_embeddings(self._tables(), tokens.view(-1, self.cfg.n_q + 1).roll(-1, 1), self.dtype)

    def embed_known(self, tokens: torch.Tensor, known: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Future positions' inputs: tokens [R, n_q + 1], known [R, n_q + 1] bool -> [1, R, dim]:
        as embed_streams row by row, with mask[i] [dim] in place of the embedding of each
        stream i a row does not know."""
        masks = mask.to(self.dtype).roll(-1, 0)  # in the streams' order, as their rows
        return summed_embeddings(self._tables(), tokens.roll(-1, 1), self.dtype, known.roll(-1, 1), masks)

    def _tables(self) -> list:
        """The streams' embedding tables in the order they are summed: the audio streams in
        turn, then text."""
        return [table_of(table) for table in (*self.emb, self.text_emb)]

    def backbone(self, x: torch.Tensor, store: Store, adapter: Adapter | None = None,
                 future: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """A wake of the temporal transformer over N positions, the last `future` of them
        masked future positions (corrected by `adapter`, not kept as history): x [1, N, dim] ->
        (h [1, 1 + future, dim] from the last real position on, their text logits
        [1 + future, text_card])."""
        keep = x.shape[1] - future
        h = self.out_norm(self.transformer(x, store, adapter=adapter, keep=keep))[:, keep - 1:]
        return h, project(self.text_linear, h).view(1 + future, -1)

    def restart_depformer(self, store: Store) -> None:
        """The depformer's position restarts every frame; its stale KV entries are then masked."""
        store[self.depformer.pos_region].zero_()

    def depformer_step(self, k: int, prev: torch.Tensor, h: torch.Tensor, store: Store) -> torch.Tensor:
        """Codebook step k: prev [1] (the text token for k = 0) -> logits [1, card]."""
        table = self.depformer_text_emb if k == 0 else self.depformer_emb[k - 1]
        x = linear_embed(h, weight_of(self.depformer_in[k]), table_of(table), prev)
        return project(self.linears[k], self.depformer(x, store, step=k)).view(1, -1)
