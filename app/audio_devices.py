"""The machine's audio devices as PortAudio (through sounddevice) sees them.

PortAudio scans devices once, when it is initialised; `rescan()` re-initialises it so
that devices plugged in (or a sound server started) since then show up. Never rescan
while streams are open: re-initialising PortAudio closes them.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

try:
    import sounddevice as sd
    PORTAUDIO_MISSING = None
except OSError as exc:  # the PortAudio shared library is not installed
    sd = None
    PORTAUDIO_MISSING = f"PortAudio is not available ({exc})"


@dataclass(frozen=True)
class AudioDevice:
    index: int
    name: str
    host_api: str
    sample_rate: int
    is_default: bool

    @property
    def key(self) -> str:
        """What settings remember: indices change when devices come and go, names do not."""
        return f"{self.host_api}: {self.name}"


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
    channels_key = "max_input_channels" if kind == "input" else "max_output_channels"
    default = _default_index(kind)
    host_apis = [api["name"] for api in sd.query_hostapis()]
    devices = [
        AudioDevice(index=info["index"], name=info["name"], host_api=host_apis[info["hostapi"]],
                    sample_rate=int(info["default_samplerate"]), is_default=info["index"] == default)
        for info in sd.query_devices() if info[channels_key] > 0
    ]
    return sorted(devices, key=lambda d: not d.is_default)


def _default_index(kind: str) -> int:
    try:
        return sd.query_devices(kind=kind)["index"]
    except sd.PortAudioError:  # no default device of this kind
        return -1


@contextlib.contextmanager
def opening(device: AudioDevice) -> Iterator[None]:
    """Around opening a stream on `device`: routes it where the device says."""
    yield
