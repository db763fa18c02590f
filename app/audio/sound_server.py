"""The sound server's devices (PulseAudio, or PipeWire's pulse server), through pulsectl.

On a Linux desktop the sound server owns the sound cards: PortAudio's ALSA list then shows plugin
names ("default", "pulse"), not the headset a person plugged in. The server knows each source and
sink by a stable name and a description people recognise, and tells its clients when one comes or
goes, so the app can follow plugging without a restart. Every call here makes its own short
connection: a pulsectl connection must only be used by one thread, and listing is rare (start-up,
and after a device event). The watch also keeps the model from hearing itself: a server moves a
stream whose device went away to its default, and with no other microphone left the default source
is the monitor of the default sink, the one our speaker plays to. Our capture stream found on a
monitor of a sink our playback is on is muted there at once, until the window reopens the microphone
where the user wants it or the loop is gone.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("duplexcadence")

pulsectl = None
if sys.platform not in ("win32", "darwin"):  # Windows and macOS have no PulseAudio to ask
    with contextlib.suppress(ImportError, OSError):  # OSError: pulsectl found no libpulse
        import pulsectl

CLIENT_NAME = "DuplexCadence devices"
# A server that does not answer within this must not freeze the window for longer.
CONNECT_TIMEOUT_S = 1.0
RETRY_S = 2.0  # how often the watch looks for a server that went away (or was never there)


@dataclass(frozen=True)
class ServerDevice:
    name: str           # the server's name for it: stable across plugging, what settings keep
    description: str    # what people see ("USB headset", "Monitor of Built-in Audio")
    is_default: bool
    is_monitor: bool    # a sink's monitor: what that sink plays, as a source


if pulsectl is not None:
    class _Pulse(pulsectl.Pulse):
        """pulsectl's connect(timeout=...) sits out the whole timeout even once connected:
        only a failure stops its wait. Stopping it on success too makes the timeout the upper
        bound it is meant to be. (Should pulsectl rename these, connecting is slow again, not
        broken.)"""

        def _pulse_state_cb(self, ctx, userdata):
            super()._pulse_state_cb(ctx, userdata)
            if self.connected:
                self._loop_stop = True


def _connect() -> pulsectl.Pulse:
    # Never autospawn: starting a sound server is the desktop's business, not a device list's.
    pulse = _Pulse(CLIENT_NAME, connect=False)
    try:
        pulse.connect(autospawn=False, timeout=CONNECT_TIMEOUT_S)
    except BaseException:
        pulse.close()
        raise
    return pulse


def guard_self_capture(pulse, muted: set[int], pid: str | None = None) -> None:
    """Mute our process's capture streams that are on the monitor of a sink one of our playback
    streams is on; unmute those muted here once they are not. `muted`: the indices muted here,
    kept by the caller between calls. `pid`: whose streams are ours (this process's)."""
    pid = pid or str(os.getpid())

    def ours(stream) -> bool:
        return stream.proplist.get("application.process.id") == pid

    sinks = {stream.sink for stream in pulse.sink_input_list() if ours(stream)}
    monitors = {source.index: source.description for source in pulse.source_list()
                if source.monitor_of_sink is not None and source.monitor_of_sink in sinks}
    captures = [stream for stream in pulse.source_output_list() if ours(stream)]
    for stream in captures:
        loop = stream.source in monitors
        if loop and not stream.mute:
            pulse.source_output_mute(stream.index, True)
            muted.add(stream.index)
            log.warning("the sound server put our microphone stream on “%s”, what our speaker plays: "
                        "muted it there, so that the model does not hear itself", monitors[stream.source])
        elif not loop and stream.index in muted:
            pulse.source_output_mute(stream.index, False)
            muted.discard(stream.index)
    muted.intersection_update(stream.index for stream in captures)  # ended streams


def list_devices(kind: str) -> list[ServerDevice] | None:
    """The server's sources (`kind="input"`) or sinks (`"output"`): the default first, then
    real devices, then monitors. None when no server is reachable."""
    if pulsectl is None:
        return None
    try:
        with _connect() as pulse:
            info = pulse.server_info()
            entries = pulse.source_list() if kind == "input" else pulse.sink_list()
    except (pulsectl.PulseError, pulsectl.PulseDisconnected, OSError) as exc:
        log.debug("no sound server to list devices from: %s", exc)
        return None
    default = info.default_source_name if kind == "input" else info.default_sink_name
    devices = [
        ServerDevice(name=entry.name, description=entry.description or entry.name, is_default=entry.name == default,
                     is_monitor=kind == "input" and entry.monitor_of_sink_name is not None)
        for entry in entries
    ]
    return sorted(devices, key=lambda d: (not d.is_default, d.is_monitor))


class ServerWatch:
    """Calls `on_change()` from its own daemon thread when a source or sink comes or goes,
    the default changes, or the server itself appears or goes away. `on_change` must be
    quick and thread-safe (emit a queued Qt signal, say)."""

    def __init__(self, on_change: Callable[[], None], retry_s: float = RETRY_S):
        self.on_change = on_change
        self.retry_s = retry_s
        self._stop = threading.Event()
        self._pulse = None  # the connection event_listen runs on, while it does
        self._lock = threading.Lock()  # guards _pulse between the thread and stop()
        self._thread = threading.Thread(target=self._run, name="sound-server-watch", daemon=True)
        self._guard_due = False  # a stream of someone's moved or came: look for our self-capture
        self._muted: set[int] = set()  # our capture streams the guard muted

    @property
    def available(self) -> bool:
        return pulsectl is not None

    def start(self) -> None:
        if self.available:
            self._thread.start()

    def stop(self, wait_s: float = 0.0) -> None:
        """Ends the watch: at once when it is listening, within about a second otherwise.
        `wait_s`: wait that long for its thread to end (callers being torn down need not)."""
        self._stop.set()
        with self._lock:
            if self._pulse is not None:
                self._pulse.event_listen_stop()
        if wait_s and self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(wait_s)

    def _run(self) -> None:
        reachable = None  # unknown: the listing before this watch began may have found a server
        while not self._stop.is_set():
            try:
                pulse = _connect()
            except (pulsectl.PulseError, OSError):
                if reachable is not False:  # (now) gone: the lists fall back to PortAudio's
                    reachable = False
                    self._notify()
                self._stop.wait(self.retry_s)
                continue
            reachable = True
            try:
                self._listen(pulse)
            except Exception:  # whatever broke, the watch goes on (a dead one would go unnoticed)
                log.warning("watching the sound server failed; trying again", exc_info=True)
                self._stop.wait(self.retry_s)
            finally:
                with self._lock:
                    self._pulse = None
                pulse.close()

    def _listen(self, pulse) -> None:
        pulse.event_mask_set("sink", "source", "server", "sink_input", "source_output")
        pulse.event_callback_set(self._on_event)
        with self._lock:
            if self._stop.is_set():
                return
            self._pulse = pulse
        # Once subscribed: a server that just appeared (or came back) may have devices the
        # last listing did not see, and so may one that changed between that and now.
        self._notify()
        self._guard_due = True
        try:
            # A timeout, so that a stop() racing the loop's start (event_listen_stop does
            # nothing before the loop polls) still ends it soon.
            while not self._stop.is_set():
                if self._guard_due:  # on this connection: no new one to wait for
                    self._guard_due = False
                    try:
                        guard_self_capture(pulse, self._muted)
                    except pulsectl.PulseOperationFailed:  # a stream ended as it was looked at
                        self._guard_due = True
                pulse.event_listen(timeout=0.5)
        except pulsectl.PulseDisconnected:
            log.info("the sound server went away; looking for it every %.0f s", self.retry_s)

    def _on_event(self, event) -> None:
        if event.facility in ("sink_input", "source_output"):  # a stream came, moved or went
            self._guard_due = True  # the guard looks, once the loop has stopped
            raise pulsectl.PulseLoopStop
        # Sinks and sources send "change" events all the time (volume, idle, running);
        # only arrivals, departures and server changes (a new default) alter the lists.
        if event.facility == "server" or event.t in ("new", "remove"):
            self._notify()

    def _notify(self) -> None:
        try:
            self.on_change()
        except Exception:  # a broken listener must not end the watch
            log.exception("sound server listener failed")
