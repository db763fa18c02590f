"""The Moshi-family LM (Moshi, PersonaPlex) and loading a whole duplex model."""
from .config import CONFIGS, LMConfig, from_lm_kwargs, to_lm_kwargs
from .generate import LMStepper
from .loader import DuplexModel, load_lm, load_model
from .model import MoshiLM
from .personaplex import VoicePrompt, load_voice, wrap_role
from .sampling import SamplingParams, sample

__all__ = ["CONFIGS", "DuplexModel", "LMConfig", "LMStepper", "MoshiLM", "SamplingParams",
           "VoicePrompt", "from_lm_kwargs", "load_lm", "load_model", "load_voice", "sample", "to_lm_kwargs",
           "wrap_role"]
