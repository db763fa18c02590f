"""bench.minicpmo_live on the CPU with the tiny MiniCPM-o checkpoint: the app's engine thread without Qt,
real PortAudio streams on its own private PulseAudio server, the schedule's decisions forced, and the
report the GPU run commits (the figures here are the CPU's, not checked against a target; bench.minicpmo_talk
has its own tests)."""
import json
import subprocess
import sys

import pytest

from bench.minicpmo_schedule import summarize
from tests.audio_fixture import missing_tools
from tests.test_app_minicpmo import TINY

pytestmark = pytest.mark.audio


def test_the_live_bench_runs_the_schedule_through_the_engine_thread(tmp_path):
    assert missing_tools() == []
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"ours": {"summary": {"speaking": {"p99_ms": 250.0}}, "units": [{}] * 6}}))
    output = tmp_path / "live.json"
    argv = ["--folder", str(TINY), "--seconds", "10", "--output", str(output), "--device", "cpu",
            "--against", str(bench)]
    # In a process where Qt cannot be imported, as on the GPU machine.
    run = subprocess.run([sys.executable, "-c", "import sys; sys.modules['PyQt6'] = None; "
                          f"from bench.minicpmo_live import main; sys.exit(main({argv!r}))"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "speaking" in run.stdout
    report = json.loads(output.read_text())
    units = report["units"]
    assert len(units) >= 10 and report["failed"] == []
    # The schedule's decisions, unit by unit: three forced listens, then its first speaking run.
    assert [u["kind"] for u in units[:7]] == ["forced"] * 3 + ["speak"] * 4
    assert report["units_as_planned"] == len(units)
    assert [u["listen"] for u in units[3:7]] == [False] * 4
    # One unit per second of microphone audio: 16 engine frames of 80 ms per one-second unit (12.5
    # frames a second; a unit runs in the frame its second completes).
    gaps = {b["frame"] - a["frame"] for a, b in zip(units, units[1:])}
    assert gaps <= {12, 13}, gaps
    summary = report["summary"]
    assert summary["speaking"]["count"] == sum(u["kind"] == "speak" for u in units)
    assert summary["first_unit_ms"] == units[0]["ms"] > 0
    assert all(sum(u["stages"].values()) <= u["ms"] + 1e-6 for u in units)
    assert set(report["audio"]) == {"speech_skipped_s", "speaker_ran_dry", "microphone_lost_s"}
    # The person talked in the listening runs: the tiny checkpoint has no tail, so it never spoke aloud and
    # there was nothing to reply with or to interrupt.
    assert report["phase"] == "talk" and report["replies_s"] == [] and report["interruptions"] == 0
    assert report["self_interruptions"] == 0 and report["interrupted_at_s"] == []
    # Against the bench's run on as many units as it had (the decode slows as the context grows).
    first = summarize(units[:6])["speaking"]["p99_ms"]
    assert report["against"]["units"] == 6 and report["against"]["live_over_bench_p99"] == pytest.approx(first / 250.0)
