"""Barge-in's parts without devices: the detector (app/conversation/barge_in.py) fires on the
person's speech over the model's after 200 ms, never on speech alone, on the model alone or on a
short sound; the speaker queue's cut (app/audio/speaker_queue.py) fades the queued speech out
over 5 ms from the next sample the device takes, is silent from then on (within 1,920 samples of
the cut), drops the rest, and plays new speech after its prebuffer; the session drops the
speech it queued and calls the family's interrupt."""
from __future__ import annotations

import numpy as np

from app.audio.speaker_queue import CUT_FADE_S, SpeakerQueue
from app.conversation.barge_in import BargeIn

RATE = 24000
BLOCK = 256  # samples the device takes a callback


def test_speech_over_the_model_for_200_ms_interrupts_it():
    barge = BargeIn()
    assert barge.hold_periods == 3  # 240 ms of 80 ms periods: at least 200 ms
    loud, quiet, speaking, pause = -25.0, -70.0, -20.0, -90.0
    assert not any(barge.hears(loud, pause) for _ in range(20))  # the person alone
    assert not any(barge.hears(quiet, speaking) for _ in range(20))  # the model alone (its echo cancelled)
    assert [barge.hears(loud, speaking) for _ in range(2)] + [barge.hears(quiet, speaking)] == [False] * 3  # a cough
    assert [barge.hears(loud, speaking) for _ in range(3)] == [False, False, True]
    assert [barge.hears(loud, speaking) for _ in range(3)] == [False, False, True]  # again only after 3 more


def _play(queue: SpeakerQueue, samples: int) -> np.ndarray:
    out = np.empty(samples, dtype=np.float32)
    for start in range(0, samples, BLOCK):
        queue.fill(out[start:start + BLOCK], 0.0)
    return out


def test_a_cut_fades_the_queued_speech_out_and_drops_the_rest():
    queue = SpeakerQueue(RATE, prebuffer_s=0.1, max_backlog_s=2.0)
    tone = (0.5 * np.sin(np.arange(RATE) * 2 * np.pi * 440 / RATE)).astype(np.float32)
    queue.put(tone)
    before = _play(queue, 8 * BLOCK)
    assert np.abs(before).max() > 0.45  # playing
    queue.cut()
    after = _play(queue, 16 * BLOCK)
    fade = round(RATE * CUT_FADE_S)
    assert queue.cut_asked_at == queue.cut_at == 8 * BLOCK  # asked between blocks: the next one fades
    envelope = np.abs(after[:fade]) / np.maximum(np.abs(tone[8 * BLOCK:8 * BLOCK + fade]), 1e-9)
    assert np.all(np.diff(envelope[np.abs(tone[8 * BLOCK:8 * BLOCK + fade]) > 0.05]) <= 1e-6)  # only falls
    assert fade >= RATE * 0.005 and np.abs(after[fade // 2]) < 0.5 * 0.5 + 1e-6
    assert not np.any(after[fade:])  # silent from the fade's end: well within 1,920 samples of the cut
    assert queue.cut_dropped == RATE - 8 * BLOCK - fade and queue.ring.available() == 0
    queue.put(tone[:RATE // 2])  # the model speaks again: after the prebuffer, as at the start
    again = _play(queue, 12 * BLOCK)
    assert np.abs(again).max() > 0.45


def test_the_session_drops_its_queued_speech_and_interrupts_the_family(tmp_path):
    import torch

    from engine import DuplexSession, RuntimeOptions
    from engine.loading.models import load_model
    from tests import second_family

    session = DuplexSession(load_model(second_family.write(tmp_path / "second")), RuntimeOptions(seed=0))
    assert session.can_interrupt
    session.reset()
    session.audio.queue(torch.ones(24000))
    session.audio.queued()
    dropped = session.interrupt()
    assert session.conversation.interruptions == 1 and dropped > 0.9
    assert not np.any(session.audio.period_out())
