"""A private PulseAudio server with a virtual microphone and a virtual speaker, so tests and the live bench
can run real PortAudio streams on machines without sound hardware (CI runs as root: pulseaudio then only
warns, and `--use-pid-file=no` keeps it off any system instance's files). Two null sinks: what is played
into `dc_mic` comes out of its monitor, the default source (the app's microphone); the default sink is
`dc_speaker`, whose monitor a test records. ALSA's default PCM goes to this server (libasound2-plugins),
and PortAudio sees it as its ALSA "default" device. An idle null sink sleeps on a timer of up to two
seconds, and a stream opened then waits for it to wake: a silent low-latency stream kept playing into each
sink keeps it awake. Where these packages are missing (the GPU machines), `bundle` is the folder
packaging/gpu_audio.sh makes of them: its tools run from there, the server loads its modules and ALSA its
configuration and pulse plugin from there (its libraries are on the loader's path)."""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1  # linux/prctl.h
SINK_RATE = 48000
MIC_SINK = "dc_mic"
SPEAKER_SINK = "dc_speaker"
ASOUNDRC = "pcm.!default { type pulse }\nctl.!default { type pulse }\n"
TOOLS = ("pulseaudio", "pactl", "paplay", "parecord", "pacat")


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


class VirtualAudio:
    def __init__(self, root: Path, bundle: Path | None = None):
        self.root, self.bundle = Path(root), bundle and Path(bundle).resolve()
        self.runtime = self.root / "runtime"
        self.socket = self.runtime / "pulse.sock"
        self.log = self.root / "pulseaudio.log"
        self.server: subprocess.Popen | None = None
        self._keepers: list[subprocess.Popen] = []
        self._saved_env: dict[str, str | None] = {}

    @property
    def env(self) -> dict[str, str]:
        """Environment for the server and its command-line clients."""
        env = {**os.environ, "HOME": str(self.root), "XDG_RUNTIME_DIR": str(self.runtime),
               "PULSE_SERVER": f"unix:{self.socket}"}
        if self.bundle is not None:
            env["PATH"] = f"{self.bundle / 'bin'}:{env.get('PATH', '')}"
        return env

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        self.runtime.mkdir(parents=True, exist_ok=True)
        self.runtime.chmod(0o700)
        asoundrc = self.root / "asoundrc"
        asoundrc.write_text(ASOUNDRC + self._plugins())
        alsa = self.bundle / "share" / "alsa" if self.bundle is not None else Path("/usr/share/alsa")
        modules = [f"--dl-search-path={self.bundle / 'lib' / 'pulse-modules'}"] if self.bundle is not None else []
        command = [
            "pulseaudio", *modules, "-n", "--daemonize=no", "--system=no", "--use-pid-file=no",
            "--exit-idle-time=-1", "--disable-shm=yes", f"--log-target=file:{self.log}",
            # Near-transparent rate conversion, so tests can compare what was played with
            # what was heard sample by sample.
            "--resample-method=soxr-vhq",
            "-L", f"module-null-sink sink_name={MIC_SINK} rate={SINK_RATE} channels=1",
            "-L", f"module-null-sink sink_name={SPEAKER_SINK} rate={SINK_RATE} channels=1",
            "-L", f"module-native-protocol-unix socket={self.socket} auth-anonymous=1",
        ]
        self.server = subprocess.Popen(command, env=self.env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        self._wait_ready()
        self.pactl("set-default-sink", SPEAKER_SINK)
        self.pactl("set-default-source", f"{MIC_SINK}.monitor")
        self._keepers = [self._play_silence(sink) for sink in (MIC_SINK, SPEAKER_SINK)]
        time.sleep(2.5)  # the sinks' current idle sleep ends; from now on they run at 20 ms
        self._set_env({"PULSE_SERVER": f"unix:{self.socket}", "ALSA_CONFIG_DIR": str(alsa),
                       "ALSA_CONFIG_PATH": f"{alsa / 'alsa.conf'}:{asoundrc}"})
        _rescan_portaudio()

    def _plugins(self) -> str:
        """Where ALSA finds its pulse plugin when it is not in the system's plugin folder."""
        if self.bundle is None:
            return ""
        lib = self.bundle / "lib" / "alsa-lib"
        return "".join(f'{kind}_type.pulse {{ lib "{lib}/libasound_module_{kind}_pulse.so" }}\n'
                       for kind in ("pcm", "ctl"))

    def _wait_ready(self, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                raise RuntimeError(f"pulseaudio exited with {self.server.returncode}: "
                                   f"{self._log_tail()}")
            probe = subprocess.run(["pactl", "info"], env=self.env, capture_output=True)
            if probe.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"pulseaudio did not answer within {timeout_s} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        return self.log.read_text()[-2000:] if self.log.exists() else "(no log)"

    def _play_silence(self, sink: str) -> subprocess.Popen:
        with open("/dev/zero", "rb") as zeros:  # the child keeps its own copy of the handle
            return subprocess.Popen(
                ["pacat", "--playback", f"--device={sink}", "--latency-msec=20", "--raw",
                 "--format=s16le", f"--rate={SINK_RATE}", "--channels=1"], stdin=zeros,
                env=self.env, preexec_fn=_die_with_parent)

    def pactl(self, *args: str) -> str:
        done = subprocess.run(["pactl", *args], env=self.env, capture_output=True, text=True,
                              check=True)
        return done.stdout

    def add_sink(self, name: str, description: str, rate: int = SINK_RATE) -> str:
        """Plug in a speaker (a null sink, and with it a "Monitor of" source); returns the
        module id that `unload` takes."""
        return self.pactl("load-module", "module-null-sink", f"sink_name={name}", f"rate={rate}",
                          "channels=1", f"sink_properties='device.description=\"{description}\"'").strip()

    def add_source(self, name: str, description: str, rate: int = SINK_RATE) -> str:
        """Plug in a microphone (a null source: silence); returns the module id."""
        return self.pactl("load-module", "module-null-source", f"source_name={name}", f"rate={rate}",
                          "channels=1", f"description=\"{description}\"").strip()

    def unload(self, module_id: str) -> None:
        """Unplug what `add_sink` / `add_source` plugged in (or stop a loop)."""
        self.pactl("unload-module", module_id)

    def stream_devices(self, kind: str) -> list[str]:
        """The sinks (`kind="sink"`) or sources (`"source"`) that clients' streams are on,
        by name: what `pactl list short sink-inputs` / `source-outputs` shows, by index."""
        names = {line.split("\t")[0]: line.split("\t")[1]
                 for line in self.pactl("list", "short", f"{kind}s").splitlines()}
        streams = self.pactl("list", "short", "sink-inputs" if kind == "sink" else "source-outputs")
        return [names.get(line.split("\t")[1], "?") for line in streams.splitlines()]

    def loop_speaker_into_microphone(self, delay_ms: int, volume: str) -> str:
        """What the speaker plays reaches the microphone `delay_ms` later at `volume` (a
        PulseAudio volume, "60%": about -13 dB), as a laptop's loudspeakers reach its
        microphone; returns the module id that `unload` takes."""
        module = self.pactl("load-module", "module-loopback", f"source={SPEAKER_SINK}.monitor",
                            f"sink={MIC_SINK}", f"latency_msec={delay_ms}").strip()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            inputs = [line.split("\t") for line in self.pactl("list", "short", "sink-inputs").splitlines()]
            loops = [fields[0] for fields in inputs if "loopback" in fields[3]]
            if loops:
                self.pactl("set-sink-input-volume", loops[0], volume)
                return module
            time.sleep(0.1)
        self.unload(module)
        raise RuntimeError("the loopback's stream did not appear")

    def play_into_microphone(self, wav: Path) -> subprocess.Popen:
        """Play a file into the virtual microphone (real-time paced)."""
        return subprocess.Popen(["paplay", f"--device={MIC_SINK}", str(wav)], env=self.env)

    def record_speaker(self, wav: Path) -> subprocess.Popen:
        """Record what reaches the virtual speaker, at the sink's own rate (no conversion
        on the way out), until the process is terminated."""
        return subprocess.Popen(["parecord", f"--device={SPEAKER_SINK}.monitor",
                                 "--file-format=wav", "--channels=1", f"--rate={SINK_RATE}",
                                 str(wav)], env=self.env)

    def suspend_speaker(self) -> None:
        """The speaker stops taking audio: its stream's callbacks stop coming."""
        self.pactl("suspend-sink", SPEAKER_SINK, "1")

    def stop(self) -> None:
        for keeper in self._keepers:
            keeper.terminate()
            keeper.wait()
        self._keepers = []
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        self.server = None
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()
        _rescan_portaudio()

    def _set_env(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value


def _die_with_parent() -> None:
    """In the child: a killed test run must not leave a sound server behind."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _rescan_portaudio() -> None:
    """PortAudio (and ALSA's configuration) are read at initialisation: re-read them."""
    import sounddevice as sd
    sd._terminate()
    sd._initialize()


def check(bundle: Path | None) -> float:
    """`python3 -m bench.virtual_audio [BUNDLE]`, seconds before a long run on a new machine: the server
    starts, PortAudio opens its default microphone, and noise played into the virtual microphone reaches
    it. Returns its level (RMS)."""
    import tempfile

    import numpy as np
    import sounddevice as sd
    import soundfile as sf

    with tempfile.TemporaryDirectory() as tmp:
        audio = VirtualAudio(Path(tmp), bundle)
        audio.start()
        try:
            noise = Path(tmp) / "noise.wav"
            sf.write(noise, 0.3 * np.random.default_rng(0).standard_normal(3 * SINK_RATE), SINK_RATE)
            player = audio.play_into_microphone(noise)
            heard = sd.rec(SINK_RATE, samplerate=SINK_RATE, channels=1, blocking=True)
            player.terminate()
            player.wait()
        finally:
            audio.stop()
    return float(np.sqrt(np.mean(np.square(heard))))


if __name__ == "__main__":
    import sys

    level = check(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    print(f"virtual audio: the microphone heard noise at RMS {level:.3f}", flush=True)
    sys.exit(0 if level > 0.05 else 1)
