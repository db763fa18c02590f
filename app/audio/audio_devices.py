"""The audio devices a person has, as the pickers offer them, and how a stream gets to one.

Linux: when a sound server (PulseAudio, or PipeWire's pulse server) is reachable, its
sources and sinks, by their descriptions. All of them are opened through PortAudio's ALSA
`pulse` device; `opening()` tells libpulse which one a stream is for (PULSE_SOURCE /
PULSE_SINK, read when the ALSA plugin connects). The server's list is asked afresh each
time, so it follows plugging with no PortAudio re-initialisation.

Elsewhere (no server, Windows, macOS): PortAudio's own devices. PortAudio scans them once,
at initialisation; `rescan()` re-initialises it so that devices plugged in since show up.
Never rescan while streams are open: re-initialising PortAudio closes them.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from . import sound_server

try:
    import sounddevice as sd
    PORTAUDIO_MISSING = None
except OSError as exc:  # the PortAudio shared library is not installed
    sd = None
    PORTAUDIO_MISSING = f"PortAudio is not available ({exc})"

SERVER_API = "PulseAudio"
PULSE_PORTAUDIO_NAME = "pulse"  # the ALSA plugin device that talks to the sound server
SERVER_RATE = 48000
"""The rate a server device's streams open at. The ALSA plugin takes any rate and libpulse
converts to the device's (PortAudio's 44.1 kHz for it is only the plugin's default): 48 kHz
is PipeWire's own rate and PulseAudio's alternate one, to which an idle sink switches for a
48 kHz stream, so the audio usually reaches the card unconverted; it is the echo canceller's
rate (no resampling before or after it) and twice the engine's."""
# Each platform's modern host API. Windows also offers every device through MME, DirectSound
# and WDM-KS: the same device up to four times, under truncated names. WASAPI has full names
# and the lowest shared-mode latency.
PREFERRED_HOST_API = {"win32": "Windows WASAPI", "darwin": "Core Audio"}
# The environment variable libpulse takes a stream's device from, per kind.
ROUTE_VARIABLE = {"input": "PULSE_SOURCE", "output": "PULSE_SINK"}

_opening_lock = threading.Lock()  # one stream at a time sets the process-wide variables


@dataclass(frozen=True)
class AudioDevice:
    index: int             # PortAudio's device index (for a server device: its `pulse` device)
    name: str              # what people see
    host_api: str
    sample_rate: int
    is_default: bool
    server_name: str | None = None  # the sound server's name for it; None: a plain PortAudio device
    kind: str = "input"    # the list it came from, "input" or "output": how `opening()` routes it

    @property
    def key(self) -> str:
        """What settings remember: indices change when devices come and go, names do not."""
        if self.server_name is not None:
            return f"{SERVER_API}: {self.server_name}"
        return f"{self.host_api}: {self.name}"


def hears_itself(microphone: AudioDevice | None, speaker: AudioDevice | None) -> bool:
    """Whether the microphone is the monitor of the speaker's sink (PulseAudio names a sink's
    monitor after it): the model would hear its own voice."""
    return (microphone is not None and speaker is not None and speaker.server_name is not None
            and microphone.server_name == f"{speaker.server_name}.monitor")


def hears_itself_text(microphone: AudioDevice, speaker: AudioDevice) -> str:
    return (f"The microphone “{microphone.name}” records what the speaker “{speaker.name}” plays: the "
            "model would hear itself. Pick a real microphone, or another speaker, in Audio.")


def rescan() -> None:
    if sd is None:
        return
    sd._terminate()
    sd._initialize()


def list_devices(kind: str) -> list[AudioDevice]:
    """Devices that can record (`kind="input"`) or play (`kind="output"`), the system
    default first."""
    if sd is None:
        return []
    pulse = _pulse_device()
    if pulse is not None:
        server_devices = sound_server.list_devices(kind)
        if server_devices:
            return [AudioDevice(index=pulse["index"], name=d.description, host_api=SERVER_API, sample_rate=SERVER_RATE,
                                is_default=d.is_default, server_name=d.name, kind=kind)
                    for d in server_devices]
    return _portaudio_devices(kind)


def server_listed(devices: list[AudioDevice]) -> bool:
    """Whether a list came from the sound server (so it follows plugging by itself)."""
    return any(d.server_name is not None for d in devices)


def _pulse_device() -> dict | None:
    """PortAudio's `pulse` device, if it has one (libasound2-plugins installed, and the
    server was up when PortAudio scanned)."""
    if not sys.platform.startswith("linux"):
        return None
    return next((info for info in sd.query_devices() if info["name"] == PULSE_PORTAUDIO_NAME), None)


def _portaudio_devices(kind: str) -> list[AudioDevice]:
    channels_key = "max_input_channels" if kind == "input" else "max_output_channels"
    host_apis = sd.query_hostapis()
    infos = [info for info in sd.query_devices() if info[channels_key] > 0]
    default = _default_index(kind)
    preferred = [i for i, api in enumerate(host_apis) if api["name"] == PREFERRED_HOST_API.get(sys.platform)]
    if preferred and any(info["hostapi"] == preferred[0] for info in infos):
        infos = [info for info in infos if info["hostapi"] == preferred[0]]
        # The overall default is MME's on Windows; the preferred API has its own.
        default = host_apis[preferred[0]][f"default_{kind}_device"]
    devices = [
        AudioDevice(index=info["index"], name=info["name"], host_api=host_apis[info["hostapi"]]["name"],
                    sample_rate=int(info["default_samplerate"]), is_default=info["index"] == default, kind=kind)
        for info in infos
    ]
    return sorted(devices, key=lambda d: not d.is_default)


def _default_index(kind: str) -> int:
    try:
        return sd.query_devices(kind=kind)["index"]
    except sd.PortAudioError:  # no default device of this kind
        return -1


@contextlib.contextmanager
def opening(device: AudioDevice) -> Iterator[None]:
    """Around opening a stream on `device`: routes it where the device says. A server device
    sets PULSE_SOURCE or PULSE_SINK while the stream opens (the ALSA plugin connects to the
    server then, and libpulse reads them at that moment); the previous value comes back
    after. Plain PortAudio devices need nothing."""
    if device.server_name is None:
        yield
        return
    variable = ROUTE_VARIABLE[device.kind]
    with _opening_lock:
        previous = os.environ.get(variable)
        os.environ[variable] = device.server_name
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = previous
