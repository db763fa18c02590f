"""The reply time (app/window/reply_time.py) from period levels: the end of the person's speech to
the model's first sound at the speaker, the audio queued before that sound counted; speech that
overlaps the model's is no reply; a breath inside a sentence does not end the person's turn."""
from app.window.reply_time import ReplyTime

LOUD, QUIET, SPEAKS, SILENT = -25.0, -70.0, -20.0, -90.0


def _feed(reply: ReplyTime, periods: list[tuple[float, float]], backlog_s: float = 0.08) -> None:
    for index, (mic, speaker) in enumerate(periods):
        reply.add(index, mic, speaker, backlog_s)


def test_a_reply_is_timed_from_the_end_of_speech_to_the_first_sound():
    reply = ReplyTime()
    # Speech in periods 0-9 (it ends at 0.8 s), silence in 10-24, the model's first sound written in
    # period 25 (it plays as that period ends, 2.08 s, with nothing queued before it): 1.28 s.
    _feed(reply, [(LOUD, SILENT)] * 10 + [(QUIET, SILENT)] * 15 + [(QUIET, SPEAKS)] * 5)
    assert len(reply.replies) == 1 and abs(reply.replies[0] - 1.28) < 1e-9
    assert "1.28 s after you stopped speaking" in reply.line() and "over 1 reply" in reply.line()


def test_audio_queued_before_the_reply_delays_it():
    reply = ReplyTime()
    _feed(reply, [(LOUD, SILENT)] * 10 + [(QUIET, SILENT)] * 15 + [(QUIET, SPEAKS)], backlog_s=0.58)
    assert abs(reply.replies[0] - (1.28 + 0.5)) < 1e-9


def test_overlap_and_breaths_are_no_replies():
    reply = ReplyTime()
    _feed(reply, [(LOUD, SPEAKS)] * 10 + [(QUIET, SPEAKS)] * 10)  # talking together: no reply
    assert reply.replies == []
    reply = ReplyTime()
    # A 240 ms breath inside the person's speech does not end their turn; the reply counts from the end.
    _feed(reply, [(LOUD, SILENT)] * 5 + [(QUIET, SILENT)] * 3 + [(LOUD, SILENT)] * 5 + [(QUIET, SILENT)] * 10
          + [(QUIET, SPEAKS)])
    assert len(reply.replies) == 1 and abs(reply.replies[0] - (24 * 0.08 - 13 * 0.08)) < 1e-9  # speech ended at 13
    assert reply.line().startswith("Reply time:")
    assert ReplyTime().line().startswith("Reply time: —")


def test_a_once_a_second_model_s_reply_tells_its_wait_for_the_next_step():
    """Speech ends at 0.8 s; the model decides at the end of each second: 0.2 s of the 1.28 s reply is that
    wait. A model stepping every period tells no wait."""
    reply = ReplyTime(step_s=1.0)
    _feed(reply, [(LOUD, SILENT)] * 10 + [(QUIET, SILENT)] * 15 + [(QUIET, SPEAKS)] * 5)
    assert abs(reply.waits[0] - 0.2) < 1e-9
    assert "1.28 s after you stopped speaking (0.20 s of it until the model's next 1 s step)" in reply.line()
    plain = ReplyTime()
    _feed(plain, [(LOUD, SILENT)] * 10 + [(QUIET, SILENT)] * 15 + [(QUIET, SPEAKS)] * 5)
    assert "of it" not in plain.line()
