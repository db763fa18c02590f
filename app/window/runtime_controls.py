"""Switches for the runtime options that may change mid conversation (applied by the engine
from the next frame). The lists come from the engine (its options); a switch the loaded
model or device cannot use is disabled, with the engine's reason written under it. Before a
model loads, a switch this machine can never honour (CUDA's, on a CPU machine) already
shows off, with why: it shows what it will do here, not what it would do elsewhere."""
from __future__ import annotations

from PyQt6.QtCore import Qt, pyqtSignal
from PyQt6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QWidget,
)

from engine import MAX_BLOCK, POLICIES, TOGGLES, RuntimeOptions

from ..gpu.cuda_torch import find_nvidia_gpu
from .plain_words import POLICIES as POLICY_WORDS
from .plain_words import SWITCH_TERMS as TOGGLE_TERMS
from .plain_words import TOGGLES as TOGGLE_WORDS
from .plain_words import reason as plain_reason
from .plain_words import tip


def _reason_label() -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setStyleSheet("color: palette(mid); font-size: small;")
    label.hide()
    return label


NO_MODEL_REASON = "load a model: what this machine can use shows here"
NOT_ITS_POLICY = "the loaded model runs no such policy"
POLICY_HELP = tip("How often the large model runs. Every step: every 80 ms. Guessing ahead: one run "
                  "guesses several steps, played while the model stays silent, or while it speaks too.",
                  "policy", "backbone", "AR", "LISTEN", "SPEAK")


def machine_reasons(device: str) -> dict[str, str | None] | None:
    """What this machine can never honour of the runtime toggles, known before a model loads
    (a CPU machine: the CUDA ones); None where only a loaded model tells (an NVIDIA GPU: torch
    may still lack CUDA). `device`: auto, cuda or cpu. Asks the driver, never torch (the
    window's first paint imports none)."""
    if device != "cpu" and (device != "auto" or find_nvidia_gpu() is not None):
        return None
    return {name: toggle.unavailable("cpu") for name, toggle in TOGGLES.items()}


def _row_label(text: str, term: str) -> QLabel:
    label = QLabel(text)
    label.setToolTip(tip(text, term))
    return label


class RuntimeControls(QWidget):
    changed = pyqtSignal(object)  # RuntimeOptions: what will run, after the user changed a switch
    adapter_requested = pyqtSignal()  # the user wants to pick a predictor file

    def __init__(self, options: RuntimeOptions, parent=None, machine: dict[str, str | None] | None = None):
        """`machine`: toggle name -> why this machine cannot honour it (None: it may), known
        before any model loads; None: not known until one does."""
        super().__init__(parent)
        self._chosen = options
        self._machine = machine or {}
        self.policy = QComboBox()
        for value in POLICIES:
            self.policy.addItem(POLICY_WORDS[value], value)
        self.policy_reason = _reason_label()
        layout = QFormLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addRow(_row_label("Large model runs", "policy"), self.policy)
        layout.addRow(self.policy_reason)
        # DiffuPlex's knobs: the confidence a predicted frame needs, and the frames a wake predicts.
        self.tau = QDoubleSpinBox()
        self.tau.setRange(0.0, 1.0)
        self.tau.setSingleStep(0.05)
        self.tau.setToolTip(tip("Guessing ahead: a guessed step is played only with at least this confidence.", "τ"))
        self.block = QSpinBox()
        self.block.setRange(1, MAX_BLOCK)
        self.block.setToolTip(tip("Guessing ahead: the steps one run of the large model guesses ahead.", "block K"))
        self.verify = QCheckBox("Check guesses against what you say")
        self.verify.setToolTip(tip("Guessing ahead: a guessed step whose guess of your voice differs from what you "
                                   "said runs the large model early.", "verification", "wake"))
        layout.addRow(_row_label("Confidence needed", "τ"), self.tau)
        layout.addRow(_row_label("Steps guessed at once", "block K"), self.block)
        layout.addRow(self.verify)
        self._layout = layout
        self.adapter_label = QLabel("none")
        self.adapter_button = QPushButton("Choose…")
        self.adapter_button.clicked.connect(self.adapter_requested)
        adapter_row = QHBoxLayout()
        adapter_row.addWidget(self.adapter_label, 1)
        adapter_row.addWidget(self.adapter_button)
        layout.addRow("Predictor", adapter_row)
        self._adapter_row = adapter_row
        self.toggles: dict[str, QCheckBox] = {}
        self.reasons: dict[str, QLabel] = {}
        for name in TOGGLES:
            self.toggles[name] = QCheckBox(TOGGLE_WORDS[name])
            self.reasons[name] = _reason_label()
            layout.addRow(self.toggles[name])
            layout.addRow(self.reasons[name])
            self.toggles[name].toggled.connect(lambda on, name=name: self._user_set(name, on))
        self.policy.currentIndexChanged.connect(lambda _: self._user_set("policy", self.policy.currentData()))
        self.tau.valueChanged.connect(lambda value: self._user_set("tau", round(value, 2)))
        self.block.valueChanged.connect(lambda value: self._user_set("block", value))
        self.verify.toggled.connect(lambda on: self._user_set("verify", "semantic" if on else "off"))
        self.apply_capabilities(None)

    @property
    def graph_replay(self) -> QCheckBox:
        return self.toggles["graph_replay"]

    @property
    def demand_sized_state(self) -> QCheckBox:
        return self.toggles["demand_sized_state"]

    def show_adapter(self, name: str) -> None:
        """The predictor file the loaded model has ("" for none)."""
        self.adapter_label.setText(name or "none")

    def set_sampling(self, values: dict) -> None:
        """The Settings dialog's sampling (RuntimeOptions fields): kept with the user's choices
        and, like a switch, sent on to a running conversation (the seed: from its next reset)."""
        self._chosen = self._chosen.replace(**values)
        self.changed.emit(self.options())

    def options(self) -> RuntimeOptions:
        """What will run: the user's choices where they can be honoured, off where not."""
        return self._chosen.replace(policy=self.policy.currentData(), tau=round(self.tau.value(), 2),
                                    block=self.block.value(), verify="semantic" if self.verify.isChecked() else "off",
                                    **{name: box.isChecked() for name, box in self.toggles.items()})

    def chosen(self) -> RuntimeOptions:
        """What the user chose, whatever this model and machine can do."""
        return self._chosen

    def apply_capabilities(self, reasons: dict[str, str | None] | None) -> None:
        """Show what the loaded model can do (`session.capabilities()`), or, with None, that no
        model is loaded: every switch disabled, showing the user's choice. A choice that cannot
        be honoured shows off, with the reason beside it; the choice itself is kept, and comes
        back with a model that can honour it. None of this is the user changing their mind, so
        nothing is emitted."""
        self.blockSignals(True)
        for name, box in self.toggles.items():
            never = reasons is None and self._machine.get(name)  # whatever model loads
            reason = never or (NO_MODEL_REASON if reasons is None else reasons.get(name))
            box.setEnabled(reasons is not None and reason is None)
            box.setChecked(getattr(self._chosen, name) and not never and (reasons is None or reason is None))
            why = f"Unavailable on this machine: {never}" if never else f"Unavailable: {reason}"
            box.setToolTip(tip(TOGGLES[name].help if reason is None else why, *TOGGLE_TERMS[name]))
            # Beside it, not only on hover, in its words; "load a model" is said once, under the policy.
            shown = f"Unavailable{' on this machine' if never else ''}: {plain_reason(name, never or reason or '')}"
            self._show_reason(self.reasons[name], shown if never or (reasons is not None and reason) else None)
        model = self.policy.model()
        unavailable = []
        for row, value in enumerate(POLICIES):
            # A policy the loaded model does not name is one it does not have: not offered at all.
            reason = None if reasons is None else reasons.get(f"policy.{value}", NOT_ITS_POLICY)
            self.policy.view().setRowHidden(row, reason is NOT_ITS_POLICY)
            model.item(row).setEnabled(reason is None)
            # The engine's name for the choice, and why it cannot be made here.
            model.item(row).setData(POLICIES[value] + (f"\nUnavailable: {reason}" if reason else ""),
                                    Qt.ItemDataRole.ToolTipRole)
            if reason and reason is not NOT_ITS_POLICY:
                unavailable.append(f"{POLICY_WORDS[value]}: unavailable: {reason}")
        self.policy.setEnabled(reasons is not None)
        self.policy.setToolTip("\n".join([POLICY_HELP, *unavailable]))
        self._show_reason(self.policy_reason, NO_MODEL_REASON if reasons is None else "\n".join(unavailable))
        row = self.policy.findData(self._chosen.policy)
        self.policy.setCurrentIndex(row if row >= 0 and model.item(row).isEnabled() else 0)
        self.tau.setValue(self._chosen.tau)
        self.block.setValue(self._chosen.block)
        self.verify.setChecked(self._chosen.verify != "off")
        predicting = reasons is not None and any(reasons.get(f"policy.{p}", NOT_ITS_POLICY) is None
                                                 for p in POLICIES if p != "ar")
        named = reasons is None or any(f"policy.{p}" in reasons for p in POLICIES if p != "ar")
        for widget in (self.tau, self.block, self.verify):
            widget.setEnabled(predicting)
            self._layout.setRowVisible(widget, named)  # a model with no predicting policy has no knobs for one
        self._layout.setRowVisible(self._adapter_row, named)
        self.blockSignals(False)

    @staticmethod
    def _show_reason(label: QLabel, text: str | None) -> None:
        label.setText(text or "")
        label.setVisible(bool(text))

    def _user_set(self, name: str, value) -> None:
        if self.signalsBlocked():
            return
        self._chosen = self._chosen.replace(**{name: value})
        self.changed.emit(self.options())
