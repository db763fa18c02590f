"""The model the conversation talks with: checking that the chosen one fits, loading it (and
a predictor for its predicting policies) on engine threads, and showing all of that in the model
picker, the runtime switches and the compute label. The window only lays these out."""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from PyQt6.QtCore import QObject, pyqtSignal
from PyQt6.QtWidgets import (
    QAbstractSpinBox,
    QFileDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QTextEdit,
    QWidget,
)

from ..app_settings import AppSettings
from ..window.cadence_panel import CadencePanel
from ..window.message_bar import MessageBar
from .model_loader import LoadedModel, LoaderSignals, MemoryCheck, ModelLoader, PredictorLoader
from .model_picker import ModelPicker

log = logging.getLogger("duplexcadence")


class ModelController(QObject):
    ready = pyqtSignal(object)  # LoadedModel: the model to talk with from now on
    failed = pyqtSignal(str, str)  # source, message: it could not be loaded (a dialog says why)
    busy_changed = pyqtSignal(bool)  # a model or a predictor is loading: no conversation starts meanwhile

    def __init__(self, settings: AppSettings, device: str, *, picker: ModelPicker, panel: CadencePanel,
                 compute_label: QLabel, message_bar: MessageBar, parent: QWidget):
        """`device`: where models load (auto, cuda or cpu); `parent`: the window, over which the
        predictor's file dialog opens."""
        super().__init__(parent)
        self.settings, self.device = settings, device
        self._picker, self._panel = picker, panel
        self._compute_label, self._message_bar = compute_label, message_bar
        self.loaded: LoadedModel | None = None
        self._loaded_text = ""  # the status line of the model loaded
        self.last_dialog: QMessageBox | None = None
        # A conversation runs with the loaded model: it is neither replaced nor given a predictor.
        self.in_use = False
        self._loader: ModelLoader | None = None
        self._predictor_loader: PredictorLoader | None = None
        self.signals = LoaderSignals()
        self.signals.progress.connect(picker.set_loading)
        self.signals.weights_read.connect(picker.show_weights_read)
        self.signals.loaded.connect(self.set_model)
        self.signals.failed.connect(self._on_load_failed)
        self.signals.fit.connect(picker.show_fit_for)
        self.predictor_signals = LoaderSignals()
        self.predictor_signals.predictor.connect(self._on_predictor)
        self.predictor_signals.failed.connect(self._on_predictor_failed)
        picker.load_requested.connect(lambda _: self.load())
        panel.adapter_requested.connect(self.choose_predictor)
        picker.choice_changed.connect(self._say_what_start_uses)

    def loading(self) -> bool:
        return self._loader is not None and self._loader.is_alive()

    # --- the model ----------------------------------------------------------------------
    def load(self) -> None:
        """Load the model chosen in the picker, on an engine thread; the one loaded now stays
        until it is replaced (or, if the new one fails, for good)."""
        if self.loading() or self.in_use:
            return
        source = self._picker.source()
        self._compute_label.setText("Compute: loading…")
        self._panel.apply_capabilities(None)
        self.busy_changed.emit(True)
        self._picker.set_loading(f"Loading {source}…")
        self._loader = ModelLoader(source, self.device, self.signals, self.loaded, self._picker.chosen_weights())
        self._loader.start()

    def check_memory(self) -> None:
        """Whether the chosen (downloaded) model and weights fit, shown in the picker before
        loading; a model to download is the library's to describe."""
        self._picker.show_fit_checking()
        MemoryCheck(self._picker.source(), self._picker.chosen_weights(), self.device, self.signals).start()

    def set_model(self, loaded: LoadedModel) -> None:
        """Talk with this (loaded) model from now on; it is the one offered at the next start."""
        self.loaded = loaded
        self.settings.model_source = loaded.source
        self._show_loaded(loaded, f"Loaded {loaded.name} on {loaded.device_label}.")
        self._picker.show_fit(loaded.memory)
        log.info("loaded %s on %s (%s)", loaded.source, loaded.device_label, loaded.device_reason)
        if loaded.notice:
            self._message_bar.show_message(loaded.notice, "info")
        self.busy_changed.emit(False)
        self.ready.emit(loaded)

    def _show_loaded(self, loaded: LoadedModel, status: str, persona: bool = True) -> None:
        """`persona`: its Voice and Role fields shown anew (False: as the user left them)."""
        self._loaded_text = f"Loaded {loaded.name} on {loaded.device_label}."
        self._picker.set_done(status)
        if persona:
            self._picker.show_persona(loaded.voices, loaded.default_role, loaded.takes_role, loaded.name)
        # Where the model runs, and why there (on the CPU: no GPU, no driver, or no GPU support yet).
        self._compute_label.setText(f"Compute: {loaded.device_reason}")
        self._panel.apply_capabilities(loaded.capabilities)
        self._panel.show_adapter(loaded.predictor)

    def _say_what_start_uses(self) -> None:
        """With another model chosen than the one loaded, Start still talks with the loaded one:
        the status says so, and that Load switches."""
        loaded = self.loaded
        if loaded is None or self.loading():
            return
        if self._picker.source() == loaded.source:
            self._picker.status.setText(self._loaded_text)
        else:
            self._picker.status.setText(f"Loaded: {loaded.name}. Start talks with it; Load switches to the "
                                        "model chosen above.")

    def _on_load_failed(self, source: str, message: str) -> None:
        loader = self._loader
        kept, advice = (loader.kept, loader.advice) if loader is not None else (None, "")
        log.warning("could not load %s: %s%s", source, message, f" ({advice})" if advice else "")
        untouched = kept is not None and kept is self.loaded  # not loaded again: its fields as they were
        self.loaded = kept
        if kept is None:
            self._compute_label.setText("Compute: no model loaded")
            self._picker.set_done(f"Could not load {source}.")
            self._picker.show_persona([])  # the fields of a model that is gone
        else:
            self._show_loaded(kept, f"Could not load {source}; {kept.name} is still loaded.", not untouched)
        self.busy_changed.emit(False)
        still = f" Start still talks with {kept.name}." if kept is not None else ""
        self.last_dialog = QMessageBox(QMessageBox.Icon.Critical, "Could not load the model", message,
                                       QMessageBox.StandardButton.Ok, self.parent())
        if advice or still:
            self.last_dialog.setInformativeText((advice + still).strip())
        self.last_dialog.open()
        self.failed.emit(source, message)

    def offer_remembered(self) -> None:
        """At start nothing loads unasked: the model used last is the one chosen, and the status
        says that Load (or Download, for one no longer here) brings it back."""
        if self.loaded is not None or self.loading() or self.in_use:
            return
        source, entry = self._picker.source(), self._picker.entry()
        action = self._picker.action_button
        if not self.settings.has_model_source or source != self.settings.model_source:
            text = "No model loaded: press Load to try the built-in demo, or choose another model."
        elif action.text() == "Load":
            text = f"Last time you talked with {entry.name if entry else source}: press Load to talk with it again."
        else:
            text = f"Last time you talked with {source}; it is no longer complete here: {action.text()} fetches it."
        self._picker.status.setText(text)
        # The first listing ends when it ends: never take the keys from a field being typed in.
        # (The window's focus widget: the one that has the keys, or will once the window is active.)
        if not isinstance(action.window().focusWidget(), (QLineEdit, QTextEdit, QPlainTextEdit, QAbstractSpinBox)):
            action.setFocus()

    # --- its DiffuPlex predictor --------------------------------------------------------
    def choose_predictor(self, path: str | None = None) -> None:
        """A predictor file for the loaded model's predicting policies (used from the next conversation);
        without `path`, the user picks one."""
        if self.loaded is None or self.in_use or self.loading():
            self._message_bar.show_message("Load a model, and stop the conversation, to choose a predictor.", "info")
            return
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self.parent(), "Predictor", "", "Predictor (*.safetensors)")
            if not path:
                return
        self._predictor_loader = PredictorLoader(self.loaded.session, path, self.predictor_signals)
        self.busy_changed.emit(True)
        self._picker.set_controls_enabled(False)
        self._predictor_loader.start()

    def _predictor_done(self) -> bool:
        """The predictor loader has ended: the controls come back. True when it loaded into the
        model still loaded (not one replaced meanwhile)."""
        self.busy_changed.emit(False)
        self._picker.set_controls_enabled(not self.in_use)
        return self.loaded is not None and self.loaded.session is self._predictor_loader.session

    def _on_predictor(self, path: str, capabilities: dict) -> None:
        if not self._predictor_done():
            return
        self.loaded = dataclasses.replace(self.loaded, capabilities=capabilities, predictor=Path(path).name)
        self._panel.show_adapter(self.loaded.predictor)
        self._panel.apply_capabilities(capabilities)

    def _on_predictor_failed(self, path: str, message: str) -> None:
        if self._predictor_done():
            self._message_bar.show_message(message)
