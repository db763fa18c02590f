"""The live panel beside the conversation: whether the model keeps up (a headline), the
cadence chart with its legend, and, in the Engine pane (folded by default), the details:
statistics, the model's stages and what its family reports of its steps (each in the family's
own words), memory, audio health and the runtime switches."""
from __future__ import annotations

from typing import TYPE_CHECKING

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import QGroupBox, QLabel, QVBoxLayout, QWidget

from engine import FRAME_SECONDS, RuntimeOptions

from ..audio.audio_io import AudioCounters
from .cadence_chart import CadenceChart, colour, legend
from .cadence_gauge import CadenceGauge
from .cadence_stats import CadenceStats
from .engine_pane import EnginePane
from .plain_words import OPTIONS, tip
from .reply_time import ReplyTime
from .runtime_controls import RuntimeControls

if TYPE_CHECKING:
    from engine import FrameOutput

    from ..conversation.engine_thread import FrameReport


class CadencePanel(QWidget):
    options_changed = pyqtSignal(object)  # RuntimeOptions: the user changed a switch (RuntimeControls.changed)
    adapter_requested = pyqtSignal()  # the user wants to pick a predictor file

    def __init__(self, options: RuntimeOptions, parent=None, machine: dict[str, str | None] | None = None):
        """`machine`: what this machine cannot do before a model loads (RuntimeControls)."""
        super().__init__(parent)
        self._backlog_cap_s: float | None = None
        self.stats = CadenceStats()
        self.gauge = CadenceGauge()
        self.chart = CadenceChart(self.stats)
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.speak_label = _detail(tip(
            "The engine time spent producing each second of the model's speech. Over 1 s that second "
            "fell behind (it was not on time); 99 in 100 within: 99 of 100 seconds took at most this long.",
            "SPEAK time", "cadence", "p99"))
        self.frame_label = _detail(tip(
            "Engine time of each 80 ms step (1/12.5 s of speech); one too slow took longer than the step lasts.",
            "frame", "overrun"))
        self.stage_label = _detail("")
        self.reply_label = _detail("From the end of your speech to the model's first sound at the speaker: the "
                                   "one-second rhythm plus a unit's work for a model that answers once a second.")
        # What the model's family reports of its steps: as many lines as it says (Tally.lines).
        self.report_box = QWidget()
        self._report_layout = QVBoxLayout(self.report_box)
        self._report_layout.setContentsMargins(0, 0, 0, 0)
        self.report_labels: list[QLabel] = []
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
        for label in (self.speak_label, self.frame_label, self.stage_label, self.reply_label, self.report_box,
                      self.memory_label, self.audio_label, self.change_label):
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

    def reset(self, backlog_cap_s: float | None = None, tally=None, stage_words: dict[str, str] | None = None,
              step_s: float = FRAME_SECONDS) -> None:
        """A new conversation starts a new chart; memory and audio lines wait for frames.
        `backlog_cap_s`: the microphone queue's cap in this conversation (None: uncapped);
        `tally`: the family's tally of its step reports (session.tally()), `stage_words` its
        stages in words (session.stage_words); `step_s`: the audio a model's step hears."""
        self._backlog_cap_s = backlog_cap_s
        self.stats = CadenceStats(step_s)
        # Lines break between the legend's entries, never inside one.
        self.legend.setText(" &nbsp; ".join(f'<span style="color:{colour(self, role).name()}">■</span>&nbsp;'
                                            + words.replace(" ", "&nbsp;") for role, words in legend(self.stats)))
        self.reply = ReplyTime(step_s)
        self.reply_label.setText(self.reply.line())
        self.tally = tally
        self._stage_words = stage_words or {}
        # Each stage's words beside the family's own name for it, as `tip` pairs words and terms.
        self.stage_label.setToolTip("Where a step's time goes, stage by stage, in the order the model runs them.\n"
                                    + "; ".join(f"{words}: {stage}" for stage, words in self._stage_words.items()))
        self._show_report([])
        self.chart.stats = self.stats
        self._refresh_labels()
        self.memory_label.setText("GPU memory in use: —")
        self.audio_label.setText("Audio: —")
        self.change_label.hide()
        self.chart.update()

    def add_frame(self, report: FrameReport) -> None:
        """One frame: its engine timings, the SPEAK times of seconds completed with it, what its
        family reported of it, the memory in use after it, and the audio streams' health."""
        out = report.output
        self.stats.add_frame(out.timings)
        if self.tally is not None:
            self.tally.add(out.report, out.timings)
            self._show_report(self.tally.lines(self.controls.options()))
        self.stats.add_seconds(list(out.speak_s))
        replies = len(self.reply.replies)
        self.reply.add(report.index, report.level_dbfs, report.output_dbfs, report.counters.output_backlog_s)
        if len(self.reply.replies) != replies:
            self.reply_label.setText(self.reply.line())
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

    def _show_report(self, lines: list[tuple[str, str]]) -> None:
        """The family's lines, each a label with its tooltip; the labels a shorter report
        leaves over are hidden."""
        while len(self.report_labels) < len(lines):
            label = _detail("")
            self._report_layout.addWidget(label)
            self.report_labels.append(label)
        for label, (text, tooltip) in zip(self.report_labels, lines):
            label.setText(text)
            label.setToolTip(tooltip)
        for i, label in enumerate(self.report_labels):
            label.setVisible(i < len(lines))

    def report_lines(self) -> list[str]:
        """What the family's report lines show now."""
        return [label.text() for label in self.report_labels if not label.isHidden()]

    def _refresh_labels(self) -> None:
        s = self.stats
        self.gauge.show_stats(s)
        self.speak_label.setText(
            f"Each second of speech took {s.speak_mean():.3f} s on average · 99 in 100 within "
            f"{s.speak_p99():.3f} s · {s.seconds_over()} seconds late")
        # A once-a-second model's step runs in one period of twelve: that period may take the second.
        each, slow = (("step", "too slow") if s.step_s <= FRAME_SECONDS
                      else ("period", f"over the {s.step_s:g} s a step may take"))
        self.frame_label.setText(
            f"Each 80 ms {each} took {1000 * s.frame_mean():.1f} ms on average · 99 in 100 within "
            f"{1000 * s.frame_p99():.1f} ms · {s.frame_overruns()} of {s.frames} {slow}")
        self.stage_label.setText("Where a step's time goes (average): " + " · ".join(
            f"{self._stage_words.get(stage, stage)} {1000 * seconds:.1f} ms"
            for stage, seconds in s.stage_means().items()))


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
