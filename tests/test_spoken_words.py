"""The window's and the recording's words follow the speaker: a frame's text once its speech has
begun to play, never the text of speech a cut dropped (app/conversation/spoken_words.py), with
the speaker queue's own count of its samples (SpeakerQueue.positions)."""
import numpy as np

from app.audio.speaker_queue import SpeakerQueue
from app.conversation.spoken_words import SpokenWords


def test_words_wait_for_their_speech_and_a_cut_drops_the_unheard():
    queue = SpeakerQueue(24000, prebuffer_s=0.0, max_backlog_s=5.0)
    words = SpokenWords()
    for index, text in enumerate([" one", " two", " three", " four"]):
        start = queue.positions()[0]
        queue.put(np.full(1920, 0.1, dtype=np.float32))
        words.add(index, start, text)
    out = np.zeros(1000, dtype=np.float32)
    queue.fill(out, 0.0)  # the first 1000 samples: frame 0 begins
    entered, gone, cut = queue.positions()
    assert entered == 4 * 1920 and words.heard(gone, cut) == [(0, " one")]
    for _ in range(3):
        queue.fill(out, 0.0)  # 4000 played: frames 1 and 2 have begun
    assert words.heard(*queue.positions()[1:]) == [(1, " two"), (2, " three")]
    queue.cut()
    queue.fill(out, 0.0)  # the fade (120 samples), then the rest is dropped: frame 3 never plays
    entered, gone, cut = queue.positions()
    assert gone == entered and cut[0] < 3 * 1920 < cut[1]
    assert words.heard(gone, cut) == []
    start = queue.positions()[0]
    queue.put(np.full(1920, 0.1, dtype=np.float32))
    words.add(4, start, " five")  # after the cut, speech plays again
    queue.fill(out, 0.0)
    assert words.heard(*queue.positions()[1:]) == [(4, " five")]
