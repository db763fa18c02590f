"""Configurations as plain data that more than one model uses: the streaming transformer's,
and the bounds every configuration file is read within (`checks`). A family's own
configurations live in its package. Nothing here imports torch."""
from .transformer_config import TransformerConfig

__all__ = ["TransformerConfig"]
