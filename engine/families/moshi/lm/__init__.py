"""The Moshi-family LM (Moshi, PersonaPlex): weights, token delay lines, sampling, and
PersonaPlex's prompt files."""
from .lm_loading import build_lm, load_lm
from .moshi_lm import MoshiLM
from .personaplex import VoicePrompt, load_voice, wrap_role
from .token_sampling import SamplingParams, sample

__all__ = ["MoshiLM", "SamplingParams", "VoicePrompt", "build_lm", "load_lm", "load_voice", "sample", "wrap_role"]
