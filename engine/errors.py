"""Exceptions the engine raises for bad input. Messages name the file and what was wrong."""


class CheckpointError(ValueError):
    """A checkpoint or its config could not be used: missing, not safetensors, corrupt,
    wrong keys or shapes, bad config. The message names the file and the key/shape/reason."""


class AudioInputError(ValueError):
    """An audio file could not be used as input (unreadable, empty, not audio)."""


class AudioOutputError(ValueError):
    """An output file cannot be written where asked (a folder, unknown format, no permission)."""


class DeviceMemoryError(ValueError):
    """A model does not fit the chosen device's free memory; the message says how much it
    needs, of what, and how much is free."""


class HubError(CheckpointError):
    """A checkpoint could not be asked about or downloaded from the Hugging Face Hub: no network,
    no such repository, a gated one without access, a server error, a full disk. The message
    names the repository, what failed and what was kept."""
