"""The Mimi neural audio codec (24 kHz mono <-> 12.5 Hz codes), streaming or whole-signal."""
from .config import MimiConfig
from .config_json import load_config, official_config, parse_config
from .loader import load_mimi
from .model import Mimi
from .stream import MimiStream

__all__ = ["Mimi", "MimiConfig", "MimiStream", "load_mimi", "load_config", "official_config", "parse_config"]
