"""The Moshi family (Moshi, PersonaPlex): its frame's stages and PersonaPlex's prompts."""
from .frame import FRAME_KEYS, MoshiFrame, no_mark, sampling_of
from .inputs import LMInputs, Wake
from .prompts import replay_prompts

__all__ = ["FRAME_KEYS", "LMInputs", "MoshiFrame", "Wake", "no_mark", "replay_prompts", "sampling_of"]
