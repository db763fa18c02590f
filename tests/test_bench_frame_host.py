"""bench.frame_host on the CPU with the demo model: the stamps follow the frame's path in order,
the timer's stages are beside them, and the session and Graphs are left as they were."""
from bench.frame_host import _stamped
from bench.run import input_frames
from engine import DuplexSession, RuntimeOptions, load_model
from engine.runtime.graphs import Graphs

ORDER = ("mark start", "mark encode", "mark backbone", "mark depformer", "mark decode", "synced", "returned")


def test_stamps_follow_the_frame_and_everything_is_restored():
    session = DuplexSession(load_model("demo"), RuntimeOptions(seed=3))
    run_graphs, mark = Graphs.run, session.timer.mark
    rows = _stamped(session, input_frames(30))
    assert Graphs.run is run_graphs and session.timer.mark == mark and "_prepare_more" not in vars(session)
    stamps, timer = rows[-1]  # output has started: every stage ran
    assert [k for k in sorted(stamps, key=stamps.get) if k in ORDER] == list(ORDER)
    assert "first replay" not in stamps  # the CPU runs eagerly
    assert stamps["mark start"] > 0 and stamps["returned"] > timer["total"] > sum(
        timer[s] for s in ("encode", "backbone", "depformer", "decode")) > 0
    session.close()
