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
