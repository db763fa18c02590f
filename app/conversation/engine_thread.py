"""The engine thread of one conversation: microphone frames in, model frames out, results to
the GUI through queued Qt signals (conversation_signals.py; this module needs no Qt, so a bench
runs it on a machine without). The session's steps run on a step thread of their own, one at a
time, while this thread keeps reading the microphone and deciding barge-in: a once-a-second
model's step holds it for a third of a second, and talking over it would wait that long. The GUI
thread only hands options to the session's mailbox (`set_options`), which touches no device."""
from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections import deque
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..audio.audio_io import ENGINE_RATE, FRAME_SIZE, AudioCounters
from ..audio.echo_cancel import EchoSettings, EchoState
from .barge_in import BargeIn
from .recorder import ConversationRecorder
from .spoken_words import SpokenWords

if TYPE_CHECKING:
    from engine import DuplexSession, FrameOutput, RuntimeOptions

    from ..audio.audio_io import AudioLink
    from ..audio.file_feed import FileFeed

log = logging.getLogger("duplexcadence.conversation")
IDLE_WAIT_S = 0.004  # between polls of the microphone ring while no frame is complete
SKIP_TOLD_EVERY = 25  # frames: the window hears of speech skipped at most this often, and at the end


@dataclass(frozen=True)
class FrameReport:
    """One frame of the conversation, for the GUI thread: the engine's output as the session
    returned it (a new object each frame, holding its own copies, so the GUI thread can read
    it while the engine runs the next), and what the app measured around it."""
    index: int
    output: FrameOutput
    level_dbfs: float         # of the microphone frame the engine heard
    counters: AudioCounters
    output_dbfs: float = -120.0  # of the model's frame as the speaker played it (after the volume)
    echo: EchoState | None = None  # what echo cancellation is doing
    heard: tuple[tuple[int, str], ...] = ()  # (frame, text) of the model's words whose speech began playing now


@dataclass(frozen=True)
class ConversationEnd:
    frames: int
    recording: Path | None
    transcript: Path | None


class Signal(Protocol):
    def emit(self, value=None, /) -> None: ...


class WorkerSignals(Protocol):
    """Where the worker says what happens: the window's ConversationSignals (queued Qt signals);
    anything with these six emitters, such as a bench's, runs it without Qt."""
    started: Signal   # prompts done, audio running
    frame: Signal     # FrameReport
    notice: Signal    # something the user should know; the conversation goes on
    warning: Signal   # the same, for the message bar: something went wrong
    failed: Signal    # the conversation had to stop; says why
    finished: Signal  # ConversationEnd, always last


class ConversationWorker(threading.Thread):
    """`recorder` may be None (not recording); `persona` is (voice, role) for a model that takes them
    models, else None."""

    def __init__(self, session: DuplexSession, link: AudioLink | FileFeed, recorder: ConversationRecorder | None,
                 persona: tuple[str | None, str] | None, signals: WorkerSignals):
        """The session's options are set before the thread starts (set_options)."""
        super().__init__(name="engine-conversation", daemon=True)
        self.session, self.link, self.recorder = session, link, recorder
        self.persona = persona
        self.signals = signals
        self._muted = False
        self._echo_changed: EchoSettings | None = None  # for the recording's notes
        self._stopping = threading.Event()
        # Frames waiting for what the speaker played meanwhile (the recording's model channel):
        # (microphone frame, the model's words that began playing then, notes to make before it).
        self._unrecorded: deque[tuple[np.ndarray, str, list]] = deque()
        # The same frames, for barge-in: (index, the person's level in dBFS, whether it may interrupt).
        self._heard: deque[tuple[int, float, bool]] = deque()
        self._spoken = SpokenWords()  # the window's words wait for the speaker to play them
        self._skipped_s = self._skipped_told_s = 0.0
        self._skip_told_at = -SKIP_TOLD_EVERY
        self._barge_in: BargeIn | None = None  # set_barge_in: talking over the model stops it
        self._played: deque[np.ndarray] = deque()  # played beside frames read but not yet stepped
        self._interrupt_due: int | None = None  # heard during a step: the session stops after it
        # Frames read while a step runs wait for it, as many as the link itself keeps waiting (past
        # that, the link drops the oldest): a step as long as a unit's is heard through.
        self._read_ahead = math.ceil(link.config.max_input_backlog_s * ENGINE_RATE / FRAME_SIZE)

    def set_options(self, options: RuntimeOptions) -> None:
        """GUI thread: checked now, applied by the engine before its next frame (the
        session's mailbox; it touches no device)."""
        try:
            self.session.set_options(options)
        except ValueError as exc:
            self.signals.notice.emit(f"Option not applied: {exc}")

    def set_muted(self, muted: bool) -> None:
        self._muted = muted

    def set_barge_in(self, on: bool) -> None:
        """GUI thread: whether talking over the model stops it (where its family can be)."""
        self._barge_in = BargeIn() if on and self.session.can_interrupt else None

    def set_speaker_gain(self, gain: float) -> None:
        """GUI thread: the speaker's volume (0 when muted), from the next frame played."""
        self.link.set_speaker_gain(gain)

    def set_echo(self, settings: EchoSettings) -> None:
        """GUI thread: the microphone path's processing, applied by the engine thread."""
        self.link.set_echo(settings)
        self._echo_changed = settings

    def stop(self) -> None:
        """GUI thread: silence at once (the audio link closes now); the engine thread finishes
        its current frame and exits. Stopping comes first: a link closed by a stop is no
        device problem to report."""
        self._stopping.set()
        self.link.close()

    def run(self) -> None:
        try:
            self._converse()
        except Exception as exc:  # the engine or a device failed: report, never die silently
            log.exception("conversation failed")
            self.signals.failed.emit(f"The conversation stopped: {type(exc).__name__}: {exc}")
        finally:
            self.link.close()
            self._tell_skipped(-1)  # stopped while skipping: the window's figure is the recording's
            self._close_recording()
            self.signals.finished.emit(ConversationEnd(
                frames=self.recorder.frames if self.recorder else 0,
                recording=self.recorder.wav_path if self.recorder else None,
                transcript=self.recorder.json_path if self.recorder else None))

    def _close_recording(self) -> None:
        if self.recorder is None:
            return
        try:
            self._record_played(final=True)
            self.recorder.close()
        except OSError as exc:  # e.g. the disk filled up: what was flushed is still there
            log.exception("closing the recording failed")
            self.signals.failed.emit(f"The recording could not be completed: {exc}")

    def _converse(self) -> None:
        if not self._reset_session() or self._stopping.is_set():  # refused, or stopped while the prompts played
            return
        self.link.start()
        self.signals.started.emit()
        with futures.ThreadPoolExecutor(1, thread_name_prefix="engine-step") as steps:  # leaving waits for its step
            self._listen_and_step(steps)

    def _listen_and_step(self, steps: futures.Executor) -> None:
        index = 0
        options = self.session.options
        waiting: deque[tuple[int, np.ndarray, EchoState]] = deque()  # read, not yet stepped
        step: futures.Future | None = None  # stepping `stepped`
        while not self._stopping.is_set():
            problem = self.link.problem()
            if problem and not self._stopping.is_set():
                kept = " (the recording so far is saved)" if self.recorder else ""
                self.signals.failed.emit(f"{problem} The conversation has stopped{kept}; "
                                         "start again when the device is back.")
                return
            frame = self.link.read_frame() if len(waiting) < self._read_ahead else None
            if frame is not None:
                if self._muted:
                    frame = np.zeros_like(frame)
                echo_state = self.link.echo_state()
                # Until the canceller has learned the room, the model's own voice could interrupt it.
                self._heard.append((index, _dbfs(frame), echo_state.state != "converging"))
                waiting.append((index, frame, echo_state))
                index += 1
            if step is None and waiting:
                stepped = waiting.popleft()
                step = steps.submit(self.session.step, stepped[1])
            self._record_played(stepping=step is not None)
            if step is None:
                if frame is None:
                    self._stopping.wait(IDLE_WAIT_S)
                continue
            futures.wait([step], timeout=0 if frame is not None else IDLE_WAIT_S)
            if step.done():
                options = self._stepped(*stepped, step.result(), options)
                step = None

    def _stepped(self, index: int, frame: np.ndarray, echo_state: EchoState, out, options):
        """A step's output to the speaker, the recording and the window; returns the options in use."""
        if self._interrupt_due is not None:  # heard during the step: its speech is not played
            self._interrupt(self._interrupt_due)
            self._interrupt_due = None
            out = dataclasses.replace(out, pcm=np.zeros_like(out.pcm), text="")
        heard = self._write(index, out)
        if self.recorder is not None:
            notes = []
            if self.session.options is not options:  # applied with this frame
                options = self.session.options
                notes.append((self.recorder.note_options, dataclasses.asdict(options)))
            echo, self._echo_changed = self._echo_changed, None
            if echo is not None:
                notes.append((self.recorder.note_audio_processing, dataclasses.asdict(echo)))
            self._unrecorded.append((frame, "".join(text for _, text in heard), notes))
        self._record_played()
        self.signals.frame.emit(FrameReport(index, out, _dbfs(frame), self.link.counters(),
                                            self.link.output_level_dbfs(), echo_state, heard))
        return options

    def _write(self, index: int, out) -> tuple[tuple[int, str], ...]:
        """The frame's audio to the speaker; returns the words the speaker has begun to play since the
        last frame (with a file for microphone, nothing plays: the frame's own words)."""
        before = self.link.speech_positions()
        skipped_s = self.link.write_frame(out.pcm)
        self._count_skipped(index, skipped_s)
        if before is None:
            return ((index, out.text),) if out.text else ()
        if not skipped_s:  # a skipped frame's words were never said
            self._spoken.add(index, before[0], out.text)
        _, gone, cut = self.link.speech_positions()
        return tuple(self._spoken.heard(gone, cut))

    def _interrupt(self, index: int) -> None:
        """The person spoke over the model at frame `index` (the speaker was cut then): its family
        stops it and the speech the session queued is dropped, with its words."""
        dropped_s = self.session.interrupt()
        log.info("interrupted at frame %d (%.2f s of queued speech dropped)", index, dropped_s)
        if self.recorder is not None:
            self.recorder.note_interruption(index, dropped_s)

    def _record_played(self, final: bool = False, stepping: bool = False) -> None:
        """Each frame is recorded once it is stepped and the speaker has played what goes beside it.
        Barge-in is decided as frames are played: the person's level in a microphone frame against what
        the speaker played as it was captured. Not against the frames queued for the speaker: after a
        once-a-second model's step the engine catches up on the microphone's waiting frames faster than
        they play, and would count a fifth of a second of overlap before a sample of the reply was heard.
        The speaker is cut at once, `stepping` or not; the session hears of it between steps."""
        for played in self.link.played_frames(final):  # taken without a recorder too: not kept
            index, person_dbfs, may_interrupt = self._heard.popleft()
            if (self._barge_in is not None and may_interrupt and self.link.plays and not final
                    and self._barge_in.hears(person_dbfs, _dbfs(played))):
                # The speaker drops what it queued, and with it the words waiting for that speech
                # to play (SpokenWords): no transcript keeps a word the person did not hear begin.
                self.link.cut_speaker()
                if stepping:
                    self._interrupt_due = index
                else:
                    self._interrupt(index)
            if self.recorder is not None:
                self._played.append(played)
        while self._played and self._unrecorded:
            frame, text, notes = self._unrecorded.popleft()
            for note, value in notes:
                note(value)
            self.recorder.add_frame(frame, self._played.popleft(), text)

    def _count_skipped(self, index: int, skipped_s: float) -> None:
        """Speech the speaker never played: marked in the recording, told in the window."""
        if skipped_s:
            self._skipped_s += skipped_s
            if self.recorder is not None:
                self.recorder.note_speaker_skip(index, skipped_s, self.link.counters().output_backlog_s)
        if index - self._skip_told_at >= SKIP_TOLD_EVERY or not skipped_s:
            self._tell_skipped(index)

    def _tell_skipped(self, index: int) -> None:
        """The window's warning, with the whole figure so far (what the recording notes)."""
        if self._skipped_s > self._skipped_told_s:
            self._skipped_told_s, self._skip_told_at = self._skipped_s, index
            marked = " The recording marks where." if self.recorder is not None else ""
            self.signals.warning.emit(
                f"The speaker fell more than {self.link.config.max_output_backlog_s:g} s behind the model "
                f"(the computer could not keep up for a while): {self._skipped_s:.2f} s of the model's "
                f"speech was skipped, not played.{marked}")

    def _reset_session(self) -> bool:
        """A fresh conversation; a model with a voice or role prompt replays them first. False
        when they are refused (too long, an unreadable voice prompt): the window says why."""
        if self.persona is None:
            self.session.reset()
            return True
        from engine import Persona

        from .prompt_progress import PromptProgress, window_prompt_text
        persona = Persona(*self.persona)
        try:
            self.session.check_persona(persona)
        except ValueError as exc:
            log.warning("prompts refused: %s", exc)
            self.signals.failed.emit(f"The conversation did not start: {exc}")
            return False
        self.signals.notice.emit("Playing the voice and role prompts to the model…")
        progress = PromptProgress(lambda done, total: self.signals.notice.emit(window_prompt_text(done, total)))
        self.session.reset(persona, cancelled=self._stopping.is_set, progress=progress)
        return True


def _dbfs(frame: np.ndarray) -> float:
    rms = math.sqrt(float(np.dot(frame, frame)) / len(frame))
    return 20 * math.log10(max(rms, 1e-6))
