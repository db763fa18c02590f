"""Standard input (`-`) and FIFOs are read once, as a stream, under the bounds a file has; a
device, a socket or a folder is refused in one line. The CLI cases run the installed command
with a real FIFO written by another process and a real pipe."""
import os
import socket
import subprocess
import threading

import numpy as np
import pytest
import soundfile as sf

from engine.errors import AudioInputError
from engine.files.audio import STREAMED_FORMATS, AudioInput
from tests.installed_cli import COMMAND, duplexcadence, one_line, speech_clip


def _fifo_fed(folder, data: bytes):
    """A FIFO and a thread writing `data` into it once a reader opens it."""
    fifo = folder / "feed"
    os.mkfifo(fifo)

    def write():
        with open(fifo, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return fifo, writer


@pytest.mark.parametrize("fmt", sorted(STREAMED_FORMATS))
def test_each_streamed_format_is_read_whole_from_a_pipe(tmp_path, fmt):
    """What a FIFO gives is what the same file gives, sample for sample."""
    rng = np.random.default_rng(1)
    tone = (0.3 * np.sin(np.arange(40_000) / 7) + 0.01 * rng.standard_normal(40_000)).astype(np.float32)
    sub = "PCM_16" if sf.check_format(fmt, "PCM_16") else sf.default_subtype(fmt)
    path = tmp_path / f"in.{fmt.lower()}"
    sf.write(path, tone, 16000, format=fmt, subtype=sub)
    expected = np.concatenate(list(AudioInput(path).chunks()))
    fifo, writer = _fifo_fed(tmp_path, path.read_bytes())
    stream = AudioInput(fifo)
    assert stream.expected is None  # a pipe's length is known at its end
    got = np.concatenate(list(stream.chunks()))
    writer.join(5)
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(AudioInputError, match="read once"):
        next(stream.chunks())


@pytest.mark.parametrize("fmt", ["FLAC", "CAF"])
def test_a_format_that_must_be_seeked_in_is_refused_from_a_pipe(tmp_path, fmt):
    path = tmp_path / f"in.{fmt.lower()}"
    sf.write(path, np.zeros(16000, dtype=np.float32), 16000, format=fmt)
    fifo, writer = _fifo_fed(tmp_path, path.read_bytes())
    with pytest.raises(AudioInputError, match=r"feed: .*pipe one of AIFF") as refused:
        AudioInput(fifo)
    assert "\n" not in str(refused.value)
    writer.join(5)


def _run_offline(source, out, timeout=120, **kwargs):
    return duplexcadence("offline", "--model", "demo", "--device", "cpu", "--seed", "3", "--input", source,
                         "--output", out, timeout=timeout, **kwargs)


def test_offline_reads_a_fifo_written_by_another_process(tmp_path):
    clip = speech_clip(tmp_path / "in.wav", seconds=2.0)
    assert _run_offline(clip, tmp_path / "from_file.wav").returncode == 0
    fifo = tmp_path / "feed.wav"
    os.mkfifo(fifo)
    # Another process writes the FIFO, as a recorder or a decoder would.
    writer = subprocess.Popen(["sh", "-c", f'cat "{clip}" > "{fifo}"'])
    try:
        done = _run_offline(fifo, tmp_path / "from_fifo.wav")  # it hung here, the data eaten by a probe
    finally:
        writer.kill()
        writer.wait()
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(sf.read(tmp_path / "from_fifo.wav")[0], sf.read(tmp_path / "from_file.wav")[0])


def test_offline_reads_standard_input_from_a_pipe(tmp_path):
    clip = speech_clip(tmp_path / "in.wav", seconds=2.0)
    assert _run_offline(clip, tmp_path / "from_file.wav").returncode == 0
    with open(clip, "rb") as f:
        cat = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
    try:
        done = _run_offline("-", tmp_path / "from_pipe.wav", stdin=cat.stdout)
    finally:
        cat.stdout.close()
        cat.wait()
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(sf.read(tmp_path / "from_pipe.wav")[0], sf.read(tmp_path / "from_file.wav")[0])


def test_standard_input_redirected_from_a_file_of_any_format_is_read(tmp_path):
    path = tmp_path / "in.flac"  # seekable: no pipe, so FLAC is fine
    sf.write(path, sf.read(speech_clip(tmp_path / "in.wav"))[0], 16000, format="FLAC")
    with open(path, "rb") as stdin:
        done = _run_offline("-", tmp_path / "reply.wav", stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert sf.info(tmp_path / "reply.wav").duration == pytest.approx(sf.info(path).duration, abs=0.05)


def test_a_flac_piped_in_is_refused_in_one_line(tmp_path):
    path = tmp_path / "in.flac"
    sf.write(path, np.zeros(16000, dtype=np.float32), 16000, format="FLAC")
    done = subprocess.run(f'cat "{path}" | "{COMMAND}" offline --model demo --input - --output "{tmp_path}/r.wav"',
                          shell=True, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "standard input (-): " in one_line(done.stderr)


def test_a_terminal_as_standard_input_is_refused(tmp_path):
    controller, terminal = os.openpty()
    try:
        done = _run_offline("-", tmp_path / "reply.wav", stdin=terminal)
    finally:
        os.close(controller)
        os.close(terminal)
    assert done.returncode == 2 and "is a terminal; pipe audio into it" in one_line(done.stderr)


def test_devices_sockets_and_folders_are_refused_in_one_line(tmp_path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    try:
        for source, what in (("/dev/zero", "a character device"), (tmp_path / "sock", "a socket"),
                             (tmp_path, "a folder")):
            done = _run_offline(source, tmp_path / "reply.wav", timeout=60)
            assert done.returncode == 2 and f"{source}: is {what}, not an audio file" in one_line(done.stderr)
    finally:
        server.close()
    assert not (tmp_path / "reply.wav").exists()
