"""Which model to talk with: the built-in demo, checkpoints found in the local Hugging Face
cache, or a folder; loading status; PersonaPlex voice and role prompt."""
from __future__ import annotations

from pathlib import Path

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import QComboBox, QFileDialog, QGridLayout, QGroupBox, QLabel, QLineEdit, QProgressBar, QPushButton

from engine import WEIGHTS

from .app_settings import AppSettings

DEMO = ("Demo model (built in, untrained)", "demo")
AS_STORED = ("Weights as the checkpoint holds them", "")
NO_VOICE = "No voice prompt"


class ModelPicker(QGroupBox):
    load_requested = pyqtSignal(str)  # a source as engine.load_model takes it
    choice_changed = pyqtSignal()  # the model or the weights chosen changed: check they fit

    def __init__(self, settings: AppSettings, parent=None):
        super().__init__("Model", parent)
        self.settings = settings
        self.combo = QComboBox()
        self.combo.setMinimumContentsLength(28)
        self.combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.addItem(*DEMO)
        for folder in settings.model_folders:
            self.combo.addItem(f"Folder: {folder}", folder)
        self.folder_button = QPushButton("Folder…")
        self.folder_button.setToolTip("Use a checkpoint folder (model.safetensors, Mimi "
                                      "tokenizer, SentencePiece model).")
        self.folder_button.clicked.connect(self._choose_folder)
        self.weights = QComboBox()
        self.weights.addItem(*AS_STORED)
        for value, label in WEIGHTS.items():
            self.weights.addItem(f"Weights: {label}", value)
        self.weights.setToolTip("int8 halves the GPU memory the weights take (an official q8 checkpoint is int8; "
                                "a bf16 one is quantized while it loads). Chosen when the model loads.")
        self.weights.setCurrentIndex(max(0, self.weights.findData(settings.model_weights)))
        self.fit = QLabel("")
        self.fit.setWordWrap(True)
        self.load_button = QPushButton("Load")
        self.load_button.clicked.connect(lambda: self.load_requested.emit(self.source()))
        self.status = QLabel("No model loaded.")
        self.status.setWordWrap(True)
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # loading reports stages, not fractions
        self.busy.setMaximumHeight(10)
        self.busy.hide()
        self.voice = QComboBox()
        self.role = QLineEdit()
        self.persona_labels = (QLabel("Voice"), QLabel("Role"))
        self._lay_out()
        self.show_persona([])
        self.select(settings.model_source)
        self.combo.currentIndexChanged.connect(lambda _: self.choice_changed.emit())
        self.weights.currentIndexChanged.connect(self._weights_chosen)

    def _lay_out(self) -> None:
        layout = QGridLayout(self)
        layout.addWidget(self.combo, 0, 0, 1, 2)
        layout.addWidget(self.folder_button, 0, 2)
        layout.addWidget(self.load_button, 0, 3)
        layout.addWidget(self.weights, 1, 0, 1, 4)
        layout.addWidget(self.fit, 2, 0, 1, 4)
        layout.addWidget(self.status, 3, 0, 1, 4)
        layout.addWidget(self.busy, 4, 0, 1, 4)
        layout.addWidget(self.persona_labels[0], 5, 0)
        layout.addWidget(self.voice, 5, 1, 1, 3)
        layout.addWidget(self.persona_labels[1], 6, 0)
        layout.addWidget(self.role, 6, 1, 1, 3)
        layout.setColumnStretch(1, 1)
        # Hidden rows keep their space: the window does not jump when a model loads.
        for widget in (self.busy, self.voice, self.role, *self.persona_labels):
            policy = widget.sizePolicy()
            policy.setRetainSizeWhenHidden(True)
            widget.setSizePolicy(policy)

    def source(self) -> str:
        return self.combo.currentData()

    def chosen_weights(self) -> str | None:
        """"bf16", "int8", or None: as the checkpoint holds them."""
        return self.weights.currentData() or None

    def show_fit_for(self, source: str, weights: str | None, text: str, fits: bool) -> None:
        """A memory check's answer for a choice of model and weights; an answer for an earlier
        choice is dropped."""
        if (source, weights) == (self.source(), self.chosen_weights()):
            self.show_fit(text, fits)

    def show_fit(self, text: str, fits: bool = True) -> None:
        """What the model needs against the device's free memory, in red when it does not fit."""
        self.fit.setText(text if fits else f"Does not fit: {text}")
        self.fit.setStyleSheet("" if fits else "color: #b00020;")

    def show_fit_checking(self) -> None:
        self.fit.setText("Checking the memory it needs…")

    def _weights_chosen(self) -> None:
        self.settings.model_weights = self.weights.currentData()
        self.choice_changed.emit()

    def select(self, source: str) -> None:
        index = self.combo.findData(source)
        if index < 0:
            label = f"Folder: {source}" if Path(source).is_dir() else source
            self.combo.addItem(label, source)
            index = self.combo.count() - 1
        self.combo.setCurrentIndex(index)

    def add_checkpoints(self, checkpoints: list[tuple[str, str]]) -> None:
        """(label, source) pairs found in the local Hugging Face cache."""
        for label, source in checkpoints:
            if self.combo.findData(source) < 0:
                self.combo.addItem(f"Hugging Face cache: {label}", source)

    def set_loading(self, stage: str) -> None:
        self.status.setText(stage)
        self.busy.show()
        self.set_controls_enabled(False)

    def set_done(self, text: str) -> None:
        self.status.setText(text)
        self.busy.hide()
        self.set_controls_enabled(True)

    def set_controls_enabled(self, enabled: bool) -> None:
        """The model choice and its Load button (the persona fields stay as they are)."""
        for widget in (self.combo, self.weights, self.folder_button, self.load_button):
            widget.setEnabled(enabled)

    def set_running(self, running: bool) -> None:
        """A conversation holds the model and its prompts: nothing here changes while it runs."""
        self.set_controls_enabled(not running)
        for widget in (self.voice, self.role):
            widget.setEnabled(not running)

    def show_persona(self, voices: list[str], default_role: str = "") -> None:
        """PersonaPlex models take a voice and a role prompt; others hide the fields."""
        saved_voice, saved_role = self.settings.persona()
        self.voice.clear()
        self.voice.addItems(voices)
        self.voice.addItem(NO_VOICE, None)
        if saved_voice in voices + [NO_VOICE]:
            self.voice.setCurrentText(saved_voice)
        self.role.setPlaceholderText(default_role or "Role prompt")
        self.role.setText(saved_role)
        for widget in (self.voice, self.role, *self.persona_labels):
            widget.setVisible(bool(voices))

    def persona(self) -> tuple[str | None, str]:
        """The chosen voice prompt (None: none) and role prompt text."""
        voice = self.voice.currentText()
        return (None if voice == NO_VOICE else voice), self.role.text().strip()

    def remember_persona(self) -> None:
        """The voice and role chosen now are the ones shown next time (`show_persona`)."""
        self.settings.set_persona(self.voice.currentText(), self.role.text().strip())

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Checkpoint folder")
        if folder:
            self.settings.remember_folder(folder)
            self.select(folder)
