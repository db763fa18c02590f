"""The Audio box's echo line says when echo cancellation has learned the room, or that no echo
was heard, rather than "learning the room" for as long as the model speaks (which it did for
minutes on headphones, the user talking). The real WebRTC canceller, fed samples straight."""
import re

import numpy as np

from app.audio.echo_cancel import EchoCanceller, EchoSettings
from app.conversation.conversation_controller import _echo_text
from engine import SPEECH_SAMPLE, read_audio

RATE = 48000


def _echo_line(far: np.ndarray, mic: np.ndarray, at_s: list[float]) -> list[str]:
    """The echo line at each of `at_s`, the canceller fed as the engine thread feeds it (the
    speaker 100 ms ahead), straight from these samples (no sound devices)."""
    canceller = EchoCanceller(EchoSettings(), RATE, RATE)
    block, played, lines = RATE * 8 // 100, 0, []
    for start in range(0, len(mic), block):
        while played < min(len(far), start + block + RATE // 10):
            canceller.add_played(far[played:played + block], 10.0)
            played += block
        canceller.process(mic[start:start + block], 10.0)
        if at_s and start + block >= at_s[0] * RATE:
            lines.append(_echo_text(canceller.state()))
            at_s = at_s[1:]
    return lines


def test_the_echo_line_says_when_the_room_is_learned_or_no_echo_was_heard():
    model = np.tile(read_audio(SPEECH_SAMPLE, RATE), 2)[:10 * RATE]
    # The user talks all along (the sample backwards, three voices over one another, never a
    # pause), on headphones: the model's voice never reaches the microphone.
    backwards = model[::-1].copy()
    user = 0.4 * sum(np.roll(backwards, int(s * RATE)) for s in (1.3, 2.9, 4.1))
    assert _echo_line(model, user.astype(np.float32), [1.0, 9.5]) == [
        "learning the room…", "learned: no echo heard"]
    # Through loudspeakers: the microphone hears the model 60 ms later, 10 dB down.
    delay = int(0.06 * RATE)
    echo = np.concatenate([np.zeros(delay), model[:-delay]]) * 0.3
    echo += np.random.default_rng(0).standard_normal(len(echo)) * 1e-3
    learned = _echo_line(model, echo.astype(np.float32), [9.5])[0]
    removed = re.fullmatch(r"learned: (\d+) dB of echo removed", learned)
    assert removed and int(removed[1]) >= 15, learned
    # The model silent: nothing to learn from yet.
    assert _echo_line(np.zeros_like(model), user.astype(np.float32), [5.0]) == [
        "learns the room when the model speaks"]
