"""DuplexCadence engine: models and runtime. Never imports Qt."""
from .errors import AudioInputError, CheckpointError
from .mimi import Mimi, MimiStream, load_mimi

__all__ = ["AudioInputError", "CheckpointError", "Mimi", "MimiStream", "load_mimi"]
