"""The model library in the window: the list of models, what the chosen one needs (its
download and its memory), downloading it with progress and cancel, removing it, a token for
gated models, and loading a model the moment its download ends."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from PyQt6.QtCore import QEvent, QObject
from PyQt6.QtWidgets import QMessageBox, QWidget

from engine import READY, free_bytes, missing_files, size_text

from ..app_settings import AppSettings
from ..window.message_bar import MessageBar
from .download_advice import ADVICE, download_failure
from .model_controller import ModelController
from .model_library import (
    DownloadCheck,
    HubAccess,
    LibraryScan,
    LibrarySignals,
    ModelDownload,
    ModelRemoval,
    TokenCheck,
)
from .model_picker import ModelPicker

log = logging.getLogger("duplexcadence")
PROGRESS_EVERY_S = 0.1


class LibraryController(QObject):
    def __init__(self, settings: AppSettings, device: str, *, picker: ModelPicker, models: ModelController,
                 message_bar: MessageBar, parent: QWidget, hub_client=None):
        """`hub_client`: an engine.HubClient to use (default: one from the environment, as
        huggingface_hub configures itself)."""
        super().__init__(parent)
        self.settings, self.device = settings, device
        self._picker, self._models, self._message_bar = picker, models, message_bar
        self.hub = HubAccess(hub_client)
        self.signals = LibrarySignals()
        self.plans: dict[tuple[str, str | None], object] = {}  # (name, weights) -> DownloadPlan
        self.download: ModelDownload | None = None
        self.last_dialog: QMessageBox | None = None
        self._download_after_check: tuple[str, str | None] | None = None
        self._load_after_scan: str | None = None
        self._listed_once = False
        self._shown_at, self._shown_file = 0.0, ""
        s = self.signals
        s.listed.connect(self._on_listed)
        s.refreshed.connect(self._on_refreshed)
        s.rescanned.connect(self._on_rescanned)
        s.planned.connect(self._on_planned)
        s.progress.connect(self._on_progress)
        s.downloaded.connect(self._on_downloaded)
        s.download_failed.connect(self._on_download_failed)
        s.removed.connect(self._on_removed)
        s.token_checked.connect(self._on_token_checked)
        picker.choice_changed.connect(self.check_choice)
        picker.download_requested.connect(self.start_download)
        picker.cancel_requested.connect(self.cancel_download)
        picker.remove_requested.connect(self.ask_remove)
        picker.token_given.connect(lambda token: TokenCheck(self.hub, self.signals, token).start())
        picker.folder_chosen.connect(self.add_folder)
        # An int4 load may have made the model's int4 copy: its entry then says where, and its size.
        models.ready.connect(lambda loaded: LibraryScan(self.hub, self.signals, self.settings.model_folders,
                                                        refresh=True).start())
        # A download or removal made from a terminal (the CLI) is noticed when the user comes back
        # to the window: every click on it activates it first. See _on_rescanned.
        parent.installEventFilter(self)

    def rescan(self) -> None:
        LibraryScan(self.hub, self.signals, self.settings.model_folders).start()

    def _on_listed(self, entries: list) -> None:
        self._picker.set_entries(entries)
        if self._load_after_scan is not None:
            self._picker.select(self._load_after_scan)
            self._load_after_scan = None
            self._models.load()
        elif not self._listed_once:
            self._models.offer_remembered()
        self._listed_once = True

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.WindowActivate and self._listed_once and not self.downloading():
            LibraryScan(self.hub, self.signals, self.settings.model_folders, signal="rescanned").start()
        return False

    def _on_rescanned(self, entries: list) -> None:
        """The models on this machine, read again on activation: shown only when they changed.
        Why on activation rather than a QFileSystemWatcher on the cache: the cache may not exist
        yet, a download writes deep in it (watches are not recursive), folders may be anywhere,
        and the user cannot act on a change before coming back to the window."""
        if self.downloading() or entries == list(self._picker.entries.values()):
            return
        log.info("the models on this machine changed (a download or removal made outside the window)")
        self.plans.clear()
        self._picker.set_entries(entries)

    def _on_refreshed(self, entries: list) -> None:
        """The entries' details updated in place: the list, the choice and what it needs stay."""
        self._picker.entries.update({e.name: e for e in entries if e.name in self._picker.entries})
        self._show_weights_note()

    def _show_weights_note(self) -> None:
        """For a model on this machine: what the chosen weights do with its files, and the copy
        kept of them, beside what the model is."""
        entry = self._picker.entry()
        if entry is None or entry.state != READY:
            return
        about = entry.about + (f" · {entry.location}" if entry.location is not None else "")
        note = entry.weights_note(self._picker.chosen_weights() or "")
        if note:
            about += f". {note[0].upper()}{note[1:]}."
        self._picker.about.setText(about)

    # --- what the choice needs ----------------------------------------------------------
    def check_choice(self) -> None:
        """A downloaded model: its memory (the checkpoint's header); one to download: ask the
        Hub what it fetches, the disk it needs, and the memory it will need."""
        name, weights, entry = self._picker.source(), self._picker.chosen_weights(), self._picker.entry()
        if entry is not None and entry.state == READY or entry is None and not _looks_like_repo(name):
            self._show_weights_note()
            self._models.check_memory()
            return
        self._picker.show_fit_checking()
        DownloadCheck(self.hub, self.signals, name, weights, self.device).start()

    def _on_planned(self, name: str, weights, plan, error: str, reason: str) -> None:
        key = (name, weights)
        client = self.hub.client()
        if plan is not None:
            self.plans[key] = plan
            gated = plan.remote.gated and not client.token  # Download cannot work before a token
            why = f"{client.gated_hint(plan.remote.repo)}. {ADVICE['gated'].next_step}" if gated else ""
            self._picker.set_blocked(name, weights, why, token=True)
        else:
            text, advice = download_failure(name, error, reason)
            self._picker.set_blocked(name, weights, "" if advice.retry else text, advice.token)
        if key == self._download_after_check:
            self._download_after_check = None
            if plan is None:
                self._say_failed(name, text)
            else:
                self._start(name, plan)
        if key != (self._picker.source(), self._picker.chosen_weights()):
            return
        if plan is None:
            self._picker.show_fit(text, None)
            return
        if plan.remote.gated and not client.token:
            self._picker.show_gated(client.page(plan.remote.repo))
        self._picker.show_needs(self._describe(plan), plan.memory is None or plan.memory.fits)

    def _say_failed(self, name: str, text: str) -> None:
        """A download the user asked for failed: in the window (and what to do), and in the log."""
        log.warning("%s", text)
        self._picker.set_done(f"{name}: not downloaded.")
        self._message_bar.show_message(text, "error")

    def _describe(self, plan) -> str:
        client = self.hub.client()
        text = (f"Download {size_text(plan.to_download)} ({size_text(free_bytes(client.cache_dir))} free in "
                f"{client.cache_dir}).")
        if plan.note:
            text += f" {plan.note[0].upper()}{plan.note[1:]}."
        if plan.memory is None:
            return text + " Its memory need is known once its files can be read."
        return text + ("" if plan.memory.fits else " Does not fit:") + f" {plan.memory.describe()}."

    # --- downloading --------------------------------------------------------------------
    def start_download(self, name: str) -> None:
        if self.downloading():
            return
        key = (name, self._picker.chosen_weights())
        self._picker.set_loading(f"Asking the Hub about {name}…")
        if key in self.plans:
            self._start(name, self.plans[key])
        else:
            self._download_after_check = key
            DownloadCheck(self.hub, self.signals, name, key[1], self.device).start()

    def _start(self, name: str, plan) -> None:
        log.info("downloading %s (%s)", plan.remote.repo, size_text(plan.to_download))
        self._models.busy_changed.emit(True)  # no conversation starts and no model loads meanwhile
        self.download = ModelDownload(self.hub, self.signals, name, plan)
        self.download.start()

    def downloading(self) -> bool:
        return self.download is not None and self.download.is_alive()

    def cancel_download(self) -> None:
        if self.download is not None:
            self.download.cancel.set()

    def _on_progress(self, progress) -> None:
        now = time.monotonic()
        if (now - self._shown_at >= PROGRESS_EVERY_S or progress.file != self._shown_file
                or progress.done_bytes >= progress.total_bytes):
            self._shown_at, self._shown_file = now, progress.file
            self._picker.show_download(progress)

    def _on_downloaded(self, name: str, repo: str) -> None:
        self._models.busy_changed.emit(False)
        self.plans.clear()  # sizes to download changed
        self._picker.set_done(f"Downloaded {repo}.")
        self._load_after_scan = repo  # talk at once: it loads as soon as the list has it
        self.rescan()

    def _on_download_failed(self, name: str, message: str, reason: str) -> None:
        self._models.busy_changed.emit(False)
        self.plans.clear()
        if reason == "cancelled":
            self._picker.set_done(f"{name}: not downloaded.")
            self._message_bar.show_message(message, "info")
        else:
            text, advice = download_failure(name, message, reason)
            self._picker.set_blocked(name, self._picker.chosen_weights(), "" if advice.retry else text, advice.token)
            self._say_failed(name, text)
        self.rescan()  # a partial download shows as one to finish

    # --- removing, folders, tokens ------------------------------------------------------
    def ask_remove(self, name: str) -> None:
        loaded = self._models.loaded
        if self.downloading() or (loaded is not None and loaded.source == name):
            self._message_bar.show_message(f"{name} is {'downloading' if self.downloading() else 'loaded'}: "
                                           "cancel or load another model first, then remove it.", "info")
            return
        entry = self._picker.entry()
        size = f" ({size_text(entry.size_on_disk)})" if entry is not None and entry.size_on_disk else ""
        copies = entry.kept_copies if entry is not None else ()
        if copies:
            size += (f" and the quantized copies kept of them ({size_text(sum(c.size_on_disk for c in copies))}, in "
                     f"{copies[0].path.parent})")
        self.last_dialog = QMessageBox(QMessageBox.Icon.Question, "Remove the model",
                                       f"Delete the downloaded files of {name}{size}? Downloading it again "
                                       "fetches them anew.",
                                       QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
                                       self.parent())
        self.last_dialog.accepted.connect(lambda: ModelRemoval(self.hub, self.signals, name).start())
        self.last_dialog.open()

    def _on_removed(self, name: str, message: str) -> None:
        self.plans.clear()
        self._message_bar.show_message(message, "info")
        self.rescan()

    def add_folder(self, folder: str) -> None:
        """A folder is remembered only when it holds a model."""
        missing = missing_files(Path(folder))
        if missing:
            self._message_bar.show_message(f"{folder} is not a model folder: it has no {', '.join(missing)}.")
            return
        self.settings.remember_folder(folder)
        self._picker.select(folder)
        self.rescan()

    def _on_token_checked(self, saved: bool, text: str) -> None:
        if saved:
            overridden = " (HF_TOKEN in the environment is used before it)" if os.environ.get("HF_TOKEN") else ""
            self._message_bar.show_message(f"Access token stored for {text or 'your account'}{overridden}.", "info")
            self.plans.clear()
            self._picker.unblock_all()  # what a token can unblock is asked again
            self.check_choice()
        else:
            self._message_bar.show_message(f"The token was not stored: {text}")


def _looks_like_repo(name: str) -> bool:
    return name.count("/") == 1 and not Path(name).exists()
