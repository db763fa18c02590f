"""Settings ▸ one dialog for what is set once rather than per conversation: where recordings go,
how the model samples its words and sounds, voice and role presets, the theme. Nothing is kept
before OK; the window hears of each change through a signal."""
from __future__ import annotations

from pathlib import Path

from PyQt6.QtCore import QRegularExpression, pyqtSignal
from PyQt6.QtGui import QRegularExpressionValidator
from PyQt6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine import RuntimeOptions

from ..app_settings import SAMPLING, AppSettings
from ..gpu.wheel_guard import guard_wheel
from .persona_presets import PersonaPresetsBox
from .theme import THEMES, role_colour

FIELDS = {
    "text_temperature": ("Text temperature", "How freely the model picks its words: 0 always takes the likeliest "
                         "word; higher gives more varied, less predictable wording."),
    "text_top_k": ("Text top-k", "Each word is picked from only this many of the likeliest (0: no limit). "
                   "Smaller keeps the wording plainer."),
    "audio_temperature": ("Audio temperature", "How freely the model picks its sounds: 0 always takes the "
                          "likeliest; higher sounds livelier, and too high turns it garbled."),
    "audio_top_k": ("Audio top-k", "Each sound is picked from only this many of the likeliest (0: no limit)."),
}
"""The spin-box fields of SAMPLING -> label and tooltip (the seed has a text field)."""
SEED_HELP = ("Where the model's random choices start: the same seed with the same voice, role and input "
             "gives the same conversation. Takes effect when the next conversation starts.")
# RuntimeOptions sets no upper limits; these bound the spin boxes (above them a stored value still shows).
OFFERED_MAX = {float: 2.0, int: 100_000}


class SettingsDialog(QDialog):
    sampling_changed = pyqtSignal(dict)       # the SAMPLING fields of RuntimeOptions, after OK changed them
    persona_chosen = pyqtSignal(str, str)     # voice ("" for none) and role of a preset the user chose to use
    recordings_folder_changed = pyqtSignal(str)
    theme_changed = pyqtSignal(str)           # "system", "light" or "dark" (app.window.theme.apply_theme)

    def __init__(self, settings: AppSettings, parent=None, persona: tuple[str | None, str] | None = None):
        """`persona`: the voice (None: none) and role in the Model box (ModelPicker.persona()),
        or None when the loaded model takes none."""
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.settings = settings
        self.folder = QLineEdit()
        self.folder.setToolTip("Where each conversation's recording (stereo WAV and transcript) is saved, "
                               "from the next conversation on.")
        self.browse_button = QPushButton("Browse…")
        self.browse_button.setToolTip("Choose the recordings folder.")
        self.browse_button.clicked.connect(self._browse)
        self.spins: dict[str, QSpinBox | QDoubleSpinBox] = {name: _spin(name) for name in FIELDS}
        self.seed = QLineEdit()
        self.seed.setValidator(QRegularExpressionValidator(QRegularExpression("[0-9]{1,19}")))
        self.seed.setToolTip(SEED_HELP)
        self.presets = PersonaPresetsBox(settings.persona_presets, persona)
        self.presets.used.connect(self.persona_chosen)
        self.theme = QComboBox()
        for value, label in THEMES.items():
            self.theme.addItem(label, value)
        self.theme.setToolTip("Follow the system: the desktop's colours. Light or Dark: the app's own, "
                              "whatever the desktop uses.")
        self.problem = QLabel()
        self.problem.setWordWrap(True)
        self.problem.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
                                        | QDialogButtonBox.StandardButton.RestoreDefaults)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        restore = self.buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults)
        restore.setToolTip("Put the recordings folder, sampling, seed and theme back to their defaults "
                           "(when you press OK). Presets are kept.")
        restore.clicked.connect(self.restore_defaults)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setToolTip("Keep these settings.")
        self.buttons.button(QDialogButtonBox.StandardButton.Cancel).setToolTip("Close, changing nothing.")
        self._lay_out()
        self._show(settings.recordings_dir, settings.sampling, settings.theme)
        self._wheel_guard = guard_wheel(self)  # a wheel turned over the form scrolls past its fields

    def _lay_out(self) -> None:
        recordings = QGroupBox("Recordings")
        folder_row = QHBoxLayout(recordings)
        folder_row.addWidget(QLabel("Folder"))
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(self.browse_button)
        sampling = QGroupBox("Sampling: how the model picks its words and sounds")
        form = QFormLayout(sampling)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        for name, spin in self.spins.items():
            label = QLabel(FIELDS[name][0])
            label.setToolTip(FIELDS[name][1])
            form.addRow(label, spin)
        width = self.seed.fontMetrics().horizontalAdvance("0" * 20) + 24  # a 19-digit seed, spin arrows
        for field in (*self.spins.values(), self.seed):
            field.setFixedWidth(width)
        seed_label = QLabel("Seed")
        seed_label.setToolTip(SEED_HELP)
        form.addRow(seed_label, self.seed)
        note = QLabel("A running conversation takes these at once; the seed, from the next conversation.")
        note.setWordWrap(True)
        form.addRow(note)
        appearance = QGroupBox("Appearance")
        theme_row = QFormLayout(appearance)
        theme_label = QLabel("Theme")
        theme_label.setToolTip(self.theme.toolTip())
        theme_row.addRow(theme_label, self.theme)
        layout = QVBoxLayout(self)
        for box in (recordings, sampling, self.presets, appearance):
            layout.addWidget(box)
        layout.addWidget(self.problem)
        layout.addWidget(self.buttons)
        width = max(560, self.sizeHint().width())
        self.resize(width, self.layout().totalHeightForWidth(width))  # wrapped lines as wide as shown
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setFocus()  # not a field: Enter is OK

    def _show(self, folder: Path, sampling: dict, theme: str) -> None:
        self.folder.setText(str(folder))
        self._stored = dict(sampling)
        for name, spin in self.spins.items():
            # A value stored by hand, above the offer (a QSpinBox holds at most 2**31 - 1).
            value = sampling[name] if isinstance(spin, QDoubleSpinBox) else min(sampling[name], 2 ** 31 - 1)
            spin.setMaximum(max(spin.maximum(), value))
            spin.setValue(value)
        self._shown = {name: spin.value() for name, spin in self.spins.items()}
        self.seed.setText(str(sampling["seed"]))
        self.theme.setCurrentIndex(self.theme.findData(theme))

    def restore_defaults(self) -> None:
        default = RuntimeOptions()
        self._show(self.settings.default_recordings_dir(), {name: getattr(default, name) for name in SAMPLING},
                   "system")

    def sampling(self) -> dict:
        """The SAMPLING values shown, checked by RuntimeOptions (ValueError: what is wrong)."""
        if not self.seed.text():
            raise ValueError("seed: give a whole number, e.g. 0")
        values = {name: spin.value() for name, spin in self.spins.items()}
        values["seed"] = int(self.seed.text())
        RuntimeOptions(**values)
        return values

    def folder_chosen(self) -> Path:
        """The recordings folder shown, made absolute; none shown: the default (ValueError: why
        it cannot be one)."""
        text = self.folder.text().strip()
        if not text:
            return self.settings.default_recordings_dir()
        folder = Path(text).expanduser().absolute()
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"Recordings folder: {folder} is a file, not a folder")
        return folder

    def accept(self) -> None:
        """Keep what changed, and say so; a value that cannot be kept leaves the dialog open."""
        try:
            sampling = self.sampling()  # the spin boxes cannot go wrong: only the seed
        except ValueError as exc:
            return self._refuse(self.seed, exc)
        # A field left as shown keeps the stored value (which the box may show rounded).
        sampling.update({name: self._stored[name] for name, spin in self.spins.items()
                         if spin.value() == self._shown[name]})
        try:
            folder = self.folder_chosen()
        except ValueError as exc:
            return self._refuse(self.folder, exc)
        s = self.settings
        theme = self.theme.currentData()
        changed = {"sampling": sampling != s.sampling, "folder": folder != s.recordings_dir,
                   "theme": theme != s.theme, "presets": self.presets.presets() != s.persona_presets}
        if changed["sampling"]:
            s.sampling = sampling
        if changed["folder"]:
            s.recordings_dir = "" if folder == s.default_recordings_dir() else folder
        if changed["theme"]:
            s.theme = theme
        if changed["presets"]:
            s.persona_presets = self.presets.presets()
        super().accept()
        if changed["sampling"]:
            self.sampling_changed.emit(sampling)
        if changed["folder"]:
            self.recordings_folder_changed.emit(str(s.recordings_dir))
        if changed["theme"]:
            self.theme_changed.emit(theme)

    def _refuse(self, field: QWidget, problem: ValueError) -> None:
        self.problem.setStyleSheet(f"color: {role_colour(self.palette(), 'error').name()};")
        self.problem.setText(f"Not kept: {problem}")
        self.problem.show()
        field.setFocus()

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Recordings folder", self.folder.text())
        if folder:
            self.folder.setText(folder)


def _spin(name: str) -> QSpinBox | QDoubleSpinBox:
    """A spin box for a SAMPLING field, of its type in RuntimeOptions, from 0 (RuntimeOptions'
    lowest: greedy, or no top-k limit) to what the dialog offers."""
    kind = type(getattr(RuntimeOptions(), name))
    spin = QDoubleSpinBox() if kind is float else QSpinBox()
    if kind is float:
        spin.setDecimals(2)
        spin.setSingleStep(0.05)
    spin.setRange(0, OFFERED_MAX[kind])
    spin.setToolTip(FIELDS[name][1])
    return spin
