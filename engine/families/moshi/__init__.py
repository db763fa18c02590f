"""The Moshi family (Moshi, PersonaPlex): its frame's stages, PersonaPlex's prompts and the
conversation the session holds; registered as "moshi"."""
from .. import register_family
from .conversation import MoshiConversation, Persona
from .frame import FRAME_KEYS, MoshiFrame, no_mark, sampling_of
from .inputs import LMInputs, Wake
from .prompts import replay_prompts

register_family("moshi", MoshiConversation)

__all__ = ["FRAME_KEYS", "LMInputs", "MoshiConversation", "MoshiFrame", "Persona", "Wake", "no_mark",
           "replay_prompts", "sampling_of"]
