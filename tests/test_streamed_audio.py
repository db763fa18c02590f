"""Audio streamed from disk and to disk: bit for bit what reading and writing whole files gave,
memory that does not grow with the input, and what a file declares checked before decoding it."""
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch

from app.cli.commands import main
from engine.files.audio import BLOCK_FRAMES, AudioInput, AudioOutput, output_format
from engine.files.paths import SPEECH_SAMPLE

REPO_ROOT = Path(__file__).resolve().parent.parent


def _whole_file(path: Path, channel: int | None = None) -> np.ndarray:
    """What the engine read before streaming: the whole file, downmixed, resampled at once."""
    data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    if channel is not None:
        mono = data[:, channel]
    else:
        mono = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    if rate != 24000:
        mono = soxr.resample(mono, rate, 24000, quality="HQ").astype(np.float32)
    return mono


def _speech_file(folder: Path, rate: int, channels: int, seconds: float, name: str = "in.wav",
                 subtype: str = "PCM_16") -> Path:
    speech, speech_rate = sf.read(SPEECH_SAMPLE, dtype="float32")
    speech = soxr.resample(np.tile(speech, 1 + int(seconds * speech_rate) // len(speech)), speech_rate, rate)
    speech = speech[:int(seconds * rate)]
    path = folder / name
    sf.write(path, np.stack([speech * (0.9 ** c) for c in range(channels)], axis=1), rate, subtype=subtype)
    return path


@pytest.mark.parametrize("rate,channels,frames,channel", [
    (24000, 1, 3 * BLOCK_FRAMES, None),  # ends exactly on a block
    (44100, 2, 2 * BLOCK_FRAMES + 17, None),
    (8000, 3, BLOCK_FRAMES - 1, 1),
    (48000, 2, 5 * BLOCK_FRAMES + 1, None),
])
def test_streamed_input_is_bit_identical_to_the_whole_file(tmp_path, rate, channels, frames, channel):
    path = _speech_file(tmp_path, rate, channels, frames / rate)
    assert sf.info(path).frames == frames
    source = AudioInput(path, channel=channel)
    streamed = np.concatenate(list(source.chunks()))
    whole = _whole_file(path, channel)
    np.testing.assert_array_equal(streamed, whole)
    assert source.expected == len(whole) == source.given
    framed = list(source.frames())
    assert [n for _, n in framed[:-1]] == [1920] * (len(framed) - 1) and sum(n for _, n in framed) == len(whole)
    np.testing.assert_array_equal(np.concatenate([f[:n] for f, n in framed]), whole)


def test_offline_writes_bit_for_bit_what_whole_files_gave(tmp_path):
    from engine.loading.models import load_model
    from engine.options import RuntimeOptions
    from engine.session import DuplexSession

    path = _speech_file(tmp_path, 44100, 2, 3.3)
    out = tmp_path / "reply.wav"
    assert main(["offline", "--model", "demo", "--input", str(path), "--output", str(out), "--seed", "5",
                 "--device", "cpu"]) == 0
    pcm = _whole_file(path)
    frames = np.zeros(-(-len(pcm) // 1920) * 1920, np.float32)
    frames[:len(pcm)] = pcm
    session = DuplexSession(load_model("demo", device="cpu"), RuntimeOptions(seed=5))
    reply = np.concatenate([session.step(f).pcm for f in frames.reshape(-1, 1920)])[:len(pcm)]
    session.close()
    sf.write(tmp_path / "whole.wav", reply, 24000, subtype="PCM_16", format="WAV")
    assert out.read_bytes() == (tmp_path / "whole.wav").read_bytes()


def test_codec_writes_bit_for_bit_what_whole_files_gave(tmp_path):
    from engine.families.moshi.codec_session import CodecSession
    from engine.families.moshi.model import load_model_mimi

    path = _speech_file(tmp_path, 16000, 1, 2.05)
    out = tmp_path / "out.flac"
    assert main(["codec", "--model", "demo", "--input", str(path), "--output", str(out), "--device", "cpu"]) == 0
    pcm = _whole_file(path)
    frames = np.zeros(-(-len(pcm) // 1920) * 1920, np.float32)
    frames[:len(pcm)] = pcm
    codec = CodecSession(load_model_mimi("demo", device="cpu"))
    decoded = np.concatenate([codec.roundtrip(f) for f in frames.reshape(-1, 1920)])[:len(pcm)]
    codec.close()
    sf.write(tmp_path / "whole.flac", decoded, 24000, subtype="PCM_16", format="FLAC")
    assert out.read_bytes() == (tmp_path / "whole.flac").read_bytes()


def test_token2wav_writes_bit_for_bit_what_the_whole_stream_gave(tmp_path):
    from safetensors.torch import save_file

    from bench.stock_token2wav import FLOW_YAML, VOCODER_YAML, write_model_dir
    from engine.token2wav.token2wav_loading import load_token2wav
    from engine.token2wav.token2wav_stream import Prompt, Token2wavStream
    from tests.test_token2wav_parity import SMALL_ENCODER, SMALL_VOCODER, VOCAB, _small

    folder = tmp_path / "t2w"
    folder.mkdir()
    write_model_dir(folder, seed=0, flow_yaml=_small(FLOW_YAML, SMALL_ENCODER),
                    vocoder_yaml=_small(VOCODER_YAML, SMALL_VOCODER))
    g = torch.Generator().manual_seed(3)
    prompt = {"tokens": torch.randint(0, VOCAB, (10,), generator=g, dtype=torch.int32),
              "speaker": torch.randn(192, generator=g), "mel": torch.randn(20, 80, generator=g)}
    save_file(prompt, str(tmp_path / "prompt.safetensors"))
    tokens = torch.randint(0, VOCAB, (60,), generator=g)
    (tmp_path / "tokens.txt").write_text(" ".join(map(str, tokens.tolist())))
    out = tmp_path / "speech.wav"
    assert main(["token2wav", "--model", str(folder), "--tokens", str(tmp_path / "tokens.txt"), "--prompt",
                 str(tmp_path / "prompt.safetensors"), "--output", str(out), "--steps", "2", "--device", "cpu"]) == 0
    model = load_token2wav(folder, device="cpu", seed=0)
    stream = Token2wavStream(model, Prompt.read(tmp_path / "prompt.safetensors"), steps=2)
    audio = [stream.push(tokens.view(1, -1)[:, a:b], last)[0].float().numpy().copy()
             for a, b, last in stream.chunks(len(tokens), 25)]
    stream.close()
    sf.write(tmp_path / "whole.wav", np.clip(np.concatenate(audio), -1, 1), model.vocoder_cfg.sampling_rate,
             subtype="PCM_16", format="WAV")
    assert out.read_bytes() == (tmp_path / "whole.wav").read_bytes()


def test_memory_does_not_grow_with_the_input(tmp_path):
    """Ten times the input, the same peak: only blocks and frames are ever held."""
    def peak(seconds: float) -> int:
        path = _speech_file(tmp_path, 48000, 2, seconds, name=f"in{seconds}.wav")
        tracemalloc.start()
        with AudioOutput(tmp_path / f"out{seconds}.wav") as out:
            for frame, samples in AudioInput(path).frames():
                out.write(frame[:samples])
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert sf.info(tmp_path / f"out{seconds}.wav").frames == seconds * 24000
        return top

    short, long = peak(30), peak(300)
    assert long < short + 2**20, (short, long)  # whole files: 300 s of 48 kHz stereo is 115 MB as float32


def _declaring(path: Path, rate: int, channels: int) -> Path:
    """A small WAV whose header declares `rate` and `channels` (libsndfile refuses to write some)."""
    sf.write(path, np.zeros((4800, channels), np.float32), 24000, subtype="PCM_16", format="WAV")
    data = bytearray(path.read_bytes())
    data[22:24] = channels.to_bytes(2, "little")
    data[24:28] = rate.to_bytes(4, "little")
    data[28:32] = (rate * 2 * channels).to_bytes(4, "little")
    data[32:34] = (2 * channels).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("rate,channels,expected", [
    (1, 1, "sample rate 1 Hz is outside 8000..768000 Hz (a broken header?)"),
    (4000, 1, "sample rate 4000 Hz is outside 8000..768000 Hz (a broken header?)"),
    (10_000_000, 1, "sample rate 10000000 Hz is outside 8000..768000 Hz (a broken header?)"),
    (24000, 33, "33 channels; at most 32 are read"),
])
def test_what_a_file_declares_is_checked_before_decoding(tmp_path, rate, channels, expected):
    path = _declaring(tmp_path / "declared.wav", rate, channels)
    assert (sf.info(path).samplerate, sf.info(path).channels) == (rate, channels)
    with pytest.raises(ValueError) as refused:
        AudioInput(path)
    assert str(refused.value) == f"{path}: {expected}"


@pytest.mark.parametrize("command", ["offline", "codec"])
def test_the_commands_refuse_a_declared_rate_in_one_line(tmp_path, command):
    path = _declaring(tmp_path / "declared.wav", 1, 1)
    done = subprocess.run([sys.executable, "-m", "app.cli", command, "--model", "demo", "--input", str(path),
                           "--output", str(tmp_path / "o.wav"), "--device", "cpu"], capture_output=True, text=True,
                          cwd=str(REPO_ROOT))
    assert done.returncode == 2 and done.stderr.strip() == (
        f"duplexcadence: error: {path}: sample rate 1 Hz is outside 8000..768000 Hz (a broken header?)")
    assert not (tmp_path / "o.wav").exists()


def test_the_unknown_extension_error_lists_every_format_that_works(tmp_path):
    with pytest.raises(ValueError) as refused:
        output_format(tmp_path / "reply.xyz")
    listed = str(refused.value).split("(use ")[1]
    for extension in (".wav", ".flac", ".ogg", ".mp3", ".aiff"):
        assert extension in listed
    for known in sf.available_formats():  # every one listed really writes
        output_format(tmp_path / f"r.{known.lower()}")


def test_a_file_name_that_is_not_utf8_is_read_and_written(tmp_path):
    """Linux file names are bytes: one that is not UTF-8 (from an old archive, say) is read and
    written like any other, and named in messages (libsndfile's path API takes only UTF-8)."""
    name, out = tmp_path / "voice\udcff.wav", tmp_path / "reply\udcfe.wav"
    try:
        sf.write(str(tmp_path / "plain.wav"), sf.read(SPEECH_SAMPLE)[0][:24000], 24000)
        (tmp_path / "plain.wav").rename(name)
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system refuses names that are not UTF-8")
    assert AudioInput(name).expected == 24000
    # A process of its own: its stderr says what a terminal would (pytest's capture is strict UTF-8).
    codec = [sys.executable, "-m", "app.cli", "codec", "--model", "demo", "--device", "cpu", "--output", out]
    assert subprocess.run([*codec, "--input", name], capture_output=True).returncode == 0
    assert out.exists()
    gone = subprocess.run([*codec, "--input", tmp_path / "gone\udcff.wav"], capture_output=True)
    assert gone.returncode == 2 and b"gone\\udcff.wav: file not found" in gone.stderr
