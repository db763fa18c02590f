"""The live panel beside the conversation: whether the model keeps up (a headline), the
cadence chart with its legend, and, in the Engine pane (folded by default), the details:
statistics, stages, DiffuPlex, memory, audio health and the runtime switches."""
from __future__ import annotations

from typing import TYPE_CHECKING

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import QGroupBox, QLabel, QVBoxLayout, QWidget

from engine import FRAME_SECONDS, DiffuPlexStats, RuntimeOptions

from .audio_io import AudioCounters
from .cadence_chart import LEGEND, CadenceChart, colour
from .cadence_gauge import CadenceGauge
from .cadence_stats import CadenceStats
from .engine_pane import EnginePane
from .runtime_controls import RuntimeControls

if TYPE_CHECKING:
    from engine import FrameOutput

    from .conversation import FrameReport


class CadencePanel(QWidget):
    options_changed = pyqtSignal(object)  # RuntimeOptions: the user changed a switch (RuntimeControls.changed)
    adapter_requested = pyqtSignal()  # the user wants to pick a DiffuPlex predictor file

    def __init__(self, options: RuntimeOptions, parent=None, machine: dict[str, str | None] | None = None):
        """`machine`: what this machine cannot do before a model loads (RuntimeControls)."""
        super().__init__(parent)
        self._backlog_cap_s: float | None = None
        self.stats = CadenceStats()
        self.gauge = CadenceGauge()
        self.chart = CadenceChart(self.stats)
        # Lines break between the legend's entries, never inside one.
        self.legend = QLabel(" &nbsp; ".join(f'<span style="color:{colour(self, role).name()}">■</span>&nbsp;'
                                             + words.replace(" ", "&nbsp;") for role, words in LEGEND))
        self.legend.setWordWrap(True)
        self.speak_label = _detail(
            "SPEAK time: the engine time spent producing each second of the model's speech. Over 1 s "
            "(the cadence) that second fell behind; p99: 99 of 100 seconds took at most this long.")
        self.frame_label = _detail(
            "Engine time of each 80 ms frame (1/12.5 s of speech); an overrun took longer than the frame lasts.")
        self.stage_label = _detail(
            "Where a frame's time goes: encode (the microphone's audio to tokens), backbone (the large "
            "transformer), depformer (the small one that writes the audio codes), decode (codes to speech).")
        self.diffuplex_label = _detail(
            "DiffuPlex lets one backbone run (a wake) predict several frames; the predicted frames it "
            "plays run no backbone of their own. A revision: a wake that threw away a plan.")
        self.refusal_label = _detail(
            "Why predicted frames were not played, counted per wake: their confidence was below τ, the "
            "user did not say what was predicted (verification), or, under LISTEN, the model would speak.")
        self.memory_label = _detail(
            "GPU memory the app uses now; the streaming state is the conversation's memory of what was said.")
        self.audio_label = _detail(
            "The microphone's audio waiting for the engine, and audio lost: an overflow drops microphone "
            "audio, an underflow is a gap in the speaker's.")
        self.change_label = _detail("A switch you changed: being prepared, or when it took effect.")
        self.controls = RuntimeControls(options, machine=machine)
        self.controls.changed.connect(self.options_changed)
        self.controls.adapter_requested.connect(self.adapter_requested)
        controls_box = QGroupBox("Runtime (changes apply between frames)")
        QVBoxLayout(controls_box).addWidget(self.controls)
        body = QWidget()
        details = QVBoxLayout(body)
        details.setContentsMargins(0, 0, 0, 0)
        for label in (self.speak_label, self.frame_label, self.stage_label, self.diffuplex_label,
                      self.refusal_label, self.memory_label, self.audio_label, self.change_label):
            details.addWidget(label)
        details.addWidget(controls_box)
        self.engine_pane = EnginePane("Engine details", body)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.gauge)
        layout.addWidget(self.chart, 1)
        layout.addWidget(self.legend)
        layout.addWidget(self.engine_pane)
        self.reset()

    def reset(self, backlog_cap_s: float | None = None) -> None:
        """A new conversation starts a new chart; memory and audio lines wait for frames.
        `backlog_cap_s`: the microphone queue's cap in this conversation (None: uncapped)."""
        self._backlog_cap_s = backlog_cap_s
        self.stats = CadenceStats()
        self.diffuplex = DiffuPlexStats()
        self.diffuplex_label.setText("DiffuPlex: —")
        self.refusal_label.hide()
        self.chart.stats = self.stats
        self._refresh_labels()
        self.memory_label.setText("GPU memory in use: —")
        self.audio_label.setText("Audio: —")
        self.change_label.hide()
        self.chart.update()

    def add_frame(self, report: FrameReport) -> None:
        """One frame: its engine timings, the SPEAK times of seconds completed with it, what
        DiffuPlex did in it, the memory in use after it, and the audio streams' health."""
        out = report.output
        self.stats.add_frame(out.timings)
        self.diffuplex.add(out.diffuplex, out.timings)
        self._show_diffuplex()
        self.stats.add_seconds(list(out.speak_s))
        self._refresh_labels()
        memory = ("GPU memory in use: n/a (running on CPU)" if out.gpu_memory_bytes is None
                  else f"GPU memory in use: {out.gpu_memory_bytes / 2**30:.2f} GiB")
        memory += f" · streaming state {out.state_bytes / 2**20:.1f} MiB"
        self.memory_label.setText(memory)
        self.audio_label.setText(_audio_line(report.counters, self._backlog_cap_s))
        change = _change_line(out, report.index)
        if change is not None:
            self.change_label.setText(change)
            self.change_label.show()
        self.chart.update()

    # The runtime switches, for the window (their widget stays the panel's own).
    def apply_capabilities(self, reasons: dict[str, str | None] | None) -> None:
        """What the loaded model can do, or with None that no model is loaded (RuntimeControls)."""
        self.controls.apply_capabilities(reasons)

    def show_adapter(self, name: str) -> None:
        self.controls.show_adapter(name)

    def options(self) -> RuntimeOptions:
        """What will run: the user's choices where this model and machine can honour them."""
        return self.controls.options()

    def set_sampling(self, values: dict) -> None:
        self.controls.set_sampling(values)

    def chosen_options(self) -> RuntimeOptions:
        """What the user chose, whatever this model and machine can do (what the settings keep)."""
        return self.controls.chosen()

    def _show_diffuplex(self) -> None:
        d = self.diffuplex
        if not d.frames:
            self.diffuplex_label.setText("DiffuPlex: off (policy AR: the backbone runs every frame)")
            return
        self.diffuplex_label.setText(
            f"DiffuPlex: {d.played_per_wake:.2f} predicted frames played per wake · "
            f"{d.wakes_per_second:.2f} wakes/s · {d.revisions} revisions")
        lines = d.refusal_lines()
        if lines:
            tau = self.controls.options().tau
            confidence = "" if d.mean_confidence is None else \
                f" (the predictions' mean confidence {d.mean_confidence:.2f}; τ is {tau:.2f})"
            self.refusal_label.setText("Not played: " + "; ".join(lines) + confidence)
        self.refusal_label.setVisible(bool(lines))

    def _refresh_labels(self) -> None:
        s = self.stats
        self.gauge.show_stats(s)
        self.speak_label.setText(
            f"SPEAK per second: mean {s.speak_mean():.3f} s · p99 {s.speak_p99():.3f} s · "
            f"seconds over cadence {s.seconds_over()}")
        self.frame_label.setText(
            f"Per frame: mean {1000 * s.frame_mean():.1f} ms · p99 {1000 * s.frame_p99():.1f} ms"
            f" · overruns (> 80 ms) {s.frame_overruns()} of {s.frames}")
        self.stage_label.setText("Stages per frame (mean): " + " · ".join(
            f"{stage} {1000 * seconds:.1f} ms" for stage, seconds in s.stage_means().items()))


def _detail(tooltip: str) -> QLabel:
    """A line of the Engine pane, explained in plain words on hover."""
    label = QLabel()
    label.setWordWrap(True)
    label.setToolTip(tooltip)
    return label


def _audio_line(c: AudioCounters, backlog_cap_s: float | None) -> str:
    queue = f"mic queue {1000 * c.input_backlog_s:.0f} ms"
    if backlog_cap_s is not None:
        queue += f" (capped at {1000 * backlog_cap_s:.0f} ms; {c.dropped_input_s:.2f} s dropped)"
    line = (f"Audio: {queue} · mic overflows {c.input_overflows} · "
            f"speaker underflows {c.output_underflows}")
    if c.dropped_output_s:
        line += f" · speaker queue full, {c.dropped_output_s:.2f} s dropped"
    return line


_OPTION_NAMES = {"graph_replay": "graph replay", "demand_sized_state": "demand-sized state", "policy": "policy",
                 "text_temperature": "text temperature", "text_top_k": "text top-k",
                 "audio_temperature": "audio temperature", "audio_top_k": "audio top-k", "greedy": "greedy",
                 "seed": "seed", "tau": "confidence τ", "block": "block K", "verify": "verification"}


def _change_line(out: FrameOutput, index: int) -> str | None:
    """What the frame says of a change of options: being prepared, or taken effect; else None."""
    def names(fields):
        return ", ".join(_OPTION_NAMES.get(f, f) for f in fields)

    if out.applied:
        return f"Applied at {index * FRAME_SECONDS:.1f} s: {names(out.applied)}."
    if out.preparing is not None:
        fields, recorded, total = out.preparing
        return (f"Preparing {names(fields)}: recording graphs, {recorded} of {total}. "
                "The conversation goes on as it was until they are ready.")
    return None
