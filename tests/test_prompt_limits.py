"""PersonaPlex's voice prompt and role take at most half the model's context: longer is refused
in one line naming the limit before anything is replayed (the CLI: before the weights load), a
voice prompt longer than the whole context is refused even as the model's default, and prompts
that take more than 2 s show how far they are (the CLI on stderr, the window in its status)."""
import threading
import time

import pytest
import torch
from PyQt6.QtCore import Qt

from app.audio.file_feed import FileFeed
from app.conversation.conversation_signals import ConversationSignals
from app.conversation.engine_thread import ConversationWorker
from app.models.model_loader import LoadedModel, LoaderSignals, ModelLoader
from engine.errors import CheckpointError
from engine.families.moshi.lm.personaplex import load_voice
from engine.families.moshi.model import read_lm_checkpoint
from engine.files.paths import SPEECH_SAMPLE
from tests.app_helpers import keep_torch_threads  # noqa: F401  (fixture)
from tests.hostile_files import demo_copy
from tests.installed_cli import duplexcadence, one_line, speech_clip

CONTEXT = 3000  # the demo's: prompts may take 1500 frames, 12 of them silence


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The demo with more voice prompts: 25 MB (200,000 frames), the most that fits with no
    role (1488 frames), one frame more, and one over the whole context."""
    folder = demo_copy(tmp_path_factory.mktemp("voices") / "demo")
    cache = torch.load(folder / "voices" / "DEMO.pt", weights_only=True)["cache"]
    for name, frames in (("HUGE", 200_000), ("FITS", CONTEXT // 2 - 12), ("OVER", CONTEXT // 2 - 11),
                         ("WHOLE", CONTEXT + 1)):
        torch.save({"embeddings": torch.zeros(frames, 1, 1, 32), "cache": cache}, folder / "voices" / f"{name}.pt")
    return folder


def _offline(model_dir, tmp_path, *extra, timeout=90):
    done = duplexcadence("offline", "--model", model_dir, "--device", "cpu", "--input",
                         speech_clip(tmp_path / "in.wav"), "--output", tmp_path / "reply.wav", *extra,
                         timeout=timeout)
    return done.returncode, done.stderr


def test_a_25_mb_voice_prompt_is_refused_at_once(model_dir, tmp_path):
    started = time.monotonic()
    code, err = _offline(model_dir, tmp_path, "--voice", "HUGE")
    line = one_line(err)
    assert code == 2 and "HUGE.pt: a voice prompt of 200000 frames" in line and "3000-frame context" in line
    assert time.monotonic() - started < 60 and not (tmp_path / "reply.wav").exists()


def test_a_100_kb_role_is_refused_naming_the_limit(model_dir, tmp_path):
    code, err = _offline(model_dir, tmp_path, "--role", "Speak. " * 15_000)
    line = one_line(err)
    assert code == 2 and "the prompts are too long" in line and "at most 1500 (half the model's 3000-frame" in line
    assert not (tmp_path / "reply.wav").exists()


def test_the_limit_is_half_the_context_frame_for_frame(model_dir):
    from engine.loading.models import check_persona
    check_persona(model_dir, "FITS", "")  # 1488 + 12 silence = 1500
    with pytest.raises(ValueError, match=r"voice prompt OVER \(1489 frames\).* take 1501 frames.* at most 1500"):
        check_persona(model_dir, "OVER", "")
    with pytest.raises(ValueError, match="a role of"):
        check_persona(model_dir, "FITS", "Hi.")  # the role's tokens count too


def test_a_voice_longer_than_the_context_is_refused_even_as_the_default(model_dir):
    cfg = read_lm_checkpoint(model_dir, layout_only=True).cfg
    with pytest.raises(CheckpointError, match=r"WHOLE\.pt: a voice prompt of 3001 frames, longer than"):
        load_voice(model_dir / "voices" / "WHOLE.pt", cfg, torch.device("cpu"), torch.float32)


def test_the_cli_shows_progress_of_prompts_that_take_long(model_dir, tmp_path, monkeypatch, capsys):
    from app.cli.commands import main
    from app.conversation import prompt_progress
    monkeypatch.setattr(prompt_progress, "SHOWN_AFTER_S", 0.0)  # what takes 2 s on a slow CPU takes less here
    clip = speech_clip(tmp_path / "in.wav")
    assert main(["offline", "--model", str(model_dir), "--device", "cpu", "--input", str(clip),
                 "--output", str(tmp_path / "reply.wav"), "--voice", "FITS"]) == 0
    err = capsys.readouterr().err
    # Not a terminal: plain lines, no carriage returns.
    assert "\nplaying the voice and role prompts: 1500/1500 frames (100 %)\n" in "\n" + err
    assert "\rplaying" not in err


def test_prompt_progress_waits_two_seconds_then_shows_every_step_and_the_end():
    from app.conversation.prompt_progress import PromptProgress
    now, shown = [0.0], []
    progress = PromptProgress(lambda done, total: shown.append(done), every_s=0.5, clock=lambda: now[0])
    for done in range(1, 101):
        now[0] = (done - 1) * 0.1  # 10 s in all, a frame every 0.1 s
        progress(done, 100)
    assert shown[0] == 21 and shown[-1] == 100  # nothing in the first 2 s; the end always
    assert all(b - a >= 5 for a, b in zip(shown, shown[1:-1]))
    quick = []
    fast = PromptProgress(lambda done, total: quick.append(done), clock=lambda: 0.0)
    for done in range(1, 101):
        fast(done, 100)
    assert quick == []  # short prompts pass in silence


def _loaded(folder) -> LoadedModel:
    signals, results = LoaderSignals(), []
    signals.loaded.connect(results.append, Qt.ConnectionType.DirectConnection)
    signals.failed.connect(lambda *failure: results.append(failure), Qt.ConnectionType.DirectConnection)
    loader = ModelLoader(str(folder), "cpu", signals)
    loader.start()
    loader.join()
    assert isinstance(results[-1], LoadedModel), results
    return results[-1]


def _converse(loaded: LoadedModel, persona) -> tuple[list, list, bool]:
    """A conversation of the window's own worker fed from a file: (notices, failures, started)."""
    signals, notices, failures, started = ConversationSignals(), [], [], threading.Event()
    signals.notice.connect(notices.append, Qt.ConnectionType.DirectConnection)
    signals.failed.connect(failures.append, Qt.ConnectionType.DirectConnection)
    signals.started.connect(started.set, Qt.ConnectionType.DirectConnection)
    worker = ConversationWorker(loaded.session, FileFeed(SPEECH_SAMPLE), None, persona, signals)
    worker.start()
    deadline = time.monotonic() + 120
    while not (started.is_set() or failures) and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    worker.join(120)
    return notices, failures, started.is_set()


def test_the_window_refuses_a_long_role_before_playing_it(model_dir):
    notices, failures, started = _converse(_loaded(model_dir), ("DEMO", "Speak. " * 15_000))
    assert not started and len(failures) == 1 and "at most 1500 (half the model's" in failures[0]
    assert not any("Playing" in n for n in notices)


def test_the_window_shows_progress_of_long_prompts(model_dir, monkeypatch):
    from app.conversation import prompt_progress
    monkeypatch.setattr(prompt_progress, "SHOWN_AFTER_S", 0.0)
    notices, failures, started = _converse(_loaded(model_dir), ("FITS", ""))
    assert started and not failures
    assert "Playing the voice and role prompts to the model… 100 %" in notices
