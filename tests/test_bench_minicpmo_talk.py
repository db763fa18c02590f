"""bench.minicpmo_talk: where the live bench's person talks against the schedule, and how an
interruption's onset-to-silence time is read off a recording."""
import numpy as np
import pytest
import soundfile as sf

from bench import minicpmo_talk as talk
from bench.minicpmo_schedule import schedule
from bench.minicpmo_talk import END_IN_UNIT, LEAD_S, OVER_AT_S, OVER_S, microphone, runs, script, silences

RATE = 24000


def test_the_person_talks_in_listening_runs_and_stops_inside_the_reply_s_first_unit():
    plan = schedule(40)
    spans, over = script(plan, talk_over=False)
    assert over == []
    listening = [(first, count) for kind, first, count in runs(plan) if kind == "listen" and first + count < 40]
    assert len(spans) == len(listening) >= 3
    for k, ((start, end), (first, count)) in enumerate(zip(spans, listening)):
        assert start == first + LEAD_S
        assert end == first + count + END_IN_UNIT[k]  # inside the second of the next run's first unit
        assert plan[first + count].kind == "speak"


def test_talking_over_comes_inside_speaking_runs():
    plan = schedule(40)
    spans, over = script(plan, talk_over=True)
    speaking = {first: count for kind, first, count in runs(plan) if kind == "speak"}
    assert over and all(onset - OVER_AT_S in speaking for onset in over)
    assert all(speaking[onset - OVER_AT_S] > OVER_AT_S + OVER_S for onset in over)  # ends before the run does
    pcm = microphone(spans, 40, np.ones(16000, np.float32), 16000)
    assert pcm[int(over[0] * 16000)] == 1 and pcm[int((over[0] - 0.1) * 16000)] == 0


def test_an_interruption_is_timed_from_the_person_s_onset_to_the_speaker_s_silence(tmp_path):
    audio = np.zeros((4 * RATE, 2), np.float32)
    rng = np.random.default_rng(0)
    audio[:int(1.25 * RATE), 1] = 0.3 * rng.standard_normal(int(1.25 * RATE))  # the model, until 1.25 s
    audio[int(0.2 * RATE):int(0.5 * RATE), 0] = 0.2  # a word of the person's, long before
    audio[int(1.0 * RATE):int(2.0 * RATE), 0] = 0.2 * np.sin(np.arange(RATE) / 3)  # talking over it from 1 s
    audio[int(1.1 * RATE):int(1.15 * RATE), 0] = 0  # a short pause between words
    sf.write(tmp_path / "r.wav", audio, RATE)
    (cut,) = silences(tmp_path / "r.wav", [int(1.2 * RATE)])
    assert cut["onset_s"] == pytest.approx(1.0, abs=1e-3)
    assert cut["onset_to_silent_s"] == pytest.approx(0.25, abs=1e-3)


def test_an_interruption_away_from_the_person_s_speech_is_the_model_s_own():
    spans = [(9.5, 13.3), (20.5, 24.5)]
    after = 13.3 + talk.ANSWERED_S
    assert talk.caused_by_the_person(9.8, spans) and talk.caused_by_the_person(after - 0.01, spans)
    assert not talk.caused_by_the_person(9.4, spans) and not talk.caused_by_the_person(after + 0.01, spans)
    assert not talk.caused_by_the_person(17.0, spans)


def test_a_reply_is_timed_from_the_recording_and_split_at_the_unit_boundary(tmp_path):
    """The person stops at 2.3 s (a pause between words before it); the model, quiet since its last words
    at 0.5 s, sounds at 3.7 s: a 1.4 s reply, 0.7 s of it the rhythm (to the unit ending at 3 s), 0.7 s ours.
    The model's pause inside its own speech is no reply."""
    audio = np.zeros((8 * RATE, 2), np.float32)
    rng = np.random.default_rng(1)
    audio[:int(0.5 * RATE), 1] = 0.3 * rng.standard_normal(int(0.5 * RATE))
    audio[int(1.0 * RATE):int(2.3 * RATE), 0] = 0.2
    audio[int(1.5 * RATE):int(1.9 * RATE), 0] = 0  # between words
    audio[int(3.7 * RATE):int(5.0 * RATE), 1] = 0.3
    audio[int(5.4 * RATE):int(6.0 * RATE), 1] = 0.3  # after 0.4 s of the model's own quiet
    sf.write(tmp_path / "r.wav", audio, RATE)
    (reply,) = talk.reply_parts(tmp_path / "r.wav")
    assert reply["end_s"] == pytest.approx(2.3, abs=1e-3)
    assert reply["reply_s"] == pytest.approx(1.4, abs=1e-3)
    assert reply["rhythm_s"] == pytest.approx(0.7, abs=1e-3) and reply["ours_s"] == pytest.approx(0.7, abs=1e-3)
