"""The Moshi family (Moshi, PersonaPlex): its LM and Mimi codec (`lm`, `mimi`), how a checkpoint
is laid out (`layout`), read (`model`) and planned for (`memory`), its frame's stages (`frame`),
PersonaPlex's prompts (`prompts`), DiffuPlex (`diffuplex`: predicted frames on the PersonaPlex
shape), and the conversation the session holds (`conversation`); registered as "moshi".

Its clocks: `frame` (one tick per 80 ms frame: the LM's temporal KV) and `mimi_step` (one per
40 ms codec transformer step: Mimi's KV).

Registering imports nothing heavy: each entry imports its module when first called, so that
importing a light module of the family (diffuplex.stats) does not import torch."""
from __future__ import annotations

from .. import Family, register_family


def _conversation(*args):
    from .conversation import MoshiConversation
    return MoshiConversation(*args)


def _claims(*args):
    from .model import claims
    return claims(*args)


def _load(*args):
    from .model import load
    return load(*args)


def _plan_memory(*args):
    from .memory import plan_memory
    return plan_memory(*args)


def _check_persona(*args):
    from .model import check_persona
    return check_persona(*args)


def _files(listing, config, weights, name, read=None):
    from .layout import files
    return files(listing, config, weights, name)  # its names come from the listing and config.json alone


register_family(Family("moshi", _claims, _load, _conversation, _plan_memory, _check_persona, _files))
