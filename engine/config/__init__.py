"""Configurations as plain data: the streaming transformer, the Moshi-family LM (named configs
and the reference's config.json format) and Mimi. Nothing here imports torch."""
from .lm import CONFIGS, LMConfig, from_lm_kwargs, to_lm_kwargs
from .mimi import MimiConfig
from .mimi_json import load_config, official_config, parse_config
from .transformer import TransformerConfig

__all__ = ["CONFIGS", "LMConfig", "MimiConfig", "TransformerConfig", "from_lm_kwargs", "load_config",
           "official_config", "parse_config", "to_lm_kwargs"]
