"""Where the project's bundled files live (the repository's `assets/`, beside `engine/`), and
the per-user folder of files we make and can make again (our cache)."""
import os
import sys
from pathlib import Path, PureWindowsPath

ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"
DEMO_MODEL_DIR = ASSETS_DIR / "demo_model"
SPEECH_SAMPLE = ASSETS_DIR / "speech_sample.wav"

# The official checkpoint files' names.
LM_NAME = "model.safetensors"
LM_Q8_NAME = "model.q8.safetensors"
MIMI_NAME = "tokenizer-e351c8d8-checkpoint125.safetensors"
TOKENIZER_NAME = "tokenizer_spm_32k_3.model"
PREDICTOR_NAME = "diffuplex.safetensors"
"""A DiffuPlex predictor shipped beside a checkpoint (ours, not an official file)."""


def user_cache_dir() -> Path:
    """Our per-user cache, as each desktop keeps such files: `$XDG_CACHE_HOME/DuplexCadence`
    (else ~/.cache) on Linux, ~/Library/Caches on macOS, %LOCALAPPDATA% on Windows. Read each
    time: the environment decides, also in a test."""
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "DuplexCadence" / "cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "DuplexCadence"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec: a relative path is invalid and ignored.
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "DuplexCadence"


def file_in(folder: Path, name: object, source: str, key: str | None = None) -> Path:
    """`folder / name` for a file name a model's config gives (under `key`, named in errors): a
    plain relative name that stays inside the folder, or CheckpointError naming `source` (a
    config.json cannot point a loader at files elsewhere).

    The check is on the name, not on where a link leads: a Hugging Face snapshot's files are
    links into the cache's blob folder beside it, and a link the user made is the user's."""
    from ..errors import CheckpointError
    what = f"{key} = {name!r}" if key else repr(name)
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        raise CheckpointError(f"{source}: {what} is not a file name")
    path = Path(name)
    if path.is_absolute() or PureWindowsPath(name).anchor or ".." in path.parts:
        raise CheckpointError(f"{source}: {what} is outside the model's folder (give a name inside it)")
    inside = (folder / path).parent.resolve()
    if not inside.is_relative_to(Path(folder).resolve()):
        raise CheckpointError(f"{source}: {what} leads through a linked folder out of the model's folder ({inside})")
    return folder / path
