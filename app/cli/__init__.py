"""The `duplexcadence` command (`commands`): the window by default, and the headless commands,
`offline` (a conversation file to file), the model library's (`model_commands`), token2wav's
and the rest, each the twin of something the window does."""
from .commands import main

__all__ = ["main"]
