"""Background work of the model library: listing the models, asking the Hub what a download
means, downloading (cancellable, with progress), removing, and checking a token. Everything
here runs on threads and reports through queued signals; nothing blocks the window."""
from __future__ import annotations

import logging
import threading

from PyQt6.QtCore import QObject, pyqtSignal

log = logging.getLogger("duplexcadence.library")


class LibrarySignals(QObject):
    listed = pyqtSignal(list)                  # [engine.ModelEntry]
    refreshed = pyqtSignal(list)               # the same, read again after a load (an int4 copy it made)
    rescanned = pyqtSignal(list)               # the same, read again to notice changes made outside the window
    # name, weights, DownloadPlan or None, error ("" for none), its reason (engine.HubError.reason, or "twin")
    planned = pyqtSignal(str, object, object, str, str)
    progress = pyqtSignal(object)              # engine.Progress
    downloaded = pyqtSignal(str, str)          # the name chosen, the repository downloaded
    download_failed = pyqtSignal(str, str, str)  # name, one line, its reason ("cancelled" included)
    removed = pyqtSignal(str, str)             # name, what happened
    token_checked = pyqtSignal(bool, str)      # saved, account name or why not


class HubAccess:
    """The Hugging Face client the library's threads share, made on the first thread that
    needs it (importing the client is not for the GUI thread)."""

    def __init__(self, client=None):
        self._client, self._lock = client, threading.Lock()

    def client(self):
        with self._lock:
            if self._client is None:
                from engine import HubClient
                self._client = HubClient()
            return self._client


class _Job(threading.Thread):
    """A library thread: an error the user can act on is reported, anything else is logged
    and reported as what failed."""

    def __init__(self, name: str, hub: HubAccess, signals: LibrarySignals):
        super().__init__(name=name, daemon=True)
        self.hub, self.signals = hub, signals
        self.reason = "other"  # after a failure: engine.HubError.reason, or "other"

    def run(self) -> None:
        from engine import CheckpointError
        try:
            self.work()
        except CheckpointError as exc:  # HubError included: the Hub, the network, the disk
            self.reason = getattr(exc, "reason", "other")
            self.failed(str(exc))
        except Exception as exc:
            log.exception("%s failed", self.name)
            self.failed(f"{type(exc).__name__}: {exc}")

    def work(self) -> None:
        raise NotImplementedError

    def failed(self, message: str) -> None:
        raise NotImplementedError


class LibraryScan(_Job):
    """`refresh`: the list read again to update what the entries say, not to offer it anew."""

    def __init__(self, hub, signals, folders: list[str], refresh: bool = False, signal: str = "listed"):
        """`signal`: the LibrarySignals one that carries the list ("refreshed" with `refresh`)."""
        super().__init__("library-scan", hub, signals)
        self.folders, self.signal = folders, "refreshed" if refresh else signal

    def work(self) -> None:
        from engine import list_models
        entries = list_models(self.hub.client().cache_dir, self.folders)
        getattr(self.signals, self.signal).emit(entries)

    def failed(self, message: str) -> None:
        log.warning("listing the models failed: %s", message)


class DownloadCheck(_Job):
    """What downloading `name` for `weights` fetches and whether it fits `device`."""

    def __init__(self, hub, signals, name: str, weights: str | None, device: str):
        super().__init__("download-check", hub, signals)
        self.model, self.weights, self.device = name, weights, device

    def work(self) -> None:
        from engine import plan_download, select_device
        plan = plan_download(self.hub.client(), self.model, self.weights, select_device(self.device))
        self.signals.planned.emit(self.model, self.weights, plan, "", "")

    def failed(self, message: str) -> None:
        if self.reason == "not_found" and self.weights in ("int8", "int4") and self._as_stored_exists():
            self.reason = "twin"  # int8 and int4 download its official int8 twin: that is missing, not the model
        self.signals.planned.emit(self.model, self.weights, None, message, self.reason)

    def _as_stored_exists(self) -> bool:
        from engine import CheckpointError, plan_download, select_device
        try:
            plan_download(self.hub.client(), self.model, None, select_device(self.device))
        except CheckpointError:
            return False
        return True


class ModelDownload(_Job):
    def __init__(self, hub, signals, name: str, plan):
        super().__init__("model-download", hub, signals)
        self.model, self.plan, self.cancel = name, plan, threading.Event()

    def work(self) -> None:
        from engine import DownloadCancelled
        try:
            self.hub.client().download(self.plan.remote, self.signals.progress.emit, self.cancel)
        except DownloadCancelled:
            self.reason = "cancelled"
            self.failed("Download cancelled; the files already complete are kept for next time.")
            return
        log.info("downloaded %s", self.plan.remote.repo)
        self.signals.downloaded.emit(self.model, self.plan.remote.repo)

    def failed(self, message: str) -> None:
        self.signals.download_failed.emit(self.model, message, self.reason)


class ModelRemoval(_Job):
    def __init__(self, hub, signals, name: str):
        super().__init__("model-removal", hub, signals)
        self.model = name

    def work(self) -> None:
        from engine import remove_model, size_text
        freed = remove_model(self.model, self.hub.client().cache_dir)
        self.signals.removed.emit(self.model, f"Removed {self.model}: {size_text(freed)} freed.")

    def failed(self, message: str) -> None:
        self.signals.removed.emit(self.model, message)


class TokenCheck(_Job):
    def __init__(self, hub, signals, token: str):
        super().__init__("token-check", hub, signals)
        self._token = token

    def work(self) -> None:
        user = self.hub.client().save_token(self._token)
        self.signals.token_checked.emit(True, user)

    def failed(self, message: str) -> None:
        self.signals.token_checked.emit(False, message.replace("the token: ", ""))
