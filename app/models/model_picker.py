"""Which model to talk with: the built-in demo, the models of the Hugging Face Hub (on this
machine or to download), other cached ones and folders; what the chosen one is, what it
needs, its download's progress; loading status; the voice and role prompt of a model that takes them."""
from __future__ import annotations

from pathlib import Path

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QInputDialog,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
)

from engine import READY, REMOTE, WEIGHTS, size_text

from ..app_settings import AppSettings
from ..window.theme import role_colour

AS_STORED = ("Weights as the checkpoint holds them", "")
NO_VOICE = "No voice prompt"


class ModelPicker(QGroupBox):
    load_requested = pyqtSignal(str)      # a source as engine.load_model takes it
    download_requested = pyqtSignal(str)  # a model to download (with the weights chosen)
    remove_requested = pyqtSignal(str)
    cancel_requested = pyqtSignal()
    token_given = pyqtSignal(str)         # an access token typed by the user (never stored here)
    folder_chosen = pyqtSignal(str)       # a folder to check and, if it is a model, remember
    choice_changed = pyqtSignal()         # the model or the weights chosen changed: say what it needs

    def __init__(self, settings: AppSettings, parent=None):
        super().__init__("Model", parent)
        self.settings = settings
        self.entries: dict[str, object] = {}  # name -> engine.ModelEntry, as last listed
        self._blocked: dict[tuple[str, str | None], tuple[str, bool]] = {}  # see set_blocked
        self.combo = QComboBox()
        self.combo.setMinimumContentsLength(28)
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.folder_button = QPushButton("Folder…")
        self.folder_button.setToolTip("Use a checkpoint folder (model.safetensors, Mimi tokenizer, SentencePiece "
                                      "model).")
        self.folder_button.clicked.connect(self._choose_folder)
        self.hub_button = QPushButton("Hub name…")
        self.hub_button.setToolTip("Any Hugging Face repository holding a model in the official layout.")
        self.hub_button.clicked.connect(self._ask_repo)
        self.weights = QComboBox()
        self.weights.addItem(*AS_STORED)
        for value, label in WEIGHTS.items():
            self.weights.addItem(f"Weights: {label}", value)
        self.weights.setToolTip("int8 halves the GPU memory the weights take (an official q8 checkpoint is int8; "
                                "a bf16 one is quantized while it loads); int4 quarters it, for an 8 GB card "
                                "(quantized from the int8 or bf16 files while it loads). Chosen when the model "
                                "loads.")
        self.weights.setCurrentIndex(max(0, self.weights.findData(settings.model_weights)))
        self.action_button = QPushButton("Load")
        self.action_button.clicked.connect(self._act)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setToolTip("Delete this model's downloaded files from the Hugging Face cache.")
        self.remove_button.clicked.connect(lambda: self.remove_requested.emit(self.source()))
        self.about = QLabel("")
        self.about.setWordWrap(True)
        self.about.setOpenExternalLinks(True)
        self.token_button = QPushButton("Access token…")
        self.token_button.setToolTip("A Hugging Face access token (huggingface.co/settings/tokens), kept where "
                                     "huggingface_hub keeps it.")
        self.token_button.clicked.connect(self._ask_token)
        self.fit = QLabel("")
        self.fit.setWordWrap(True)
        self.status = QLabel("No model loaded.")
        self.status.setWordWrap(True)
        self.busy = QProgressBar()
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(lambda: self.cancel_requested.emit())
        self.voice = QComboBox()
        self.role = QLineEdit()
        self.persona_labels = (QLabel("Voice"), QLabel("Role"))
        self._lay_out()
        self.end_progress()
        self.show_persona([])
        self.select(settings.model_source)
        self.combo.currentIndexChanged.connect(lambda _: self._chosen())
        self.weights.currentIndexChanged.connect(self._weights_chosen)

    def _lay_out(self) -> None:
        layout = QGridLayout(self)
        rows = ((self.combo, 2, self.folder_button, self.hub_button),
                (self.weights, 2, self.action_button, self.remove_button),
                (self.about, 3, self.token_button, None),
                (self.fit, 4, None, None),
                (self.busy, 3, self.cancel_button, None),
                (self.status, 4, None, None))
        for row, (first, span, *rest) in enumerate(rows):
            layout.addWidget(first, row, 0, 1, span)
            for column, widget in enumerate(rest, start=span):
                if widget is not None:
                    layout.addWidget(widget, row, column)
        for offset, (label, field) in enumerate(zip(self.persona_labels, (self.voice, self.role))):
            layout.addWidget(label, len(rows) + offset, 0)
            layout.addWidget(field, len(rows) + offset, 1, 1, 3)
        layout.setColumnStretch(1, 1)
        # Hidden rows keep their space: the window does not jump when a model loads.
        for widget in (self.busy, self.cancel_button, self.voice, self.role, *self.persona_labels):
            policy = widget.sizePolicy()
            policy.setRetainSizeWhenHidden(True)
            widget.setSizePolicy(policy)

    # --- the choice ---------------------------------------------------------------------
    def source(self) -> str:
        return self.combo.currentData()

    def entry(self):
        """The chosen model as last listed (engine.ModelEntry), or None before the list."""
        return self.entries.get(self.source())

    def chosen_weights(self) -> str | None:
        """"bf16", "int8", "int4", or None: as the checkpoint holds them."""
        return self.weights.currentData() or None

    def set_entries(self, entries: list) -> None:
        """The models to offer (engine.list_models), the choice kept."""
        current = self.source()
        self.entries = {e.name: e for e in entries}
        self.combo.blockSignals(True)
        self.combo.clear()
        for entry in entries:
            self.combo.addItem(_label(entry), entry.name)
        self.combo.blockSignals(False)
        self.select(current)
        self._chosen()

    def select(self, source: str) -> None:
        index = self.combo.findData(source)
        if index < 0:
            label = f"Folder: {source}" if Path(source).is_dir() else source
            self.combo.addItem(label, source)
            index = self.combo.count() - 1
        self.combo.setCurrentIndex(index)

    def _chosen(self) -> None:
        entry = self.entry()
        ready = entry is None or entry.state == READY
        self.action_button.setText("Load" if ready else "Download" if entry.state == REMOTE else "Finish download")
        self.remove_button.setVisible(entry is not None and entry.origin == "Hugging Face" and entry.state != REMOTE)
        self._show_block()
        about = entry.about if entry else ""
        if entry is not None and entry.location is not None:
            about += f" · {entry.location}"
        self.about.setText(about)
        self.choice_changed.emit()

    def _act(self) -> None:
        entry = self.entry()
        if entry is None or entry.state == READY:
            self.load_requested.emit(self.source())
        else:
            self.download_requested.emit(self.source())

    def show_gated(self, page: str) -> None:
        """A gated model: where its licence is accepted, before anything is downloaded."""
        entry = self.entry()
        self.about.setText(f"{entry.about}. <b>Gated</b>: accept its licence on <a href='{page}'>its Hub page</a>, "
                           "then give an access token.")

    def set_blocked(self, name: str, weights: str | None, why: str = "", token: bool = False) -> None:
        """Downloading `name` for `weights` cannot work as things are: Download is disabled, `why`
        in its tooltip; `token`: an access token is the way on (its button shows). "" lifts it."""
        if why:
            self._blocked[(name, weights)] = (why, token)
        else:
            self._blocked.pop((name, weights), None)
        self._show_block()

    def unblock_all(self) -> None:
        self._blocked.clear()
        self._show_block()

    def blocked(self) -> tuple[str, bool]:
        """(why, token) for the chosen model's download ("" when it can work, or it is on this machine)."""
        entry = self.entry()
        if entry is None or entry.state == READY:
            return "", False
        return self._blocked.get((self.source(), self.chosen_weights()), ("", False))

    def _show_block(self) -> None:
        entry, (why, token) = self.entry(), self.blocked()
        self.token_button.setVisible(bool(entry is not None and entry.gated or token))
        self.action_button.setToolTip(why)
        if why:
            self.action_button.setEnabled(False)
        elif self.combo.isEnabled():  # not while a download or a load holds the controls
            self.action_button.setEnabled(True)

    # --- what it needs ------------------------------------------------------------------
    def show_fit_for(self, source: str, weights: str | None, text: str, fits: object) -> None:
        """An answer for a choice of model and weights; one for an earlier choice is dropped."""
        if (source, weights) == (self.source(), self.chosen_weights()):
            self.show_fit(text, fits)

    def show_fit(self, text: str, fits: object = True) -> None:
        """`fits`: True, False (memory: said in red) or None (a problem that is not memory:
        `text` says it, in red)."""
        self.fit.setText(f"Does not fit: {text}" if fits is False else text)
        self.fit.setStyleSheet("" if fits else _error_style(self.fit))

    def show_needs(self, text: str, fits: bool) -> None:
        """A download's description, which says itself whether the model fits."""
        self.fit.setText(text)
        self.fit.setStyleSheet("" if fits else _error_style(self.fit))

    def show_fit_checking(self) -> None:
        self.fit.setStyleSheet("")
        self.fit.setText("Checking what it needs…")

    def _weights_chosen(self) -> None:
        self.settings.model_weights = self.weights.currentData()
        self._show_block()
        self.choice_changed.emit()

    # --- progress -----------------------------------------------------------------------
    def set_loading(self, stage: str) -> None:
        self.status.setText(stage)
        self.busy.setRange(0, 0)  # loading reports stages, not fractions
        self.busy.setTextVisible(False)
        self.busy.show()
        self.set_controls_enabled(False)

    def show_weights_read(self, name: str, done: int, total: int) -> None:
        """A checkpoint file being read into the model: a determinate bar, in bytes."""
        self.busy.setRange(0, 1000)
        self.busy.setValue(1000 * done // max(1, total))
        self.busy.setTextVisible(True)
        self.busy.setFormat(f"Reading {name}: {size_text(done)} of {size_text(total)}")

    def show_download(self, progress) -> None:
        """A download's progress (engine.Progress): bytes, speed, time left."""
        self.busy.setRange(0, 1000)
        self.busy.setValue(1000 * progress.done_bytes // max(1, progress.total_bytes))
        self.busy.setTextVisible(True)
        self.busy.setFormat(progress.describe())
        self.busy.show()
        self.cancel_button.show()
        self.status.setText(f"Downloading {progress.repo}: {progress.file}")
        self.set_controls_enabled(False)

    def end_progress(self) -> None:
        self.busy.hide()
        self.cancel_button.hide()

    def set_done(self, text: str) -> None:
        self.status.setText(text)
        self.end_progress()
        self.set_controls_enabled(True)

    def set_controls_enabled(self, enabled: bool) -> None:
        """The model choice and its actions (the persona fields stay as they are)."""
        for widget in (self.combo, self.weights, self.folder_button, self.hub_button, self.action_button,
                       self.remove_button, self.token_button):
            widget.setEnabled(enabled)
        if enabled and self.blocked()[0]:
            self.action_button.setEnabled(False)

    def set_running(self, running: bool) -> None:
        """A conversation holds the model and its prompts: nothing here changes while it runs."""
        self.set_controls_enabled(not running)
        for widget in (self.voice, self.role):
            widget.setEnabled(not running)

    # --- PersonaPlex ----------------------------------------------------------------------
    def show_persona(self, voices: list[str], default_role: str = "", takes_role: bool = False,
                     owner: str = "") -> None:
        """The fields the loaded model (`owner`) declares: its voice prompts, and a role prompt
        if it takes one (even without voices); the others are hidden."""
        saved_voice, saved_role = self.settings.persona()
        self.voice.clear()
        self.voice.addItems(voices)
        self.voice.addItem(NO_VOICE, None)
        if saved_voice in voices + [NO_VOICE]:
            self.voice.setCurrentText(saved_voice)
        self.role.setPlaceholderText(default_role or "Role prompt")
        self.role.setText(saved_role)
        for widgets, shown, what in (((self.voice, self.persona_labels[0]), bool(voices), "voice prompts"),
                                     ((self.role, self.persona_labels[1]), takes_role, "a role prompt")):
            for widget in widgets:
                widget.setVisible(shown)
                widget.setToolTip(f"{owner}, the loaded model, takes {what}." if owner else "")

    def persona(self) -> tuple[str | None, str]:
        """The chosen voice prompt (None: none) and role prompt text."""
        voice = self.voice.currentText()
        return (None if voice == NO_VOICE else voice), self.role.text().strip()

    def set_persona(self, voice: str, role: str) -> bool:
        """A saved preset's voice ("" for none) and role, for the next conversation; False (the
        voice left as it is) when this model has no such voice."""
        index = self.voice.findText(voice or NO_VOICE)
        if index >= 0:
            self.voice.setCurrentIndex(index)
        self.role.setText(role)
        return index >= 0

    def remember_persona(self) -> None:
        """The voice and role chosen now are the ones shown next time (`show_persona`)."""
        self.settings.set_persona(self.voice.currentText(), self.role.text().strip())

    # --- asking the user ----------------------------------------------------------------
    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Checkpoint folder")
        if folder:
            self.folder_chosen.emit(folder)

    def _ask_repo(self) -> None:
        name, ok = QInputDialog.getText(self, "A model from the Hugging Face Hub",
                                        "Repository name (owner/name):")
        if ok and name.strip():
            self.select(name.strip())

    def _ask_token(self) -> None:
        token, ok = QInputDialog.getText(self, "Hugging Face access token",
                                         "Access token (huggingface.co/settings/tokens):", QLineEdit.EchoMode.Password)
        if ok and token.strip():
            self.token_given.emit(token.strip())


def _label(entry) -> str:
    if entry.origin == "built in":
        return "Demo model (built in, untrained)"
    if entry.origin == "folder":
        return f"Folder: {entry.name}"
    return entry.name if entry.state == READY else f"{entry.name} ({entry.state})"


def _error_style(label: QLabel) -> str:
    return f"color: {role_colour(label.palette(), 'error').name()};"
