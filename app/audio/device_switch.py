"""A running conversation's devices, changed while it goes on: the device the window asks for
(a choice in Audio, the microphone unplugged or back), a microphone that stalls or will not
open, and what the user is told of each (in the window and the log). The engine thread
applies all of it, between frames: streams open in milliseconds, and that thread is the one
that reads the rings the streams fill."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np

from . import audio_devices
from .audio_devices import AudioDevice
from .device_streams import AudioDeviceError, Silence
from .played_track import MicPositions
from .ring_buffer import SpscRing

log = logging.getLogger("duplexcadence.audio")
RETRY_S = 2.0  # a microphone that would not open is tried again this often
KINDS = ("input", "output")

Notify = Callable[[str, str], None]
"""(text, kind): kind "warning" (something failed: what, and what to do), "info" (it is
fixed) or "status" (a change the user made, done)."""


class DeviceSwitch:
    """For one AudioLink. `use` from any thread; `apply` from the engine thread."""

    def __init__(self, link, notify: Notify | None = None):
        self._link = link
        self._notify = notify
        self._wanted: dict[str, AudioDevice | None] = {}  # set by the GUI thread, taken here
        self._retry: AudioDevice | None = None  # a microphone that would not open
        self._retry_at = 0.0
        self._trouble = False  # the microphone failed and the user was told: its return is news

    def use(self, kind: str, device: AudioDevice | None) -> None:
        """The device the conversation should use from now on; for the microphone, None
        while the chosen one is unplugged (the model hears silence)."""
        self._wanted[kind] = device

    def apply(self, now: float) -> None:
        for kind in KINDS:
            if kind in self._wanted:
                device = self._wanted.pop(kind)
                if kind == "input":
                    self._trouble = False  # a new choice starts afresh
                    self._microphone(device, chosen=True)
                elif device is not None:
                    self._speaker(device)
        self._watch_microphone(now)

    def _watch_microphone(self, now: float) -> None:
        link = self._link
        problem = link.microphone_problem(now)
        if problem is not None:
            self._tell(f"{problem} The conversation goes on, the model hearing silence, while the app "
                       "opens it again; if it stays silent, check it or pick another microphone in Audio.",
                       "warning", trouble=True)
            self._microphone(link.microphone, chosen=False)
        elif self._retry is not None and now >= self._retry_at:
            self._microphone(self._retry, chosen=False)
        elif self._trouble and link.microphone_heard():
            self._trouble = False
            self._tell(f"The microphone “{link.microphone.name}” works again.", "info")

    def _microphone(self, device: AudioDevice | None, chosen: bool) -> None:
        link = self._link
        self._retry = None
        if device is not None and audio_devices.hears_itself(device, link.speaker):
            self._tell(audio_devices.hears_itself_text(device, link.speaker), "warning")
            return  # the microphone stays as it was
        try:
            link.reopen_microphone(device)
        except AudioDeviceError as exc:
            self._retry, self._retry_at = device, time.monotonic() + RETRY_S
            self._tell(f"{exc}. The conversation goes on, the model hearing silence; the app tries "
                       f"again every {RETRY_S:.0f} s. Pick another microphone in Audio if it does not come back.",
                       "warning", trouble=True)
            return
        if chosen and device is not None:
            self._tell(f"Listening through “{device.name}”.", "status")

    def _speaker(self, device: AudioDevice) -> None:
        link = self._link
        if link.microphone is not None and audio_devices.hears_itself(link.microphone, device):
            self._tell(audio_devices.hears_itself_text(link.microphone, device), "warning")
            return
        old = link.speaker
        try:
            link.reopen_speaker(device)
        except AudioDeviceError as exc:
            try:
                link.reopen_speaker(old)
            except AudioDeviceError as again:
                link.fail(f"{exc}; and the speaker it played on before failed too: {again}.")
                return
            self._tell(f"{exc}. The model's voice still plays through “{old.name}”; pick another "
                       "speaker in Audio.", "warning")
            return
        self._tell(f"The model's voice plays through “{device.name}”.", "status")

    def _tell(self, text: str, kind: str, trouble: bool = False) -> None:
        if trouble:
            if self._trouble:
                return  # told once per failure, until it is fixed or the user picks another
            self._trouble = True
        log.log(logging.WARNING if kind == "warning" else logging.INFO, "%s", text)
        if self._notify is not None:
            self._notify(text, kind)


class LinkDevices:
    """AudioLink's side of it: one stream closed and opened again while the other, the rings
    and the engine thread go on (a mixin: it works on the link's own state)."""

    def use_device(self, kind: str, device: AudioDevice | None) -> None:
        """From any thread: the device to use from now on (`kind` "input" or "output"); for
        the microphone, None while the chosen one is unplugged."""
        self._switch.use(kind, device)

    @property
    def microphone(self) -> AudioDevice | None:
        return self._mic_stream.device if self._mic_stream.is_open else None

    @property
    def speaker(self) -> AudioDevice | None:
        return self._speaker_stream.device

    def microphone_problem(self, now: float) -> str | None:
        return self._mic_stream.problem(now)

    def microphone_heard(self) -> bool:
        return self._mic_stream.is_open and self._mic_stream.watch.calls > 0

    def reopen_microphone(self, device: AudioDevice | None) -> None:
        """Close the microphone and open `device` (None: none). The model hears silence until
        the new stream's first samples come; from those on, its audio."""
        self._mic_stream.close()
        self._in_ring.read_into(self._in_scratch)  # the old stream's last samples
        self._in_first_t = None
        # The silence's frames are placed on PortAudio's clock, as a microphone's would be.
        self._start_timeline(self._speaker_stream.now(), Silence())
        try:
            if device is not None:
                self._open_microphone(device)
        finally:
            self._describe()

    def _restart_microphone(self) -> None:
        self._start_timeline(self._in_first_t, None)

    def _start_timeline(self, t0: float | None, silence: Silence | None) -> None:
        """The microphone's path starts over at PortAudio time `t0`: the audio not yet framed,
        its positions, and the echo canceller (for a new room)."""
        self._pending = np.zeros(0, dtype=np.float32)
        self._mic_positions = MicPositions()
        self._in_read = 0
        self._in_lost_seen = self._in_lost_base = self._in_lost
        self._mic_t0, self._silence = t0, silence
        self._echo_reset = True

    def _open_microphone(self, device: AudioDevice) -> None:
        if device.sample_rate != self._in_rate:  # no stream fills the ring now: replace it
            self._in_rate = device.sample_rate
            self._in_ring = SpscRing(int(self._in_rate * self.config.input_capacity_s))
            self._in_scratch = np.zeros(self._in_ring.capacity, dtype=np.float32)
        self._mic_stream.open(device, self._in_rate)
        if not self._closed:
            self._mic_stream.start()

    def reopen_speaker(self, device: AudioDevice) -> None:
        """Close the speaker and open `device` at the queue's rate; what was queued plays on
        there. The echo canceller starts over: its path from speaker to microphone is another
        one, and adapting the old estimate to it suppressed the user's voice for up to a
        second (far longer than a new canceller takes to converge)."""
        self._speaker_stream.close()
        self._speaker_fresh = True
        self._echo_reset = True
        self._speaker_stream.open(device, self._out_rate)
        if not self._closed:
            self._speaker_stream.start()
        self._describe()

    def fail(self, message: str) -> None:
        """The conversation cannot go on: `problem()` says so from now on."""
        self._fatal = message

    def _describe(self) -> None:
        microphone = self.microphone.name if self.microphone else "(no microphone)"
        self.description = f"{microphone} → engine → {self.speaker.name}"
