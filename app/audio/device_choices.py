"""Which device each of the Audio box's lists selects, and what a change means while a
conversation runs through them: the device in use unplugged (the microphone then gives the
model silence; the sound server moves the speaker to its default), back again (the
conversation takes it up again), or another one picked (the conversation moves to it). No
widgets here: the picker shows and emits what this decides."""
from __future__ import annotations

import logging

from ..app_settings import AppSettings
from . import audio_devices
from .audio_devices import AudioDevice

log = logging.getLogger("duplexcadence")
WHAT = {"input": "microphone", "output": "speaker"}
LOST = {
    "input": ("The microphone “{name}” was unplugged. The conversation goes on, the model hearing "
              "silence: plug it back in (it is taken up again by itself) or pick another microphone in Audio."),
    "output": ("The speaker “{name}” was unplugged. The conversation goes on through the system default "
               "speaker: plug it back in (it is taken up again by itself) or pick another speaker in Audio."),
}
BACK = "The {what} “{name}” is back: the conversation uses it again."


class DeviceChoices:
    """`events` collects what the picker is to emit, in order: ("notice", text) for a missing
    remembered device, ("lost", text), ("back", text), and ("use", (kind, device or None)) for
    the conversation to move to."""

    def __init__(self, settings: AppSettings):
        self.settings = settings
        self.following = False  # a conversation runs through the selected devices
        self.in_use: dict[str, AudioDevice | None] = {}
        self.lost: dict[str, AudioDevice] = {}  # the device in use, while it is unplugged
        self.told: set[str] = set()  # keys of missing devices the user was told about
        self.events: list[tuple[str, object]] = []

    def follow(self, in_use: dict[str, AudioDevice | None] | None) -> None:
        """A conversation starts with these devices (None: it ended, or runs from a file)."""
        self.following = in_use is not None
        self.in_use = dict(in_use or {})
        self.lost = {}

    def choose(self, kind: str, devices: list[AudioDevice]) -> int:
        """The item to select: during a conversation the device in use (or, while it is
        unplugged, the item `lost` adds after the list), else the remembered one; the system
        default when that is gone (saying so once)."""
        default = next((i for i, d in enumerate(devices) if d.is_default), 0)
        if self.following:
            return self._follow_list(kind, devices, default)
        key = self.settings.device_key(kind)
        found = find(devices, key)
        if found is not None:
            self.told.discard(key)  # back: a later absence is news again
            return found
        if key and key not in self.told and _same_family(devices, key):
            self.told.add(key)
            label = self.settings.device_label(kind) or key
            self.events.append(("notice", f"The {WHAT[kind]} “{label}” is not connected: using the system "
                                          "default until it is back."))
        return default

    def _follow_list(self, kind: str, devices: list[AudioDevice], default: int) -> int:
        in_use = self.in_use.get(kind)
        found = None if in_use is None else find(devices, in_use.key)
        # A list that no longer comes from the server means the server went away (and the
        # streams with it, which the conversation reports): no unplugging.
        if in_use is not None and in_use.server_name is not None and audio_devices.server_listed(devices):
            if found is None and kind not in self.lost:
                self.lost[kind] = in_use
                self.told.add(in_use.key)  # (no "not connected" notice for it after this)
                self._tell("lost", LOST[kind].format(name=in_use.name), logging.WARNING)
                if kind == "input":  # never what the server moved it to: our speaker's monitor, say
                    self.events.append(("use", (kind, None)))
            elif found is not None and kind in self.lost:
                del self.lost[kind]
                self.in_use[kind] = devices[found]
                self.events.append(("use", (kind, devices[found])))
                self._tell("back", BACK.format(what=WHAT[kind], name=in_use.name), logging.INFO)
        if found is not None:
            return found
        return len(devices) if kind in self.lost else default

    def chosen(self, kind: str, device: AudioDevice | None) -> None:
        """The user picked `device` in a list: remembered, and the conversation moves to it."""
        if device is None or (kind in self.lost and device == self.lost[kind]):
            return  # nothing, or the unplugged one's own item
        self.settings.set_device_key(kind, device.key)
        self.settings.set_device_label(kind, device.name)
        in_use = self.in_use.get(kind)
        if self.following and (kind in self.lost or in_use is None or in_use.key != device.key):
            self.lost.pop(kind, None)
            self.in_use[kind] = device
            self.events.append(("use", (kind, device)))

    def take_events(self) -> list[tuple[str, object]]:
        events, self.events = self.events, []
        return events

    def _tell(self, what: str, text: str, level: int) -> None:
        log.log(level, "%s", text)
        self.events.append((what, text))


def find(devices: list[AudioDevice], key: str) -> int | None:
    return next((i for i, d in enumerate(devices) if d.key == key), None)


def _same_family(devices: list[AudioDevice], key: str) -> bool:
    """Whether `key` names a device of the kind listed now (a sound server's, or a PortAudio
    host API's): only then is its absence news. One remembered before the app listed the
    server's devices ("ALSA: default"), or Windows' MME before WASAPI was preferred, just
    is not comparable."""
    family = key.split(": ", 1)[0]
    return any(d.key.split(": ", 1)[0] == family for d in devices)


def item_text(device: AudioDevice, devices: list[AudioDevice]) -> str:
    """The device's name; its server name or host API beside it where two share a name (two
    "Null Output" sinks, the same card under two host APIs)."""
    text = device.name
    if sum(d.name == device.name for d in devices) > 1:
        text += f" — {device.server_name or device.host_api}"
    return text + (" (system default)" if device.is_default else "")


def lost_text(device: AudioDevice) -> str:
    """The item an unplugged device in use keeps in its list."""
    return f"{device.name} (unplugged)"
