"""Step-Audio2's token-to-audio tail (the token2wav of MiniCPM-o 4.5): speech tokens at 25 Hz
-> 80-band mel by a flow-matching decoder -> 24 kHz audio by a causal HiFT vocoder, streamed
in one-second chunks."""
from .token2wav_loading import Token2wavModel, load_token2wav
from .token2wav_stream import Prompt, Token2wavStream

__all__ = ["Prompt", "Token2wavModel", "Token2wavStream", "load_token2wav"]
