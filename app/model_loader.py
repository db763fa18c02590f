"""Background threads that touch the engine before a conversation: loading a model (and
building its session), a DiffuPlex predictor, and the memory check. The engine, and with it
torch, is imported here, never on the GUI thread."""
from __future__ import annotations

import gc
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PyQt6.QtCore import QObject, pyqtSignal

if TYPE_CHECKING:
    from engine import DuplexSession

log = logging.getLogger("duplexcadence.loader")


@dataclass(frozen=True)
class LoadedModel:
    source: str
    name: str
    session: DuplexSession    # only used on engine threads
    voices: list[str]         # PersonaPlex voice prompts; empty for other models
    default_role: str         # PersonaPlex role prompt used when the user gives none
    device_label: str         # "CPU" or the GPU's name
    device_reason: str        # which device, and why that one ("CPU: no NVIDIA GPU found")
    memory: str               # what it needs, against the device's free memory before loading
    capabilities: dict        # option name -> None if usable, else why not
    predictor: str            # the DiffuPlex predictor file loaded with the model ("" for none)
    notice: str = ""          # something about the load the user should know ("" for nothing)


class LoaderSignals(QObject):
    progress = pyqtSignal(str)
    weights_read = pyqtSignal(str, object, object)  # file name, bytes read, bytes in all (ints past 2**31)
    loaded = pyqtSignal(object)        # LoadedModel
    failed = pyqtSignal(str, str)      # source, message naming the file and the problem
    predictor = pyqtSignal(str, dict)  # a predictor file loaded: its path, the new capabilities
    # source, weights (None: as stored), what it needs, whether it fits (None: it cannot be used)
    fit = pyqtSignal(str, object, str, object)


class ModelLoader(threading.Thread):
    def __init__(self, source: str, device: str, signals: LoaderSignals, previous: LoadedModel | None = None,
                 weights: str | None = None):
        """`previous`: the LoadedModel being replaced; its session is closed here, off the GUI
        thread, before the new model takes memory. `weights`: "bf16", "int8", "int4" or None (as the
        checkpoint holds them)."""
        super().__init__(name="engine-loader", daemon=True)
        self.source, self.device, self.signals = source, device, signals
        self.previous, self.weights = previous, weights

    def run(self) -> None:
        self.signals.progress.emit("Starting the engine…")
        try:
            from engine import CheckpointError, DeviceMemoryError
        except Exception as exc:  # a broken installation: say so instead of dying
            log.exception("importing the engine failed")
            self.signals.failed.emit(self.source, f"The engine could not start: {exc}")
            return
        try:
            self.signals.loaded.emit(self._load())
        except (CheckpointError, DeviceMemoryError) as exc:
            self.signals.failed.emit(self.source, str(exc))
        except Exception as exc:  # anything else is a bug or an environment problem: log it
            log.exception("loading %s failed", self.source)
            self.signals.failed.emit(self.source, f"{self.source}: {type(exc).__name__}: {exc}")

    def _load(self) -> LoadedModel:
        import torch

        if self.previous is not None:
            self.previous.session.close()
            self.previous = None

        from engine import (
            CheckpointError,
            DuplexSession,
            Persona,
            limit_cpu_threads,
            load_model,
            plan_memory,
            reporting_progress,
            select_device,
        )

        from .cuda_torch import why_this_device

        device = select_device(self.device)
        limit_cpu_threads(device)
        # Which torch: in an installed app, the bundled CPU build or fetched GPU support.
        log.info("torch %s (CUDA %s) from %s", torch.__version__, torch.version.cuda, torch.__file__)
        label = torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"
        if device.startswith("cuda"):  # the replaced model's memory back to the device before asking what is free
            gc.collect()
            torch.cuda.empty_cache()
        memory = plan_memory(self.source, self.weights, device)
        memory.check()  # before any weight is read: a model that does not fit is refused, not half-loaded
        self.signals.progress.emit(f"Loading {self.source} on {label}…")
        with reporting_progress(self.signals.weights_read.emit):
            model = load_model(self.source, device=device, weights=self.weights)
        self.signals.progress.emit("Preparing the session…")
        # No prompts yet: the conversation's start plays the ones the user picks.
        persona = Persona(None, "") if model.variant == "personaplex" else None
        # The model's own DiffuPlex predictor, if it ships one (the demo does), is found by itself;
        # one that does not fit leaves the model usable with AR, and says why.
        predictor, notice = model.predictor_file, model.notice
        try:
            session = DuplexSession(model, persona=persona, predictor=predictor)
        except CheckpointError as exc:
            predictor, notice = None, "; ".join(filter(None, (model.notice, f"DiffuPlex predictor not loaded: {exc}")))
            session = DuplexSession(model, persona=persona)
        if device.startswith("cuda"):
            # Triton keeps what it compiles on disk: only a machine's first start pays for it (28 s
            # for moshiko on an H200, a few seconds after).
            self.signals.progress.emit("Preparing the GPU: compiling kernels, capturing graphs… "
                                       "(up to a minute the first time on this computer)")
            session.prepare()  # the first words of a conversation are not lost in a stall
        return LoadedModel(source=self.source, name=model.name, session=session, voices=session.voices,
                           default_role=session.default_role, device_label=label,
                           device_reason=why_this_device(device), memory=memory.describe(),
                           capabilities=session.capabilities(),
                           predictor=predictor.name if predictor else "", notice=notice)


class PredictorLoader(threading.Thread):
    """Loads a DiffuPlex predictor file into a session off the GUI thread (it is checked
    against the session's model; used from the next conversation)."""

    def __init__(self, session: DuplexSession, path: str, signals: LoaderSignals):
        super().__init__(name="predictor-loader", daemon=True)
        self.session, self.path, self.signals = session, path, signals

    def run(self) -> None:
        from engine import CheckpointError
        try:
            self.session.load_predictor(self.path)
        except CheckpointError as exc:
            self.signals.failed.emit(self.path, str(exc))
            return
        except Exception as exc:  # a bug or the environment: log it, say it
            log.exception("loading the predictor %s failed", self.path)
            self.signals.failed.emit(self.path, f"{self.path}: {type(exc).__name__}: {exc}")
            return
        self.signals.predictor.emit(self.path, self.session.capabilities())


class MemoryCheck(threading.Thread):
    """Whether a model and weights choice fits the device's free memory, asked before loading
    (reads only the checkpoint's header)."""

    def __init__(self, source: str, weights: str | None, device: str, signals: LoaderSignals):
        super().__init__(name="memory-check", daemon=True)
        self.source, self.weights, self.device, self.signals = source, weights, device, signals

    def run(self) -> None:
        try:
            from engine import CheckpointError, plan_memory, select_device
        except Exception:  # the loader says what is broken
            log.exception("importing the engine failed")
            return
        try:
            memory = plan_memory(self.source, self.weights, select_device(self.device))
        except CheckpointError as exc:  # not a memory problem: loading says it again, with the same words
            self.signals.fit.emit(self.source, self.weights, str(exc), None)
            return
        except Exception:
            log.exception("the memory check of %s failed", self.source)
            return
        self.signals.fit.emit(self.source, self.weights, memory.describe(), memory.fits)
