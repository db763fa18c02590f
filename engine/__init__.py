"""DuplexCadence engine: models and runtime. Never imports Qt."""
from .errors import AudioInputError, CheckpointError
from .lm import DuplexModel, load_model
from .mimi import Mimi, MimiStream, load_mimi
from .options import RuntimeOptions
from .session import DuplexSession, FrameOutput, Persona

__all__ = ["AudioInputError", "CheckpointError", "DuplexModel", "DuplexSession", "FrameOutput", "Mimi",
           "MimiStream", "Persona", "RuntimeOptions", "load_mimi", "load_model"]
