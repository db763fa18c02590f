"""Cadence statistics and the panel that draws them, from synthetic timings."""
import os

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.audio.audio_io import AudioCounters  # noqa: E402
from app.conversation.engine_thread import FrameReport  # noqa: E402
from app.window.cadence_chart import FRAME_UNDER, OVER, UNDER, colour  # noqa: E402
from app.window.cadence_panel import CadencePanel  # noqa: E402
from app.window.cadence_stats import CadenceStats  # noqa: E402
from engine import FrameOutput, RuntimeOptions  # noqa: E402
from engine.families.moshi.diffuplex.stats import DiffuPlexStats  # noqa: E402
from engine.families.moshi.frame import STAGE_WORDS  # noqa: E402


def _moshi_panel(options: RuntimeOptions, backlog_cap_s: float | None = None) -> CadencePanel:
    """A panel reset as a conversation with a Moshi-family model resets it (its tally, its words)."""
    panel = CadencePanel(options)
    panel.reset(backlog_cap_s, DiffuPlexStats(), STAGE_WORDS)
    return panel


def test_frame_statistics_and_overruns():
    stats = CadenceStats()
    times = [0.05] * 20 + [0.12] * 5  # the last five frames are over 80 ms
    for t in times:
        stats.add_frame({"encode": 0.01, "backbone": t - 0.02, "depformer": 0.005,
                         "decode": 0.005, "total": t})
    assert stats.frames == 25
    assert stats.frame_overruns() == 5
    assert stats.frame_mean() == pytest.approx(np.mean(times))
    assert stats.frame_p99() == pytest.approx(np.percentile(times, 99))
    means = stats.stage_means()
    assert means["encode"] == pytest.approx(0.01)
    assert means["backbone"] == pytest.approx(np.mean(times) - 0.02)


def test_second_statistics_count_seconds_over_the_cadence():
    stats = CadenceStats()
    assert stats.speak_mean() == 0 and stats.seconds_over() == 0
    stats.add_seconds([0.4, 0.9])
    stats.add_seconds([1.3])
    assert stats.seconds == [0.4, 0.9, 1.3]
    assert stats.seconds_over() == 1
    assert stats.speak_mean() == pytest.approx(0.8667, abs=1e-4)
    assert stats.speak_p99() == pytest.approx(np.percentile([0.4, 0.9, 1.3], 99))


def _timings(total: float) -> dict:
    return {"encode": 0.1 * total, "backbone": 0.6 * total, "depformer": 0.2 * total,
            "decode": 0.1 * total, "total": total}


def _report(timings: dict, speak_s: list[float], gpu_memory: int | None, counters: AudioCounters,
            state_memory: int = 0) -> FrameReport:
    out = FrameOutput(np.zeros(1920, np.float32), "", None, timings, tuple(speak_s), state_memory, gpu_memory)
    return FrameReport(0, out, -60.0, counters)


def _colour_count(chart, role: str) -> int:
    """Pixels of the chart painted in `role`'s colour (app.window.theme's, on the chart's palette)."""
    image = chart.grab().toImage()
    pixels = image.constBits()
    pixels.setsize(image.sizeInBytes())
    argb = np.frombuffer(pixels, dtype=np.uint32)
    return int((argb == colour(chart, role).rgba()).sum())


def test_panel_draws_bars_coloured_by_cadence(qtbot):
    panel = _moshi_panel(RuntimeOptions(), backlog_cap_s=0.32)
    qtbot.addWidget(panel)
    panel.resize(600, 500)
    counters = AudioCounters(1, 2, 0.5, 0.0, 0.08)
    for i in range(25):  # seconds well under the cadence
        panel.add_frame(_report(_timings(0.05), [0.625] if i in (12, 24) else [], None, counters))
    assert _colour_count(panel.chart, UNDER) > 0 and _colour_count(panel.chart, OVER) == 0
    for i in range(25):  # over: 1.375 s per second
        panel.add_frame(_report(_timings(0.11), [1.375] if i in (12, 24) else [], 3 * 2**30, counters,
                                204 * 2**20))
    assert _colour_count(panel.chart, OVER) > 0
    assert "25 of 50 too slow" in panel.frame_label.text()
    assert "2 seconds late" in panel.speak_label.text()
    assert "3.00 GiB" in panel.memory_label.text()
    assert "conversation memory 204.0 MiB" in panel.memory_label.text()
    assert "large model 48.0 ms" in panel.stage_label.text()  # mean of 30 and 66 ms
    assert "gaps in the speaker's audio 2" in panel.audio_label.text()
    assert "at most 320 ms" in panel.audio_label.text()
    panel.reset()
    assert panel.stats.frames == 0
    assert _colour_count(panel.chart, OVER) == 0


def test_panel_says_when_a_change_is_prepared_and_when_it_took_effect(qtbot):
    from engine import Preparing
    panel = _moshi_panel(RuntimeOptions())
    qtbot.addWidget(panel)
    counters = AudioCounters(1, 0, 0.0, 0.0, 0.08)
    timings, pcm = _timings(0.01), np.zeros(1920, np.float32)
    assert panel.change_label.isHidden()
    preparing = FrameOutput(pcm, "", None, timings, (), 0, None, preparing=Preparing(("audio_top_k", "greedy"), 12, 50))
    panel.add_frame(FrameReport(40, preparing, -60.0, counters))
    assert not panel.change_label.isHidden()
    assert "Preparing audio top-k, greedy: 12 of 50 parts ready" in panel.change_label.text()
    panel.add_frame(FrameReport(41, FrameOutput(pcm, "", None, timings, (), 0, None), -60.0, counters))
    assert "12 of 50" in panel.change_label.text()  # a frame without news keeps the line
    applied = FrameOutput(pcm, "", None, timings, (), 0, None, applied=("audio_top_k", "greedy"))
    panel.add_frame(FrameReport(50, applied, -60.0, counters))
    assert panel.change_label.text() == "Applied at 4.0 s: audio top-k, greedy."
    panel.reset()
    assert panel.change_label.isHidden()


def test_switches_follow_what_the_engine_can_do(qtbot):
    panel = _moshi_panel(RuntimeOptions(policy="speak", demand_sized_state=False))
    qtbot.addWidget(panel)
    controls = panel.controls
    emitted = []
    controls.changed.connect(emitted.append)
    on_gpu = {"graph_replay": None, "demand_sized_state": None, "policy.ar": None,
              "policy.listen": None, "policy.speak": "needs the DiffuPlex predictor"}
    controls.apply_capabilities(on_gpu)
    assert controls.graph_replay.isEnabled() and controls.graph_replay.isChecked()
    assert controls.options().policy == "ar"  # SPEAK is not available: back to AR
    assert "needs the DiffuPlex predictor" in controls.policy.toolTip()
    assert not controls.policy.model().item(2).isEnabled()
    assert controls.policy.model().item(1).isEnabled()
    controls.apply_capabilities({**on_gpu, "graph_replay": "needs CUDA"})
    assert not controls.graph_replay.isEnabled() and not controls.graph_replay.isChecked()
    assert "needs CUDA" in controls.graph_replay.toolTip()
    assert "needs CUDA" in controls.reasons["graph_replay"].text()  # beside it, not only on hover
    assert not controls.reasons["graph_replay"].isHidden() and controls.reasons["demand_sized_state"].isHidden()
    assert "needs the DiffuPlex predictor" in controls.policy_reason.text()
    assert emitted == []  # forced fallbacks are not the user's choices
    controls.demand_sized_state.click()
    assert emitted[-1].demand_sized_state is True


def test_the_users_choice_is_kept_where_it_cannot_be_honoured(qtbot):
    panel = _moshi_panel(RuntimeOptions())
    qtbot.addWidget(panel)
    controls = panel.controls
    # No model yet: nothing can be ticked, the choice shows, and the reason says why.
    assert not controls.graph_replay.isEnabled() and controls.graph_replay.isChecked()
    assert "load a model" in controls.policy_reason.text()
    on_cpu = {"graph_replay": "needs a CUDA GPU", "demand_sized_state": "needs CUDA virtual memory",
              "policy.ar": None, "policy.listen": "not yet", "policy.speak": "not yet"}
    controls.apply_capabilities(on_cpu)
    assert not controls.options().graph_replay and not controls.options().demand_sized_state
    assert controls.chosen() == RuntimeOptions()  # kept, and what the settings remember
    on_gpu = dict.fromkeys(on_cpu)
    controls.apply_capabilities(on_gpu)
    assert controls.options() == RuntimeOptions()  # applied again where it can be honoured


def test_the_headline_says_whether_the_model_keeps_up_and_by_how_much(qtbot):
    panel = _moshi_panel(RuntimeOptions())
    qtbot.addWidget(panel)
    counters = AudioCounters(1, 0, 0.0, 0.0, 0.08)
    assert panel.gauge.headline.text().startswith("Waiting")
    panel.add_frame(_report(_timings(0.01), [0.11], None, counters))
    assert panel.gauge.headline.text() == "Keeping up: 9.1× as fast as needed"  # 1 / 0.11 s per second
    assert "0.11 s" in panel.gauge.detail.text()
    for _ in range(5):  # the last seconds decide: the model has fallen behind
        panel.add_frame(_report(_timings(0.1), [1.4], None, counters))
    assert panel.gauge.headline.text() == "Falling behind"
    assert "5 of 6 seconds fell behind" in panel.gauge.detail.text()
    # The legend says what each colour means, in words.
    for role in (UNDER, OVER, FRAME_UNDER):
        assert colour(panel, role).name() in panel.legend.text()
    assert panel.engine_pane.body.isHidden()  # the details wait, folded


def test_diffuplex_says_how_many_predicted_frames_play_and_why_not(qtbot):
    from engine.families.moshi.diffuplex.stats import WakeReport
    panel = _moshi_panel(RuntimeOptions(policy="speak", tau=0.5))
    qtbot.addWidget(panel)
    counters = AudioCounters(1, 0, 0.0, 0.0, 0.08)
    pcm = np.zeros(1920, np.float32)
    reports = [WakeReport(True, 0), WakeReport(False, 0, confidence=0.9), WakeReport(True, 2, "below_tau", 0.1),
               WakeReport(True, 3, "user_missed", 0.7), WakeReport(True, 3, "below_tau", 0.2)]
    for i, report in enumerate(reports):
        out = FrameOutput(pcm, "", None, _timings(0.01), (), 0, None, report=report)
        panel.add_frame(FrameReport(i, out, -60.0, counters))
    guessing, refused = panel.report_lines()
    assert guessing.startswith("Guessing ahead (DiffuPlex): 0.25 guessed steps played per run of the large model")
    assert refused == (
        "Guesses not played: 2 × the guess was less sure than needed; 1 × you did not say what was "
        "guessed (the guesses' mean confidence 0.47; 0.50 is needed)")
    assert panel.stage_label.text().count("large model") == 1  # one large-model figure, in the stages
    assert all(label.toolTip() for label in (panel.speak_label, panel.frame_label, panel.stage_label,
                                              *panel.report_labels, panel.memory_label, panel.audio_label))


def test_a_once_a_second_model_is_judged_by_its_second(qtbot):
    """A model whose step is a second runs it in one period of twelve, which may take up to the
    second (the audio waits meanwhile): that period is not "too slow", and the chart has no
    80 ms part for it, nor the legend its colour."""
    panel = CadencePanel(RuntimeOptions())
    qtbot.addWidget(panel)
    panel.resize(600, 400)
    panel.reset(None, None, {}, step_s=1.0)
    counters = AudioCounters(0, 0, 0.0, 0.0, 0.08)
    for i in range(60):
        step = i % 12.5 < 1  # a unit's period: 0.45 s of work
        panel.add_frame(_report(_timings(0.45 if step else 0.001), [0.45] if step else [], None, counters))
    assert panel.stats.frame_overruns() == 0
    assert "Each 80 ms period took" in panel.frame_label.text() and "0 of 60 over the 1 s" in panel.frame_label.text()
    assert panel.chart.painted_words() == ("Time to produce each second of speech", "1 s")
    assert colour(panel, FRAME_UNDER).name() not in panel.legend.text()
    panel.show()
    assert _colour_count(panel.chart, UNDER) > 0 and _colour_count(panel.chart, OVER) == 0
    panel.add_frame(_report(_timings(1.3), [1.3], None, counters))  # a unit over its second
    assert panel.stats.frame_overruns() == 1 and panel.stats.seconds_over() == 1
    panel.reset()  # then a model of 80 ms steps: both parts again
    assert "Time to produce each 80 ms step" in panel.chart.painted_words()
    assert colour(panel, FRAME_UNDER).name() in panel.legend.text()
