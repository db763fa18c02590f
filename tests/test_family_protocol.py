"""The session and its family meet in one place: engine/families/protocol.py names every member
the session uses of a family's conversation, the Moshi family's conversation has each of them,
and the registry names a family it does not have (tests/second_family registers one from
outside the engine)."""
import ast
from pathlib import Path

import numpy as np
import pytest

from engine import RuntimeOptions, load_model
from engine.families import family_named
from engine.families.protocol import DuplexModel, FamilyConversation
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


def test_the_moshi_model_has_every_member():
    model = load_model("demo")
    members = {name for name in vars(DuplexModel) if not name.startswith("_")} | set(DuplexModel.__annotations__)
    assert [name for name in members if not hasattr(model, name)] == []


def test_an_unknown_family_is_named():
    with pytest.raises(ValueError, match="no model family 'nowhere' is registered"):
        family_named("nowhere")


def test_a_step_reports_the_family_stages_in_order():
    session = DuplexSession(load_model("demo"), RuntimeOptions(seed=0))
    timings = session.step(np.zeros(1920, np.float32)).timings
    assert tuple(timings)[:-1] == session.conversation.stages and list(timings)[-1] == "total"
