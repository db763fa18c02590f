"""The Mimi neural audio codec (24 kHz mono <-> 12.5 Hz codes), streaming or whole-signal."""
from .codec import Mimi
from .mimi_loading import load_mimi
from .mimi_stream import MimiStream

__all__ = ["Mimi", "MimiStream", "load_mimi"]
