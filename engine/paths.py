"""Where the project's bundled files live (the repository's `assets/`, beside `engine/`)."""
from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
DEMO_MODEL_DIR = ASSETS_DIR / "demo_model"
SPEECH_SAMPLE = ASSETS_DIR / "speech_sample.wav"

# The official checkpoint files' names.
LM_NAME = "model.safetensors"
LM_Q8_NAME = "model.q8.safetensors"
MIMI_NAME = "tokenizer-e351c8d8-checkpoint125.safetensors"
TOKENIZER_NAME = "tokenizer_spm_32k_3.model"
PREDICTOR_NAME = "diffuplex.safetensors"
"""A DiffuPlex predictor shipped beside a checkpoint (ours, not an official file)."""


def file_in(folder: Path, name: object, source: str) -> Path:
    """`folder / name` for a file name a model's config gives: a plain relative name that stays
    inside the folder, or CheckpointError naming `source` (a config.json cannot point a loader
    at files elsewhere)."""
    from .errors import CheckpointError
    if not isinstance(name, str) or not name or "\\" in name:
        raise CheckpointError(f"{source}: {name!r} is not a file name")
    path = Path(name)
    if path.is_absolute() or ".." in path.parts:
        raise CheckpointError(f"{source}: {name!r} is outside the model's folder")
    return folder / path
