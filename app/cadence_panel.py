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
from .plain_words import OPTIONS, REFUSALS, STAGES, tip
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
        self.speak_label = _detail(tip(
            "The engine time spent producing each second of the model's speech. Over 1 s that second "
            "fell behind (it was not on time); 99 in 100 within: 99 of 100 seconds took at most this long.",
            "SPEAK time", "cadence", "p99"))
        self.frame_label = _detail(tip(
            "Engine time of each 80 ms step (1/12.5 s of speech); one too slow took longer than the step lasts.",
            "frame", "overrun"))
        self.stage_label = _detail(tip(
            "Where a step's time goes: hearing you (the microphone's audio into tokens), the large model "
            "(the transformer that thinks), the small model (the one that writes the voice's codes), making "
            "the sound (codes into speech).", "encode", "backbone", "depformer", "decode"))
        self.diffuplex_label = _detail(tip(
            "DiffuPlex lets one run of the large model guess several steps ahead; the guessed steps it "
            "plays need no run of their own. A plan dropped: a run that threw its guesses away.",
            "wake", "revision"))
        self.refusal_label = _detail(tip(
            "Why guessed steps were not played, counted per run of the large model: their confidence was "
            "below what is needed, you did not say what was guessed, or, guessing only while listening, "
            "the model was about to speak.", "τ", "verification", "LISTEN"))
        self.memory_label = _detail(tip(
            "GPU memory the app uses now; the conversation memory holds what was said so far.", "streaming state"))
        self.audio_label = _detail(tip(
            "Audio waiting: the microphone's for the engine, the model's for the speaker. Lost: microphone "
            "audio dropped, and gaps in the speaker's audio.", "queue", "overflow", "underflow"))
        self.change_label = _detail("A switch you changed: being prepared, or when it took effect.")
        self.controls = RuntimeControls(options, machine=machine)
        self.controls.changed.connect(self.options_changed)
        self.controls.adapter_requested.connect(self.adapter_requested)
        controls_box = QGroupBox("Engine switches (a change applies from the next step)")
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
        # As wide as the open pane needs, folded too: opening it must not move the splitter.
        self.setMinimumWidth(max(layout.minimumSize().width(), body.minimumSizeHint().width()))
        self.reset()

    def reset(self, backlog_cap_s: float | None = None) -> None:
        """A new conversation starts a new chart; memory and audio lines wait for frames.
        `backlog_cap_s`: the microphone queue's cap in this conversation (None: uncapped)."""
        self._backlog_cap_s = backlog_cap_s
        self.stats = CadenceStats()
        self.diffuplex = DiffuPlexStats()
        self.diffuplex_label.setText("Guessing ahead (DiffuPlex): —")
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
        self.diffuplex.add(out.report, out.timings)
        self._show_diffuplex()
        self.stats.add_seconds(list(out.speak_s))
        self._refresh_labels()
        memory = ("GPU memory in use: n/a (running on CPU)" if out.gpu_memory_bytes is None
                  else f"GPU memory in use: {out.gpu_memory_bytes / 2**30:.2f} GiB")
        memory += f" · conversation memory {out.state_bytes / 2**20:.1f} MiB"
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
            self.diffuplex_label.setText("Guessing ahead (DiffuPlex): off, the large model runs every step")
            return
        self.diffuplex_label.setText(
            f"Guessing ahead (DiffuPlex): {d.played_per_wake:.2f} guessed steps played per run of the large "
            f"model · {d.wakes_per_second:.2f} runs a second · {d.revisions} plans dropped")
        lines = [f"{count} × {REFUSALS.get(why, why)}"
                 for why, count in sorted(d.refusals.items(), key=lambda item: -item[1])]
        if lines:
            tau = self.controls.options().tau
            confidence = "" if d.mean_confidence is None else \
                f" (the guesses' mean confidence {d.mean_confidence:.2f}; {tau:.2f} is needed)"
            self.refusal_label.setText("Guesses not played: " + "; ".join(lines) + confidence)
        self.refusal_label.setVisible(bool(lines))

    def _refresh_labels(self) -> None:
        s = self.stats
        self.gauge.show_stats(s)
        self.speak_label.setText(
            f"Each second of speech took {s.speak_mean():.3f} s on average · 99 in 100 within "
            f"{s.speak_p99():.3f} s · {s.seconds_over()} seconds late")
        self.frame_label.setText(
            f"Each 80 ms step took {1000 * s.frame_mean():.1f} ms on average · 99 in 100 within "
            f"{1000 * s.frame_p99():.1f} ms · {s.frame_overruns()} of {s.frames} too slow")
        self.stage_label.setText("Where a step's time goes (average): " + " · ".join(
            f"{STAGES.get(stage, stage)} {1000 * seconds:.1f} ms" for stage, seconds in s.stage_means().items()))


def _detail(tooltip: str) -> QLabel:
    """A line of the Engine pane, explained in plain words on hover."""
    label = QLabel()
    label.setWordWrap(True)
    label.setToolTip(tooltip)
    return label


def _audio_line(c: AudioCounters, backlog_cap_s: float | None) -> str:
    waiting = f"microphone {1000 * c.input_backlog_s:.0f} ms"
    if backlog_cap_s is not None:
        waiting += f" (at most {1000 * backlog_cap_s:.0f} ms; {c.dropped_input_s:.2f} s dropped)"
    line = (f"Audio waiting: {waiting}, speaker {1000 * c.output_backlog_s:.0f} ms · lost: microphone "
            f"{c.input_overflows} times, gaps in the speaker's audio {c.output_underflows}")
    if c.dropped_output_s:  # the speaker fell further behind than allowed (AudioConfig.max_output_backlog_s)
        line += f" · {c.dropped_output_s:.2f} s of speech skipped"
    return line


def _change_line(out: FrameOutput, index: int) -> str | None:
    """What the frame says of a change of options: being prepared, or taken effect; else None."""
    def names(fields):
        return ", ".join(OPTIONS.get(f, f) for f in fields)

    if out.applied:
        return f"Applied at {index * FRAME_SECONDS:.1f} s: {names(out.applied)}."
    if out.preparing is not None:
        fields, recorded, total = out.preparing
        return (f"Preparing {names(fields)}: {recorded} of {total} parts ready. "
                "The conversation goes on as it was until they all are.")
    return None
