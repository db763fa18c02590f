"""A step's words come out as its speech plays (engine/runtime/step_audio.py): a once-a-second
model's second of text is spread over its second of speech, each word given out with the period
that plays its start; an interruption drops the words of the speech it drops, so the transcript
keeps what was said. A model whose step is the period (Moshi) gives each step's text with its
own period, as before."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.period import FRAME_SIZE, SAMPLE_RATE
from engine.runtime.step_audio import StepAudio, text_pieces


@pytest.mark.parametrize("text", [" Hello there, friend.", "你好，我们今天聊聊天气吧。", " mixed 中文 words ",
                                  "", "   ", "one"])
def test_pieces_join_back_to_the_text(text):
    pieces = text_pieces(text)
    assert "".join(pieces) == text
    assert all(piece.strip() for piece in pieces) or text.isspace()


def test_chinese_is_a_piece_per_character():
    assert text_pieces("你好 ok") == ["你", "好", " ok"]


def _periods(audio: StepAudio, n: int) -> list[str]:
    texts = []
    for _ in range(n):
        audio.period_out()
        texts.append(audio.period_text())
    return texts


def test_a_seconds_words_are_spread_over_its_speech():
    audio = StepAudio(16000, SAMPLE_RATE, 16000, torch.device("cpu"))
    words = " one two three four five"
    audio.queue(torch.ones(SAMPLE_RATE))  # a second of speech
    audio.queued(words)
    texts = _periods(audio, 13)  # 12.5 periods play it
    assert "".join(texts) == words
    assert [i for i, t in enumerate(texts) if t] == [0, 2, 5, 7, 10]  # at 0, 0.2, 0.4, 0.6, 0.8 s
    assert _periods(audio, 2) == ["", ""]


def test_text_without_speech_comes_after_the_speech_before_it():
    audio = StepAudio(16000, SAMPLE_RATE, 16000, torch.device("cpu"))
    audio.queue(torch.ones(2 * FRAME_SIZE))
    audio.queued(" spoken")
    audio.queue(None)
    audio.queued(" silent")
    assert _periods(audio, 3) == [" spoken", "", " silent"]


def test_an_interruption_drops_the_words_of_the_speech_it_drops():
    audio = StepAudio(16000, SAMPLE_RATE, 16000, torch.device("cpu"))
    audio.queue(torch.ones(SAMPLE_RATE))
    audio.queued(" one two three four five")
    said = "".join(_periods(audio, 4))  # 0.32 s played
    assert said == " one two"
    assert audio.drop_speech() == SAMPLE_RATE - 4 * FRAME_SIZE
    assert _periods(audio, 12) == [""] * 12 and not np.any(audio.period_out())
    audio.queue(torch.ones(FRAME_SIZE))  # the next turn's words come with its speech
    audio.queued(" again")
    assert _periods(audio, 1) == [" again"]


def test_a_period_step_gives_its_text_with_its_own_period():
    audio = StepAudio(SAMPLE_RATE, SAMPLE_RATE, FRAME_SIZE, torch.device("cpu"))
    for word in (" a", "", " b c"):
        audio.queue(torch.ones(FRAME_SIZE))
        audio.queued(word)
        assert _periods(audio, 1) == [word]
