"""DuplexCadence engine: models and runtime. Never imports Qt."""
from .errors import AudioInputError, CheckpointError

__all__ = ["AudioInputError", "CheckpointError"]
