"""The Settings dialog's presets: voices and role prompts saved under a name, to
put back in the Model box with one click."""
from __future__ import annotations

from PyQt6.QtCore import Qt, pyqtSignal
from PyQt6.QtWidgets import (
    QAbstractItemView,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
)

from ..app_settings import PersonaPreset
from ..models.model_picker import NO_VOICE

NO_ROLE = "(no role prompt)"


class PersonaPresetsBox(QGroupBox):
    used = pyqtSignal(str, str)  # voice ("" for none) and role of the preset the user chose to use

    def __init__(self, presets: list[PersonaPreset], current: tuple[str | None, str] | None, parent=None):
        """`current`: the voice (None: none) and role in the Model box now, or None when the
        loaded model takes no persona (nothing to save)."""
        super().__init__("Voice and role presets", parent)
        self.current = None if current is None else PersonaPreset("", current[0] or "", current[1])
        self.list = QTreeWidget()
        self.list.setHeaderLabels(["Name", "Voice", "Role"])
        self.list.setRootIsDecorated(False)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.setToolTip("Voices and role prompts saved under a name. Double-click one to use it.")
        header = self.list.header()
        header.setStretchLastSection(True)
        for column in (0, 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.list.itemDoubleClicked.connect(lambda *_: self.use_selected())
        # A handful of rows: the list scrolls, the dialog stays short.
        self.list.setMaximumHeight(6 * self.list.fontMetrics().height() + 2 * header.sizeHint().height())
        self.current_label = QLabel()
        self.current_label.setWordWrap(True)
        self.save_button = QPushButton("Save current as…")
        self.use_button = QPushButton("Use")
        self.use_button.setToolTip("Put the selected preset's voice and role in the Model box now; the next "
                                   "conversation starts with them.")
        self.delete_button = QPushButton("Delete")
        self.delete_button.setToolTip("Forget the selected preset (when you press OK).")
        self.save_button.clicked.connect(self._ask_name)
        self.use_button.clicked.connect(self.use_selected)
        self.delete_button.clicked.connect(self.delete_selected)
        buttons = QHBoxLayout()
        for button in (self.save_button, self.use_button, self.delete_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list)
        layout.addWidget(self.current_label)
        layout.addLayout(buttons)
        self._show_current()
        self.set_presets(presets)
        self.list.itemSelectionChanged.connect(self._enable)

    def _show_current(self) -> None:
        if self.current is None:
            self.current_label.setText("Load a model that takes a role prompt to save its voice and role here.")
            self.save_button.setEnabled(False)
            self.save_button.setToolTip("Only models that take a role prompt have voice and role presets.")
            return
        role = self.current.role or NO_ROLE
        self.current_label.setText(f"In the Model box now: {self.current.voice or NO_VOICE} · {_short(role)}")
        self.save_button.setToolTip("Save the voice and role in the Model box now under a name (a preset of "
                                    "the same name is replaced).")

    def set_presets(self, presets: list[PersonaPreset]) -> None:
        self.list.clear()
        for preset in presets:
            item = QTreeWidgetItem([preset.name, preset.voice or NO_VOICE, _short(preset.role) or NO_ROLE])
            item.setData(0, Qt.ItemDataRole.UserRole, preset)
            item.setToolTip(2, preset.role)
            self.list.addTopLevelItem(item)
        self._enable()

    def presets(self) -> list[PersonaPreset]:
        return [self.list.topLevelItem(row).data(0, Qt.ItemDataRole.UserRole)
                for row in range(self.list.topLevelItemCount())]

    def selected(self) -> PersonaPreset | None:
        items = self.list.selectedItems()
        return items[0].data(0, Qt.ItemDataRole.UserRole) if items else None

    def select(self, name: str) -> None:
        for row in range(self.list.topLevelItemCount()):
            item = self.list.topLevelItem(row)
            item.setSelected(item.text(0) == name)

    def save_current(self, name: str) -> None:
        """The Model box's voice and role under `name`, in place of a preset of that name."""
        preset = self.current._replace(name=name)
        presets = self.presets()
        names = [p.name for p in presets]
        if name in names:
            presets[names.index(name)] = preset
        else:
            presets.append(preset)
        self.set_presets(presets)
        self.select(name)

    def use_selected(self) -> None:
        preset = self.selected()
        if preset is not None:
            self.used.emit(preset.voice, preset.role)

    def delete_selected(self) -> None:
        preset = self.selected()
        if preset is not None:
            self.set_presets([p for p in self.presets() if p.name != preset.name])

    def _ask_name(self) -> None:
        name, ok = QInputDialog.getText(self, "Save persona preset", "Name:",
                                        text=self.selected().name if self.selected() else "")
        if ok and name.strip():
            self.save_current(name.strip())

    def _enable(self) -> None:
        chosen = self.selected() is not None
        self.use_button.setEnabled(chosen)
        self.delete_button.setEnabled(chosen)


def _short(text: str, limit: int = 60) -> str:
    """One line of a role prompt for the list (the whole prompt is its tooltip)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"
