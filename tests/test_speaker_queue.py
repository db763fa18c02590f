"""The speaker's queue counts a gap only where the speaker ran dry in the model's speech: a
once-a-second model's step outlasts the silence queued before a reply, and that is not heard."""
import numpy as np

from app.audio.speaker_queue import SpeakerQueue

RATE, BLOCK = 48000, 480


def _play(queue: SpeakerQueue, blocks: int) -> None:
    out = np.empty(BLOCK, dtype=np.float32)
    for _ in range(blocks):
        queue.fill(out, 0.0)


def test_running_dry_counts_as_a_gap_in_speech_only():
    queue = SpeakerQueue(RATE, prebuffer_s=0.02, max_backlog_s=1.0)
    queue.put(np.zeros(4 * BLOCK, np.float32))  # the model listening: silence
    _play(queue, 6)  # ... then nothing came for a while (its step)
    assert queue.underflows == 0
    tone = (0.3 * np.sin(np.arange(4 * BLOCK) / 5)).astype(np.float32)
    queue.put(tone)  # its reply
    _play(queue, 6)  # ... and the next second came late
    assert queue.underflows == 1
    queue.put(np.concatenate([tone[:BLOCK + BLOCK // 2], np.zeros(3 * BLOCK, np.float32)]))
    _play(queue, 8)  # speech, then its pause, then dry: not heard
    assert queue.underflows == 1
