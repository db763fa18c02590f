"""Reading and writing audio files at the models' rate (24 kHz mono float32), streamed: memory
does not grow with a file's length."""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from ..errors import AudioInputError, AudioOutputError
from ..period import FRAME_SIZE, SAMPLE_RATE
from .outputs import OutputFiles, real_file

MIN_RATE = 8000
"""Hz. Telephone speech, the lowest rate anyone records speech at; below it a header is
broken (a file declaring 1 Hz would be resampled into 24,000 times its samples)."""
MAX_RATE = 768_000
"""Hz. The highest rate audio hardware records at; above it a header is broken."""
MAX_CHANNELS = 32
"""Beyond any microphone array or surround layout a conversation comes in; a header claiming
thousands would make each block read gigabytes."""
BLOCK_FRAMES = 1 << 16
"""Frames decoded at a time: at most 8 MB even at MAX_RATE and MAX_CHANNELS."""
_READ_ERRORS = (sf.LibsndfileError, RuntimeError, OSError)
STREAMED_FORMATS = frozenset({"AIFF", "AU", "AVR", "IRCAM", "MAT4", "MAT5", "MPC2K", "NIST", "OGG", "PAF", "PVF",
                              "SVX", "W64", "WAV", "WAVEX"})
"""What libsndfile reads whole from a pipe (standard input, a FIFO): it reads these front to
back. Others it must seek in (FLAC, CAF, MP3, RF64...): from a pipe it fails or stops short."""
_STREAMED = f"give it as a file, or pipe one of {', '.join(sorted(STREAMED_FORMATS))}"
STDIN = "-"
"""The input name for standard input."""
_NOT_FILES = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
              (stat.S_ISDIR, "a folder"))


def _source(path: Path):
    """What soundfile is given for `path`, in a with-block: the name, or the open file when the
    name is not UTF-8 (a file system may hold such names; libsndfile's path API cannot take them)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return open(path, "rb")  # noqa: SIM115 (closed by the caller's with-block)
    return contextlib.nullcontext(str(path))


class AudioInput:
    """An audio file read block by block as mono float32 at `sample_rate`, so memory does not
    grow with its length: any format soundfile reads, any rate and channel count within the
    bounds above, any sample format. Channels are averaged (or only `channel` is taken); the
    rate is converted with soxr's high-quality resampler, streamed (bit for bit what it gives
    on the whole file at once). What the file declares is checked before decoding any of it."""

    def __init__(self, path: str | Path, sample_rate: int = SAMPLE_RATE, channel: int | None = None):
        self.path, self.sample_rate, self.channel = Path(path), sample_rate, channel
        self.name = "standard input (-)" if str(path) == STDIN else str(self.path)
        """The input as errors name it."""
        self._stream: sf.SoundFile | None = None  # standard input or a FIFO: open once, read once
        if str(path) == STDIN:
            if os.isatty(0):
                raise AudioInputError(f"{self.name}: is a terminal; pipe audio into it (e.g. < IN.wav)")
            info = self._open_stream(0, closefd=False)
        else:
            info = self._open_file()
        self.rate, self.channels = info.samplerate, info.channels
        if not MIN_RATE <= self.rate <= MAX_RATE:
            self.close()
            raise AudioInputError(f"{self.name}: sample rate {self.rate} Hz is outside {MIN_RATE}..{MAX_RATE} Hz "
                                  "(a broken header?)")
        if not 1 <= self.channels <= MAX_CHANNELS:
            self.close()
            raise AudioInputError(f"{self.name}: {self.channels} channels; at most {MAX_CHANNELS} are read")
        if channel is not None and channel >= self.channels:
            self.close()
            raise AudioInputError(f"{self.name}: no channel {channel + 1} (the file has {self.channels})")
        known = self._stream is None or self._stream.seekable()  # a pipe's header may not know its length
        if known and info.frames == 0:
            self.close()
            raise AudioInputError(f"{self.name}: the file holds no audio samples")
        self.expected = int(info.frames * sample_rate / self.rate + 0.5) if known else None
        """Samples the whole file gives at `sample_rate` (as the file declares its length); None
        for a stream whose length is known only at its end."""
        self.given = 0
        """Samples given so far."""

    def _open_file(self):
        """The file's declared format, read without decoding; a FIFO opened as a stream; other
        things that are not files refused."""
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            raise AudioInputError(f"{self.name}: file not found") from None
        except OSError as exc:
            raise AudioInputError(f"{self.name}: cannot be read ({exc.strerror})") from None
        if stat.S_ISFIFO(mode):
            try:
                fd = os.open(self.path, os.O_RDONLY)  # waits for the writer, as reading a FIFO does
            except OSError as exc:
                raise AudioInputError(f"{self.name}: cannot be read ({exc.strerror})") from None
            return self._open_stream(fd, closefd=True)
        for test, what in _NOT_FILES:
            if test(mode):
                raise AudioInputError(f"{self.name}: is {what}, not an audio file; give an audio file, a FIFO, "
                                      f"or {STDIN} for standard input")
        try:
            with _source(self.path) as source:
                return sf.info(source)
        except _READ_ERRORS as exc:
            raise AudioInputError(f"{self.name}: not a readable audio file ({exc})") from None

    def _open_stream(self, fd: int, closefd: bool) -> sf.SoundFile:
        """A pipe opened once: its header is read here and its samples by chunks(), never
        twice (what is read from a pipe is gone)."""
        try:
            self._stream = sf.SoundFile(fd, closefd=closefd)
        except _READ_ERRORS as exc:
            if closefd:  # soundfile may have closed it already
                with contextlib.suppress(OSError):
                    os.close(fd)
            raise AudioInputError(f"{self.name}: not readable as a stream of audio ({exc}); {_STREAMED}") from None
        if not self._stream.seekable() and self._stream.format not in STREAMED_FORMATS:
            found = self._stream.format
            self.close()
            raise AudioInputError(f"{self.name}: {found} cannot be read from a pipe (it must be seeked in); "
                                  f"{_STREAMED}")
        return self._stream

    def close(self) -> None:
        """Let go of a stream not read to its end (a file is opened only while it is read)."""
        if self._stream is not None:
            self._stream.close()

    def chunks(self):
        """The samples, in order, as float32 arrays of up to a block's length (after resampling).
        A stream (standard input, a FIFO) gives them once."""
        resampler = None
        if self.rate != self.sample_rate:
            resampler = soxr.ResampleStream(self.rate, self.sample_rate, 1, dtype="float32", quality="HQ")
        if self._stream is not None and self._stream.closed:
            raise AudioInputError(f"{self.name}: a stream is read once; it has been read")
        self.given = 0
        try:
            with contextlib.ExitStack() as opened:
                if self._stream is not None:
                    f = opened.enter_context(self._stream)
                else:
                    f = opened.enter_context(sf.SoundFile(opened.enter_context(_source(self.path))))
                while True:
                    data = f.read(BLOCK_FRAMES, dtype="float32", always_2d=True)
                    last = data.shape[0] < BLOCK_FRAMES
                    mono = self._mono(data)
                    if resampler is not None:
                        mono = resampler.resample_chunk(mono, last=last)
                    self.given += len(mono)
                    if len(mono):
                        yield np.ascontiguousarray(mono, dtype=np.float32)
                    if last:
                        break
        except _READ_ERRORS as exc:
            raise AudioInputError(f"{self.name}: not a readable audio file ({exc})") from None
        if not self.given:
            raise AudioInputError(f"{self.name}: the file holds no audio samples")

    def frames(self, frame_size: int = FRAME_SIZE):
        """(frame, samples): frames of `frame_size`, the last zero-padded, each with how many of
        its samples are the file's."""
        pending = np.zeros(0, dtype=np.float32)
        for chunk in self.chunks():
            pending = np.concatenate([pending, chunk])
            whole = len(pending) // frame_size * frame_size
            for start in range(0, whole, frame_size):
                yield pending[start:start + frame_size].copy(), frame_size
            pending = pending[whole:]
        if len(pending):
            frame = np.zeros(frame_size, dtype=np.float32)
            frame[:len(pending)] = pending
            yield frame, len(pending)

    def _mono(self, data: np.ndarray) -> np.ndarray:
        if self.channel is not None:
            return data[:, self.channel]
        return data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]


def read_audio(path: str | Path, sample_rate: int = SAMPLE_RATE, channel: int | None = None) -> np.ndarray:
    """The whole file as AudioInput gives it, in one array (for files known to be short)."""
    return np.concatenate(list(AudioInput(path, sample_rate, channel).chunks()))


def output_format(path: str | Path) -> tuple[str, str]:
    """(format, subtype) soundfile writes `path` in: from its extension, WAV without one;
    16-bit PCM where the format has it. An unknown extension raises AudioOutputError."""
    suffix = Path(path).suffix.lstrip(".").upper()
    if not suffix:
        return "WAV", "PCM_16"
    if suffix not in sf.available_formats():
        known = ", ".join(f".{f.lower()}" for f in sorted(sf.available_formats()))
        raise AudioOutputError(f"{path}: unknown audio format .{suffix.lower()} (use {known}, or no extension for WAV)")
    return suffix, "PCM_16" if sf.check_format(suffix, "PCM_16") else sf.default_subtype(suffix)


def check_writable(path: str | Path) -> None:
    """Raise AudioOutputError naming `path` unless a file can be written there."""
    path = Path(path)
    if path.is_dir():
        raise AudioOutputError(f"{path}: is a folder; give a file name")
    folder = real_file(path).parent  # a link is written through: its target's folder
    if not folder.is_dir():
        raise AudioOutputError(f"{path}: the folder to write it in does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise AudioOutputError(f"{path}: cannot write there (permission denied)")


class AudioOutput:
    """Mono float samples streamed into `path` (a temporary file of an OutputFiles set) in the
    format the extension of `format_of` (default: of `path`) names; 16-bit PCM WAV without
    one (see output_format). A failed write raises the OS's own error (a full disk says so)
    rather than libsndfile's "System error."."""

    def __init__(self, path: str | Path, sample_rate: int = SAMPLE_RATE, format_of: str | Path | None = None):
        fmt, subtype = output_format(format_of or path)
        self._sink = _Sink(Path(path))
        try:
            self._file = sf.SoundFile(self._sink, "w", sample_rate, 1, subtype=subtype, format=fmt)
        except BaseException:
            self._sink.close()
            raise

    def __enter__(self) -> AudioOutput:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if exc is None:
            self.close()
            return
        with contextlib.suppress(Exception):  # the file is thrown away: keep the first error
            self.close()

    def write(self, pcm: np.ndarray) -> None:
        try:
            self._file.write(np.asarray(pcm, dtype=np.float32))
        except (AssertionError, sf.SoundFileError):  # soundfile asserts on a short write
            self._sink.raise_error()
            raise

    def close(self) -> None:
        try:
            self._file.close()  # rewrites the header: a write too
        except (AssertionError, sf.SoundFileError):
            self._sink.raise_error()
            raise
        finally:
            self._sink.close()
        self._sink.raise_error()


class _Sink:
    """The file libsndfile writes through: a short write there loses the OS error, so it is
    kept here and raised once soundfile gives up."""

    def __init__(self, path: Path):
        self.path, self.error = path, None
        self._f = open(path, "w+b", buffering=0)  # noqa: SIM115 (closed by AudioOutput)

    def write(self, data) -> int:
        view, done = memoryview(data), 0
        try:
            while done < len(view):
                done += self._f.write(view[done:])
        except OSError as exc:
            self.error = OSError(exc.errno, exc.strerror, str(self.path))
        return done

    def read(self, size: int) -> bytes:
        return self._f.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self._f.close()


def write_audio(path: str | Path, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """Mono float samples -> `path`, all or nothing (see OutputFiles), in the format its
    extension names (see output_format)."""
    with OutputFiles(path) as out, AudioOutput(out.temporary(path), sample_rate, format_of=path) as audio:
        audio.write(pcm)


def split_frames(pcm: np.ndarray, frame_size: int = FRAME_SIZE) -> np.ndarray:
    """[N] -> [ceil(N / frame_size), frame_size], zero-padding the last frame."""
    n = -(-len(pcm) // frame_size)
    padded = np.zeros(n * frame_size, dtype=np.float32)
    padded[:len(pcm)] = pcm
    return padded.reshape(n, frame_size)
