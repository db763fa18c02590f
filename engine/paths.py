"""Where the project's bundled files live (the repository's `assets/`, beside `engine/`)."""
from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
DEMO_MODEL_DIR = ASSETS_DIR / "demo_model"
SPEECH_SAMPLE = ASSETS_DIR / "speech_sample.wav"
