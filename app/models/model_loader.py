"""Background threads that touch the engine before a conversation: loading a model (and
building its session), a predictor for its predicting policies, and the memory check. The engine, and with it
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

BAD_FILES = ("Its files cannot be used as they are: for a downloaded model, Remove it and download it again; "
             "for a folder, replace the file named.")
SEE_THE_LOG = "The details are in the log (Help → Show log)."


@dataclass(frozen=True)
class LoadedModel:
    source: str
    name: str
    session: DuplexSession    # only used on engine threads
    voices: list[str]         # the voices the model declares; empty for a model without
    default_role: str         # the role prompt used when the user gives none; "" for a model without
    device_label: str         # "CPU" or the GPU's name
    device_reason: str        # which device, and why that one ("CPU: no NVIDIA GPU found")
    memory: str               # what it needs, against the device's free memory before loading
    capabilities: dict        # option name -> None if usable, else why not
    predictor: str            # the DiffuPlex predictor file loaded with the model ("" for none)
    notice: str = ""          # something about the load the user should know ("" for nothing)
    weights: str | None = None  # as chosen for the load ("bf16", "int8", "int4"; None: as stored)
    interruptible: bool = False  # talking over it cuts its speech short (a once-a-second model)
    step_s: float = 0.08      # the audio a model's step hears (once a second: 1.0)

    @property
    def takes_role(self) -> bool:
        """It takes a role prompt (it declares a default one), whether or not it has voices."""
        return bool(self.default_role)


class LoaderSignals(QObject):
    progress = pyqtSignal(str)
    weights_read = pyqtSignal(str, object, object)  # file name, bytes read, bytes in all (ints past 2**31)
    loaded = pyqtSignal(object)        # LoadedModel
    failed = pyqtSignal(str, str)      # source, message naming the file and the problem
    predictor = pyqtSignal(str, dict)  # a predictor file loaded: its path, the new capabilities
    # source, weights (None: as stored), what it needs, whether it fits (None: it cannot be used)
    fit = pyqtSignal(str, object, str, object)


class ModelLoader(threading.Thread):
    """Loads a model and builds its session. After `failed`, `kept` is the model to talk with
    (the previous one, or None) and `advice` what the user can do ("" when the message says it)."""

    def __init__(self, source: str, device: str, signals: LoaderSignals, previous: LoadedModel | None = None,
                 weights: str | None = None):
        """`previous`: the LoadedModel in use. It stays loaded until the new model is; only when the
        two do not fit the device's memory together is it closed first, and then loaded again if the
        new one fails. It is closed here, off the GUI thread. `weights`: "bf16", "int8", "int4" or
        None (as the checkpoint holds them)."""
        super().__init__(name="engine-loader", daemon=True)
        self.source, self.device, self.signals = source, device, signals
        self.previous, self.weights = previous, weights
        self.kept, self.advice = previous, ""

    def run(self) -> None:
        self.signals.progress.emit("Starting the engine…")
        try:
            from engine import CheckpointError, DeviceMemoryError, HubError
        except Exception as exc:  # a broken installation: say so instead of dying
            log.exception("importing the engine failed")
            self.advice = SEE_THE_LOG
            self.signals.failed.emit(self.source, f"The engine could not start: {exc}")
            return
        try:
            loaded = self._load()
        except (CheckpointError, DeviceMemoryError) as exc:
            if isinstance(exc, CheckpointError) and not isinstance(exc, HubError):
                self.advice = BAD_FILES
            self._failed(str(exc))
            return
        except Exception as exc:  # anything else is a bug or an environment problem: log it
            log.exception("loading %s failed", self.source)
            self.advice = SEE_THE_LOG
            self._failed(f"{self.source}: {type(exc).__name__}: {exc}")
            return
        if self.kept is not None:  # the new model is ready: the one it replaces goes, if not gone yet
            self.kept.session.close()
        self.signals.loaded.emit(loaded)

    def _failed(self, message: str) -> None:
        """The previous model, if it had to be closed for room, is loaded again before `failed`."""
        if self.previous is not None and self.kept is None:
            self.signals.progress.emit(f"Loading {self.previous.source} again…")
            again = ModelLoader(self.previous.source, self.device, self.signals, weights=self.previous.weights)
            try:
                self.kept = again._load()
            except Exception:
                log.exception("loading %s again failed", self.previous.source)
        self.signals.failed.emit(self.source, message)

    def _load(self) -> LoadedModel:
        import torch

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

        from ..gpu.cuda_torch import why_this_device

        device = select_device(self.device)
        limit_cpu_threads(device)
        # Which torch: in an installed app, the bundled CPU build or fetched GPU support.
        log.info("torch %s (CUDA %s) from %s", torch.__version__, torch.version.cuda, torch.__file__)
        label = torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"
        memory = plan_memory(self.source, self.weights, device)  # a bad checkpoint fails here, nothing freed
        if self.previous is not None and not fits_beside(memory):
            self.previous.session.close()  # two 7B models rarely fit: the previous one makes room
            self.kept = None
            if device.startswith("cuda"):  # its memory back to the device before asking what is free
                gc.collect()
                torch.cuda.empty_cache()
            memory = plan_memory(self.source, self.weights, device)
        memory.check()  # before any weight is read: a model that does not fit is refused, not half-loaded
        self.signals.progress.emit(f"Loading {self.source} on {label}…")
        with reporting_progress(self.signals.weights_read.emit):
            model = load_model(self.source, device=device, weights=self.weights)
        self.signals.progress.emit("Preparing the session…")
        # No prompts yet: the conversation's start plays the ones the user picks.
        persona = Persona()
        # The model's own DiffuPlex predictor, if it ships one (the demo does), is found by itself;
        # one that does not fit leaves the model usable with AR, and says why.
        predictor, notice = model.predictor_file, model.notice
        try:
            session = DuplexSession(model, persona=persona, predictor=predictor)
        except CheckpointError as exc:
            predictor, notice = None, "; ".join(filter(None, (model.notice, f"predictor not loaded: {exc}")))
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
                           predictor=predictor.name if predictor else "", notice=notice, weights=self.weights,
                           interruptible=session.can_interrupt,
                           step_s=model.step_samples / model.input_rate)


def fits_beside(memory) -> bool:
    """Whether a model of this engine.MemoryPlan fits while the one in use stays loaded: the GPU's
    free memory was measured with it there; on the CPU, the memory the system has available."""
    if memory.free_bytes is not None:
        return memory.fits
    try:
        with open("/proc/meminfo") as meminfo:
            available = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return False  # not known (not Linux): make room first, as a failure loads the previous again
    return memory.need_bytes <= available


class PredictorLoader(threading.Thread):
    """Loads a predictor file into a session off the GUI thread (it is checked
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
