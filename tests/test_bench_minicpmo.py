"""bench.minicpmo end to end on the CPU: `--size tiny --units 8` (three forced listens, a four-unit
speaking turn, a listening unit), text-only, both sides on one checkpoint the reference's own
save_pretrained writes. It needs the reference: a MiniCPM-o-Demo checkout ($MINICPMO_DEMO,
default /work/ref/MiniCPM-o-Demo) and an interpreter with its transformers 4.51.0
($MINICPMO_REFERENCE_PYTHON, default the reference's venv /work/ref/refvenv), and is skipped
where either is missing: CI has no reference. No GPU."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = Path(os.environ.get("MINICPMO_DEMO", "/work/ref/MiniCPM-o-Demo"))
PYTHON = Path(os.environ.get("MINICPMO_REFERENCE_PYTHON", "/work/ref/refvenv/bin/python"))

pytestmark = pytest.mark.skipif(not (DEMO / "MiniCPMO45").is_dir() or not PYTHON.is_file(),
                                reason="needs the MiniCPM-o-Demo checkout and its Python (not in CI)")


def test_both_sides_run_the_schedule_and_do_the_same_work(tmp_path):
    output = tmp_path / "minicpmo.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([str(PYTHON), "-m", "bench.minicpmo", "--reference", str(DEMO), "--output", str(output),
                             "--size", "tiny", "--units", "8", "--dtype", "fp32", "--text-only"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["schedule"] == {"speaking": 4, "listening": 4, "turns": 1}
    assert report["same_work"]["count_differing"] == 0
    for side in ("reference", "ours"):
        units = report[side]["units"]
        assert len(units) == 8 and all(u["as_planned"] for u in units), side
        assert [u["decodes"] for u in units] == [0, 0, 0, 19, 19, 19, 19, 1], side
        assert [u["speech_tokens"] for u in units] == [0, 0, 0, 25, 25, 25, 25, 0], side
        assert set(units[3]["stages"]) == {"encoder", "llm_prefill", "llm_decode", "tts", "tail", "finalize", "other"}
        summary = report[side]["summary"]
        assert summary["speaking"]["count"] == 4 and summary["listening"]["count"] == 4
    assert report["ratios_reference_over_ours"]["speaking_p50_ms"] > 0
    assert "reference over ours" in result.stdout


def test_a_checkpoint_written_into_scratch_is_kept_for_the_next_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    reports = []
    for run in range(2):
        output = tmp_path / f"run{run}.json"
        result = subprocess.run([str(PYTHON), "-m", "bench.minicpmo", "--reference", str(DEMO), "--output", str(output),
                                 "--size", "tiny", "--units", "4", "--dtype", "fp32", "--text-only", "--sides", "ours",
                                 "--scratch", str(tmp_path / "scratch")], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        reports.append(json.loads(output.read_text()))
    assert [p.name for p in (tmp_path / "scratch").iterdir()] == ["MiniCPM-o-4_5-random-tiny-0-text"]
    first, again = (report["checkpoint"] for report in reports)
    assert "kept" not in first and again == {**first, "kept": True}
    assert reports[0]["ours"]["units"][3]["decodes"] == reports[1]["ours"]["units"][3]["decodes"] == 19
