"""Switches for the runtime options that may change mid conversation (applied by the engine
from the next frame). A switch the loaded model or device cannot use is disabled, with the
engine's reason as its tooltip."""
from __future__ import annotations

from PyQt6.QtCore import Qt, pyqtSignal
from PyQt6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QWidget

POLICIES = [
    ("ar", "AR (backbone every frame)"),
    ("listen", "DiffuPlex LISTEN"),
    ("speak", "DiffuPlex SPEAK"),
]
TIPS = {
    "graph_replay": "Replay captured CUDA graphs instead of launching every kernel from Python.",
    "demand_sized_state": "Back streaming state with memory only as the conversation needs "
                          "it, at a stable address.",
}
DEFAULT_CHOICES = {"policy": "ar", "graph_replay": False, "demand_sized_state": False}


class RuntimeControls(QWidget):
    changed = pyqtSignal(dict)  # every option, as RuntimeOptions field -> value

    def __init__(self, choices: dict, parent=None):
        super().__init__(parent)
        self.policy = QComboBox()
        for value, label in POLICIES:
            self.policy.addItem(label, value)
        self.graph_replay = QCheckBox("CUDA graph replay")
        self.graph_replay.setToolTip(TIPS["graph_replay"])
        self.demand_sized_state = QCheckBox("Demand-sized streaming state")
        self.demand_sized_state.setToolTip(TIPS["demand_sized_state"])
        layout = QFormLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addRow("Policy", self.policy)
        layout.addRow(self.graph_replay)
        layout.addRow(self.demand_sized_state)
        self._reasons: dict[str, str | None] = {}
        self.set_choices({**DEFAULT_CHOICES, **choices})
        self.policy.currentIndexChanged.connect(self._emit)
        self.graph_replay.toggled.connect(self._emit)
        self.demand_sized_state.toggled.connect(self._emit)

    def choices(self) -> dict:
        return {"policy": self.policy.currentData(),
                "graph_replay": self.graph_replay.isChecked(),
                "demand_sized_state": self.demand_sized_state.isChecked()}

    def set_choices(self, choices: dict) -> None:
        self.policy.setCurrentIndex(max(0, self.policy.findData(choices["policy"])))
        self.graph_replay.setChecked(bool(choices["graph_replay"]))
        self.demand_sized_state.setChecked(bool(choices["demand_sized_state"]))

    def apply_capabilities(self, reasons: dict[str, str | None]) -> None:
        """Disable what the engine says it cannot do here, and say why. An unusable choice
        falls back to the plain runtime (which always works), silently: that is not the
        user changing their mind, so it is not remembered as such."""
        self._reasons = dict(reasons)
        self.blockSignals(True)
        for name, box in (("graph_replay", self.graph_replay),
                          ("demand_sized_state", self.demand_sized_state)):
            reason = reasons.get(name)
            box.setEnabled(reason is None)
            box.setToolTip(TIPS[name] if reason is None else f"Unavailable: {reason}")
            if reason is not None:
                box.setChecked(False)
        model = self.policy.model()
        unavailable = []
        for row, (value, label) in enumerate(POLICIES):
            reason = self.policy_reason(value)
            item = model.item(row)
            item.setEnabled(reason is None)
            item.setData(f"Unavailable: {reason}" if reason else None, Qt.ItemDataRole.ToolTipRole)
            if reason:
                unavailable.append(f"{label}: unavailable: {reason}")
        self.policy.setToolTip("\n".join(unavailable))
        if self.policy_reason(self.policy.currentData()) is not None:
            self.policy.setCurrentIndex(0)
        self.blockSignals(False)

    def policy_reason(self, value: str) -> str | None:
        return self._reasons.get(f"policy.{value}")

    def _emit(self, *_):
        self.changed.emit(self.choices())

