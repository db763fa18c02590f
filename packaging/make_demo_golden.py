"""Record what this commit makes on the CPU, for tests/test_same_as_before.py to hold later
commits to: the demo model's tokens and PCM (AR, DiffuPlex LISTEN and SPEAK, int8, int4), a
small token2wav stream's PCM, and the files a user keeps (settings with presets, a recording,
an int4 kept copy), with what this commit reads back from each. One CPU thread throughout.

    python3 packaging/make_demo_golden.py tests/golden/demo_before_families

The folder gets `outputs.safetensors` (input frames, `CASE.tokens` and `CASE.pcm`; its metadata
names the commit and every setting), `settings.ini`, `recordings/`, `demo_int4_copy.safetensors`
and `expected.json`. The int4 copy names the LM file it was made from, so the demo model is
copied to INT4_SOURCE first, a fixed path the test can make again.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FRAMES = 30
SEED = 11
PERSONA = ("DEMO", "Be brief.")
INT4_SOURCE = Path(tempfile.gettempdir()) / "duplexcadence-golden-demo"
"""Where the demo model is copied for its int4 copy: the copy names its source's path."""
TOKEN2WAV_TOKENS = 25 * 3 + 9
SETTINGS = {
    "model_source": "demo", "model_weights": "int8", "speaker_volume": 0.7, "speaker_muted": True,
    "theme": "dark", "record": False, "engine_pane_open": True,
    "sampling": {"text_temperature": 0.5, "text_top_k": 10, "audio_temperature": 0.6, "audio_top_k": 100},
    "devices": {"input": ["PulseAudio: desk.monitor", "Desk"], "output": ["PulseAudio: usb", "USB headset"]},
    "recordings_dir": "/srv/recordings/duplexcadence",
    "presets": [["Teacher", "DEMO", "You are a patient teacher."], ["Plain", "", "Answer briefly."]],
}
"""The settings written through AppSettings' setters."""


@contextlib.contextmanager
def one_thread():
    """torch on one CPU thread meanwhile: a float sum's order, and so its last bits, follow the
    thread count (a test process changes it: engine.device.limit_cpu_threads)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def user_audio():
    from tests.mimi_reference import varied_audio
    return varied_audio(FRAMES, seed=3).reshape(FRAMES, -1)


def conversation(model, options, audio, predictor=None):
    """Tokens [frames, 17] (-1 where none) and PCM [frames, 1920] of one conversation."""
    import numpy as np

    from engine import DuplexSession, Persona
    with one_thread():
        session = DuplexSession(model, options, Persona(*PERSONA), predictor=predictor)
        out = [session.step(frame) for frame in audio]
        session.close()
    width = next(len(o.tokens) for o in out if o.tokens is not None)
    tokens = np.stack([o.tokens if o.tokens is not None else np.full(width, -1) for o in out]).astype(np.int64)
    return tokens, np.stack([o.pcm for o in out]).astype(np.float32)


def token2wav_pcm(folder: Path):
    """A small random token2wav (the stock modules' layout) streamed in the chunks a caller
    pushes: its PCM, and the model's folder."""
    import numpy as np
    import torch

    from bench.stock_token2wav import FLOW_YAML, VOCODER_YAML, write_model_dir
    from engine.options import RuntimeOptions
    from engine.token2wav.chunk_plan import chunk_bounds
    from engine.token2wav.token2wav_loading import load_token2wav
    from engine.token2wav.token2wav_stream import Prompt, Token2wavStream
    from tests.test_token2wav_parity import SMALL_ENCODER, SMALL_VOCODER, STEPS, VOCAB, _small
    write_model_dir(folder, seed=0, flow_yaml=_small(FLOW_YAML, SMALL_ENCODER),
                    vocoder_yaml=_small(VOCODER_YAML, SMALL_VOCODER))
    g = torch.Generator().manual_seed(3)
    prompt = Prompt(torch.randint(0, VOCAB, (1, 10), generator=g, dtype=torch.int32),
                    torch.randn(1, 192, generator=g), torch.randn(1, 20, 80, generator=g))
    tokens = torch.randint(0, VOCAB, (1, TOKEN2WAV_TOKENS), generator=torch.Generator().manual_seed(5),
                           dtype=torch.int32)
    with one_thread():  # the stream runs the prompt through the flow when it is made
        model = load_token2wav(folder, device="cpu", seed=0)
        stream = Token2wavStream(model, prompt, steps=STEPS, options=RuntimeOptions(graph_replay=False))
        with torch.inference_mode():
            pieces = [stream.push(tokens[:, a:b], last).clone() for a, b, last in chunk_bounds(tokens.shape[1], 3, 25)]
    return torch.cat(pieces, dim=1)[0].numpy().astype(np.float32)


def record_outputs(out: Path, commit: str) -> dict:
    import numpy as np
    from safetensors.numpy import save_file

    from engine import RuntimeOptions, load_model
    from engine.files.paths import DEMO_MODEL_DIR
    from engine.weights.int4_copies import copies_folder
    audio = user_audio()
    tensors = {"user_pcm": audio.astype(np.float32)}
    demo = load_model("demo")
    predictor = demo.predictor_file
    cases = {
        "ar": (demo, RuntimeOptions(seed=SEED), None),
        "listen": (demo, RuntimeOptions(seed=SEED, policy="listen", block=4, tau=0.5), predictor),
        "speak": (demo, RuntimeOptions(seed=SEED, policy="speak", block=4, tau=0.5), predictor),
        "int8": (load_model("demo", weights="int8"), RuntimeOptions(seed=SEED, weights="int8"), None),
    }
    shutil.rmtree(INT4_SOURCE, ignore_errors=True)
    shutil.copytree(DEMO_MODEL_DIR, INT4_SOURCE)
    with one_thread():  # the copy is quantized here
        cases["int4"] = (load_model(INT4_SOURCE, weights="int4"), RuntimeOptions(seed=SEED, weights="int4"), None)
    copy = next(copies_folder().glob("*.int4.safetensors"))
    shutil.copyfile(copy, out / "demo_int4_copy.safetensors")
    for name, (model, options, adapter) in cases.items():
        tensors[f"{name}.tokens"], tensors[f"{name}.pcm"] = conversation(model, options, audio, adapter)
        print(f"{name}: {int((tensors[f'{name}.tokens'][:, 0] >= 0).sum())} frames with tokens", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tensors["token2wav.pcm"] = token2wav_pcm(Path(tmp))
    lm = INT4_SOURCE / "model.safetensors"
    meta = {"commit": commit, "frames": str(FRAMES), "seed": str(SEED), "voice": PERSONA[0], "role": PERSONA[1],
            "block": "4", "tau": "0.5", "predictor": Path(predictor).name, "token2wav_tokens": str(TOKEN2WAV_TOKENS)}
    save_file(tensors, str(out / "outputs.safetensors"), metadata=meta)
    return {"int4_source": str(lm), "int4_source_mtime_ns": lm.stat().st_mtime_ns}


def record_files(out: Path) -> dict:
    """settings.ini and a recording, written by this commit's app, and what it reads back."""
    import numpy as np
    from PyQt6.QtCore import QSettings

    from app.app_settings import AppSettings, PersonaPreset
    from app.conversation.recorder import ConversationRecorder
    from app.conversation.recording_files import read_recording
    settings = AppSettings(QSettings(str(out / "settings.ini"), QSettings.Format.IniFormat))
    for key in ("model_source", "model_weights", "speaker_volume", "speaker_muted", "theme", "record",
                "engine_pane_open", "sampling"):
        setattr(settings, key, SETTINGS[key])
    for kind, (key, label) in SETTINGS["devices"].items():
        settings.set_device_key(kind, key)
        settings.set_device_label(kind, label)
    settings.persona_presets = [PersonaPreset(*p) for p in SETTINGS["presets"]]
    settings.recordings_dir = SETTINGS["recordings_dir"]
    settings.q.sync()
    read = AppSettings(QSettings(str(out / "settings.ini"), QSettings.Format.IniFormat))
    expected = {key: getattr(read, key) for key in ("model_source", "model_weights", "speaker_volume",
                                                    "speaker_muted", "theme", "record", "engine_pane_open",
                                                    "sampling")}
    expected["devices"] = {kind: [read.device_key(kind), read.device_label(kind)] for kind in ("input", "output")}
    expected["presets"] = [list(p) for p in read.persona_presets]
    expected["recordings_dir"] = str(read.recordings_dir)
    recorder = ConversationRecorder(out / "recordings", "demo", {"seed": SEED, "policy": "ar"},
                                    {"echo_cancellation": True})
    rng = np.random.default_rng(0)
    for text in ["", " Hello", " there", "", " friend", "."]:
        recorder.add_frame((0.1 * rng.standard_normal(1920)).astype(np.float32),
                           (0.1 * rng.standard_normal(1920)).astype(np.float32), text)
    recorder.close()
    rec = read_recording(recorder.wav_path)
    expected["recording"] = {"wav": recorder.wav_path.name, "model": rec.model, "seconds": rec.seconds,
                             "words": rec.words}
    return expected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.strip()
    if dirty:
        print(f"warning: the tree differs from {commit[:7]} (uncommitted changes)", file=sys.stderr)
    out = args.folder
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["XDG_CACHE_HOME"] = cache  # the int4 copy is made here, not in the user's cache
        expected = {"commit": commit, **record_outputs(out, commit), **record_files(out)}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    print(f"recorded at {commit[:7]} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
