"""The offer to fetch GPU support (app/gpu/cuda_torch.py) and its download: the size up front,
a progress bar, pause and resume, a plain message when offline, and a restart at the end."""
from __future__ import annotations

import logging
import sys
import threading

from PyQt6.QtCore import QObject, QProcess, pyqtSignal
from PyQt6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from .cuda_torch import CudaTorchInstaller, Manifest, NvidiaGpu, c_compiler, gb
from .wheel_fetch import Cancelled, OfflineError

log = logging.getLogger("duplexcadence.gpu_support")


class _InstallSignals(QObject):
    progress = pyqtSignal(int, int)  # bytes done, bytes in all
    finished = pyqtSignal(str)       # "" when done, else what went wrong
    paused = pyqtSignal()


class GpuSupportDialog(QDialog):
    def __init__(self, manifest: Manifest, gpu: NvidiaGpu, parent: QWidget | None = None,
                 installer: CudaTorchInstaller | None = None):
        super().__init__(parent)
        self.setWindowTitle("GPU support")
        self.installer = installer or CudaTorchInstaller(manifest)
        self.manifest = manifest
        self.thread: threading.Thread | None = None
        have = self.installer.downloaded_bytes()
        resume = f" ({gb(have)} of it already downloaded)" if have else ""
        self.text = QLabel(
            f"<p><b>{gpu.name}</b> found. This installation runs the models on the CPU, which is far too "
            f"slow for the full-size models.</p><p>GPU support is PyTorch {manifest.torch} built for CUDA "
            f"{manifest.cuda}, from PyPI: <b>{gb(manifest.download_bytes)} to download</b>{resume}, "
            f"{gb(manifest.installed_bytes)} on disk in<br>{self.installer.target.parent}.</p>"
            "<p>An interrupted download resumes where it stopped.</p>"
            + ("" if c_compiler() else "<p>It also needs a C compiler, which this system lacks (Triton builds "
               "its GPU kernels' launcher with it): install one, e.g. <tt>sudo apt install gcc</tt>.</p>"))
        self.text.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setValue(int(1000 * have / max(1, manifest.download_bytes)))
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.download_button = QPushButton("Resume download" if have else "Download")
        self.pause_button = QPushButton("Pause")
        self.pause_button.setEnabled(False)
        self.restart_button = QPushButton("Restart now")
        self.restart_button.hide()
        buttons = QDialogButtonBox()
        for button in (self.download_button, self.pause_button, self.restart_button):
            buttons.addButton(button, QDialogButtonBox.ButtonRole.ActionRole)
        self.close_button = buttons.addButton("Not now", QDialogButtonBox.ButtonRole.RejectRole)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        for widget in (self.text, self.bar, self.status, buttons):
            layout.addWidget(widget)
        self.signals = _InstallSignals()
        self.signals.progress.connect(self._on_progress)
        self.signals.finished.connect(self._on_finished)
        self.download_button.clicked.connect(self.start)
        self.pause_button.clicked.connect(self.installer.cancel)
        self.restart_button.clicked.connect(self.restart)

    def start(self) -> None:
        self.installer.cancel_event.clear()
        self.download_button.setEnabled(False)
        self.pause_button.setEnabled(True)
        self.status.setText("Downloading…")
        self.thread = threading.Thread(target=self._run, name="gpu-support-download", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.installer.run(lambda done, total: self.signals.progress.emit(done, total))
        except Cancelled:
            self.signals.finished.emit("Paused. What was downloaded is kept: press Resume to go on.")
        except OfflineError as exc:
            self.signals.finished.emit(f"No connection ({exc}). What was downloaded is kept: press Resume "
                                       "when you are online again.")
        except (OSError, ValueError) as exc:
            log.exception("GPU support download failed")
            self.signals.finished.emit(f"The download failed: {exc}")
        else:
            self.signals.finished.emit("")

    def _on_progress(self, done: int, total: int) -> None:
        self.bar.setValue(int(1000 * done / max(1, total)))
        self.status.setText(f"Downloading… {gb(done)} of {gb(total)}" if done < total else "Unpacking…")

    def _on_finished(self, problem: str) -> None:
        self.pause_button.setEnabled(False)
        if problem:
            self.status.setText(problem)
            self.download_button.setText("Resume download")
            self.download_button.setEnabled(True)
            return
        self.bar.setValue(1000)
        self.status.setText("GPU support is installed. Restart DuplexCadence to run on the GPU.")
        self.download_button.hide()
        self.restart_button.show()
        self.close_button.setText("Later")

    def restart(self) -> None:
        """Start a new instance (the runtime hook puts GPU support first), then close this one."""
        QProcess.startDetached(sys.executable, sys.argv[1:])
        self.accept()
        if self.parent() is not None:
            self.parent().close()

    def reject(self) -> None:
        self.installer.cancel()
        super().reject()
