"""The lookup tables a GPU load keeps in host memory: the LLM's token embeddings (1.2 GB in bf16,
0.6 GB as int8 rows) and the TTS's text embeddings (0.23 / 0.12 GB). A unit reads a few dozen of
their rows, by ids the host already holds (it chose them, or the tokenizer did), so the rows are
looked up on the host and copied over, where the ids were copied before: the same values, without
the table on the device. A table that is also the LLM's head (tied embeddings) is read whole at
every step and stays on the device."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ...ops.linear import Int8Rows, Table

HOST = torch.device("cpu")
LLM_TABLE = "llm.model.embed_tokens.weight"
TTS_TABLE = "tts.emb_text.weight"


def host_keys(config: dict, device: torch.device | str) -> frozenset[str]:
    """The checkpoint keys a load onto `device` keeps on the host (none on the CPU)."""
    if torch.device(device).type == "cpu":
        return frozenset()
    tied = bool(config.get("tie_word_embeddings", False))
    return frozenset({TTS_TABLE} if tied else {LLM_TABLE, TTS_TABLE})


def device_of(table: Table) -> torch.device:
    return (table.q if isinstance(table, Int8Rows) else table).device


def stays_on_host(table: Table, device: torch.device) -> bool:
    """Whether a model on `device` reads `table` where the load left it: on the host, for a GPU."""
    return torch.device(device) != HOST and device_of(table) == HOST


def ids_for(table: Table, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """ids as a tensor where `table` is, to look its rows up there."""
    return torch.as_tensor(ids, dtype=torch.long).to(device_of(table))
