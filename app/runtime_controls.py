"""Switches for the runtime options that may change mid conversation (applied by the engine
from the next frame). The lists come from the engine (`engine.options`); a switch the loaded
model or device cannot use is disabled, with the engine's reason written under it."""
from __future__ import annotations

from PyQt6.QtCore import Qt, pyqtSignal
from PyQt6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QLabel, QWidget

from engine.options import POLICIES, TOGGLES, RuntimeOptions


def _reason_label() -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setStyleSheet("color: palette(mid); font-size: small;")
    label.hide()
    return label


class RuntimeControls(QWidget):
    changed = pyqtSignal(object)  # RuntimeOptions: what the user chose

    def __init__(self, options: RuntimeOptions, parent=None):
        super().__init__(parent)
        self._base = options
        self.policy = QComboBox()
        for value, label in POLICIES.items():
            self.policy.addItem(label, value)
        self.policy_reason = _reason_label()
        layout = QFormLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addRow("Policy", self.policy)
        layout.addRow(self.policy_reason)
        self.toggles: dict[str, QCheckBox] = {}
        self.reasons: dict[str, QLabel] = {}
        for name, (label, tip) in TOGGLES.items():
            box = self.toggles[name] = QCheckBox(label)
            box.setToolTip(tip)
            self.reasons[name] = _reason_label()
            layout.addRow(box)
            layout.addRow(self.reasons[name])
            box.toggled.connect(self._emit)
        self._capabilities: dict[str, str | None] = {}
        self.set_options(options)
        self.policy.currentIndexChanged.connect(self._emit)

    @property
    def graph_replay(self) -> QCheckBox:
        return self.toggles["graph_replay"]

    @property
    def demand_sized_state(self) -> QCheckBox:
        return self.toggles["demand_sized_state"]

    def options(self) -> RuntimeOptions:
        return self._base.replace(policy=self.policy.currentData(),
                                  **{name: box.isChecked() for name, box in self.toggles.items()})

    def set_options(self, options: RuntimeOptions) -> None:
        self._base = options
        self.policy.setCurrentIndex(max(0, self.policy.findData(options.policy)))
        for name, box in self.toggles.items():
            box.setChecked(getattr(options, name))

    def apply_capabilities(self, reasons: dict[str, str | None]) -> None:
        """Disable what the engine says it cannot do here, and say why beside it. An unusable
        choice falls back to the plain runtime (which always works), silently: that is not the
        user changing their mind, so it is not remembered as such."""
        self._capabilities = dict(reasons)
        self.blockSignals(True)
        for name, box in self.toggles.items():
            reason = reasons.get(name)
            box.setEnabled(reason is None)
            box.setToolTip(TOGGLES[name][1] if reason is None else f"Unavailable: {reason}")
            self._show_reason(self.reasons[name], reason and f"Unavailable: {reason}")
            if reason is not None:
                box.setChecked(False)
        model = self.policy.model()
        unavailable = []
        for row, (value, label) in enumerate(POLICIES.items()):
            reason = self.reason_for_policy(value)
            item = model.item(row)
            item.setEnabled(reason is None)
            item.setData(f"Unavailable: {reason}" if reason else None, Qt.ItemDataRole.ToolTipRole)
            if reason:
                unavailable.append(f"{label}: unavailable: {reason}")
        self.policy.setToolTip("\n".join(unavailable))
        self._show_reason(self.policy_reason, "\n".join(unavailable))
        if self.reason_for_policy(self.policy.currentData()) is not None:
            self.policy.setCurrentIndex(0)
        self.blockSignals(False)

    def reason_for_policy(self, value: str) -> str | None:
        return self._capabilities.get(f"policy.{value}")

    @staticmethod
    def _show_reason(label: QLabel, text: str | None) -> None:
        label.setText(text or "")
        label.setVisible(bool(text))

    def _emit(self, *_):
        self.changed.emit(self.options())
