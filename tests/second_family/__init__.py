"""A second model family, entirely in the tests: the proof that a family is one package.

It differs from the Moshi family in everything the one-second family (MiniCPM-o 4.5 with a
token-to-audio tail) does: it hears 16 kHz and speaks 24 kHz; its step is one second; it
decides once a step whether to speak, so some steps give no audio and a speaking step gives
1.5 s (more than a step's worth); its `speak` stage runs only on speaking steps; and its state
is its own region on its own clock (`second`: a ring of one summary per step heard). Its
checkpoints have their own layout (`checkpoint.write`), which a folder is recognised by.

Importing this package registers it, as a plugin would; nothing under engine/ or app/ names it.
"""
from engine.families import Family, register_family

from .checkpoint import CONFIG, MODEL_TYPE, check_persona, claims, files, load, plan_memory, write
from .conversation import STAGES, SecondConversation, SecondReport

FAMILY = "second"
register_family(Family(FAMILY, claims, load, SecondConversation, plan_memory, check_persona, files))

__all__ = ["CONFIG", "FAMILY", "MODEL_TYPE", "STAGES", "SecondConversation", "SecondReport", "write"]
