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
    names the repository, what failed and what was kept; `reason` says which kind of failure it
    is, for a caller that offers what to do next: one of HUB_REASONS."""

    def __init__(self, message: str, reason: str = "other"):
        super().__init__(message)
        self.reason = reason


HUB_REASONS = ("network", "gated", "licence", "token", "not_found", "not_a_model", "disk", "server", "other")
"""HubError.reason: no network; gated without a token; the token's account has not accepted the
licence; the token refused; no such repository; not a duplex model; a full disk; the Hub failed."""
