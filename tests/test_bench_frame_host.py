"""bench.frame_host on the CPU with the demo model: the stamps follow the frame's path in order,
the timer's stages are beside them, and the session and Graphs are left as they were."""
import engine.runtime.step_audio
import engine.session
from bench.frame_host import _stamped, measure
from bench.run import input_frames
from engine import DuplexSession, RuntimeOptions, load_model
from engine.files.finite import finite_into
from engine.runtime.graphs import Graphs

ORDER = ("mark start", "finite", "conversation", "encode call", "first run", "first tick", "mark encode",
         "mark backbone", "mark depformer", "mark decode", "synced", "returned")


def test_stamps_follow_the_frame_and_everything_is_restored():
    session = DuplexSession(load_model("demo"), RuntimeOptions(seed=3))
    run_graphs, mark = Graphs.run, session.timer.mark
    rows = _stamped(session, input_frames(30))
    assert Graphs.run is run_graphs and session.timer.mark == mark
    assert engine.runtime.step_audio.finite_into is finite_into
    assert not {"_prepare_more", "run", "advance", "step", "encode"} & (
        set(vars(session)) | set(vars(session.runner)) | set(vars(session.store)) | set(vars(session.conversation)))
    stamps, timer = rows[-1]  # output has started: every stage ran
    assert [k for k in sorted(stamps, key=stamps.get) if k in ORDER] == list(ORDER)
    assert "first replay" not in stamps  # the CPU runs eagerly
    assert stamps["mark start"] > 0 and stamps["returned"] > timer["total"] > sum(
        timer[s] for s in ("encode", "backbone", "depformer", "decode")) > 0
    session.close()


def test_the_drivers_wait_is_measured_in_the_sessions_place_and_put_back():
    waits, own = [], engine.session.wait_for

    def counted(device):
        waits.append(device)

    engine.session.wait_for = counted
    try:
        driver = measure("demo", 60, "driver")
        assert driver["wait"] == "driver" and not waits  # the session waited the driver's way
        assert engine.session.wait_for is counted  # and its own wait is back
        assert measure("demo", 60)["wait"] == "stream" and len(waits) == 60
    finally:
        engine.session.wait_for = own
    assert driver["timer_median_us"]["total"] > 0 and "synced" in driver["host_stamps_median_us"]
