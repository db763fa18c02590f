"""The session and its family meet in one place: engine/families/protocol.py names every member
the session uses of a family's conversation, the Moshi family's conversation has each of them,
and the registry finds a family by the name its models give, registered from anywhere."""
import ast
from pathlib import Path

import numpy as np
import pytest

from engine import RuntimeOptions, load_model
from engine.families import conversation_for, register_family
from engine.families.protocol import FamilyConversation
from engine.session import DuplexSession

ENGINE = Path(__file__).resolve().parents[1] / "engine"


def _protocol_members() -> set[str]:
    return {name for name in vars(FamilyConversation) if not name.startswith("_")} \
        | set(FamilyConversation.__annotations__)


def _used_by_the_session() -> set[str]:
    """Attributes the session reads of `self.conversation` (and of its own `conversation` local)."""
    tree = ast.parse((ENGINE / "session.py").read_text())
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "conversation":
            used.add(node.attr)
    return used


def test_the_session_uses_only_what_the_protocol_names():
    used = _used_by_the_session()
    assert used, "the walk found nothing: it no longer sees the session's calls"
    assert used <= _protocol_members(), sorted(used - _protocol_members())


def test_the_session_imports_no_family():
    tree = ast.parse((ENGINE / "session.py").read_text())
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not [m for m in imported if m.startswith("families.") and m != "families.protocol"], imported


def test_the_moshi_conversation_has_every_member():
    session = DuplexSession(load_model("demo"), RuntimeOptions(seed=0))
    missing = [name for name in _protocol_members() if not hasattr(session.conversation, name)]
    assert missing == []


class _Model:
    def __init__(self, family):
        self.family, self.name = family, f"a {family} model"


def test_a_family_registered_from_anywhere_is_found_and_an_unknown_one_named():
    class Conversation:
        pass

    register_family("test-registry-family", Conversation)
    assert conversation_for(_Model("test-registry-family")) is Conversation
    assert conversation_for(_Model("moshi")).__name__ == "MoshiConversation"
    with pytest.raises(ValueError, match="a nowhere model: no model family 'nowhere' is registered"):
        conversation_for(_Model("nowhere"))


def test_a_step_reports_the_family_stages_in_order():
    session = DuplexSession(load_model("demo"), RuntimeOptions(seed=0))
    timings = session.step(np.zeros(1920, np.float32)).timings
    assert tuple(timings)[:-1] == session.conversation.stages and list(timings)[-1] == "total"
