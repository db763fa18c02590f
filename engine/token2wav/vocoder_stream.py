"""The causal HiFT vocoder streamed (the stock `BoundedVocoder`): fresh mel in, audio out, with a
bounded mel and excitation history, a float64 F0 and a continuous float64 harmonic phase.

A call is split in two so that it can be replayed as one captured CUDA graph:

- `StreamingVocoder.plan` (host only): from the count of frames received so far, every window,
  block and sample count of the call, as integers *relative to that count*: once a stream has
  run past the vocoder's history, every call of the same length has the same plan.
- `StreamingVocoder.run` (device only): the work of a plan on fixed-shape state tensors,
  updated in place. Where the stream is enters only through the state's `sample` counter (the
  excitation noise is read at an absolute sample position), a device tensor the work reads
  and advances itself; nothing is read back to the host.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import NamedTuple

import torch

from ..state import Region
from .vocoder import CausalHiFTGenerator


def decoder_history(model: CausalHiFTGenerator) -> int:
    """Mel frames of history after which decode() no longer sees the past: its receptive field to
    the left (upsampling convs, source STFT and downsampling convs, resblocks, conv_post, ISTFT)
    in mel frames, rounded up, plus two frames for the resampling grids (the stock sizing)."""
    rate = model.stft_per_frame
    transform = Fraction(model.n_fft, model.frame_samples)  # one STFT window, in mel frames
    history, scale = Fraction(0), 1
    for i, up in enumerate(model.ups):
        scale *= model.upsample_rates[i]
        history += Fraction(up.pad, scale)
        down = model.source_downs[i]
        source = (transform + Fraction(down.kernel_size[0] - 1, rate)
                  + Fraction(model.source_resblocks[i].history, scale))
        blocks = model.resblocks[i * model.per_stage:(i + 1) * model.per_stage]
        history = max(history, source) + Fraction(max(block.history for block in blocks), scale)
    history += Fraction(model.conv_post.pad + 1, rate) + transform
    return math.ceil(history) + 2


@dataclasses.dataclass(frozen=True)
class StreamGeometry:
    """How far a stream reaches back and ahead, in mel frames."""

    f0_history: int  # the F0 predictor's left receptive field (8)
    f0_lookahead: int  # its right one (3)
    history: int  # decode()'s left receptive field (31)
    decode_lookahead: int  # conv_pre's look-ahead + the held-back ISTFT frame (5)
    block_frames: int  # mel is taken in blocks of at most this many frames (16)

    @property
    def delay(self) -> int:
        """Frames received but not yet vocoded in a running stream (8)."""
        return self.f0_lookahead + self.decode_lookahead

    @property
    def mel_frames(self) -> int:
        """Mel kept: the history before the oldest frame not yet vocoded, the delay, one block (55)."""
        return max(self.history, self.f0_history - self.decode_lookahead) + self.delay + self.block_frames

    @property
    def source_frames(self) -> int:
        """Excitation frames kept: history, decode look-ahead, and the most one step adds (52)."""
        return self.history + self.decode_lookahead + max(self.block_frames, self.f0_lookahead)

    def source_end(self, received: int, final: bool) -> int:
        """Frames with excitation once `received` mel frames are in."""
        return received if final else max(0, received - self.f0_lookahead)

    def emitted(self, received: int, final: bool) -> int:
        """Frames vocoded once `received` mel frames are in."""
        return received if final else max(0, received - self.delay)


def stream_geometry(model: CausalHiFTGenerator, block_frames: int = 16) -> StreamGeometry:
    if block_frames < 1:
        raise ValueError(f"block_frames must be positive, got {block_frames}")
    return StreamGeometry(model.f0_predictor.history, model.f0_predictor.lookahead, decoder_history(model),
                          model.conv_pre_look_right + 1, block_frames)


# --- plans: what a call does, in integers relative to the frames received before it ----------

class SourceStep(NamedTuple):
    """Excitation for the frames whose F0 became known."""
    context: int  # the F0 predictor reads the newest `context` mel frames
    skip: int  # of its outputs, the first `skip` are context only (excitation made before)
    frames: int  # excitation frames added
    final: bool  # no look-ahead: the last frames see zeros to their right


class DecodeStep(NamedTuple):
    """Audio for the frames whose excitation and look-ahead are in."""
    mel: int  # decode reads the mel frames [newest - mel, newest - ahead)
    ahead: int  # mel frames received past the excitation (look-ahead of a later step)
    source: int  # and the newest `source` frames of excitation
    skip: int  # of its output frames, the first `skip` are history only (emitted before)
    final: bool


class VocoderStep(NamedTuple):
    block: tuple[int, int] | None  # (first, count): the call's mel frames appended first
    source: SourceStep | None
    decode: DecodeStep | None


class VocoderPlan(NamedTuple):
    """One call: `frames` fresh mel frames (and a finalize); `samples` of audio come out."""
    frames: int
    finalize: bool
    steps: tuple[VocoderStep, ...]
    samples: int


def _newest(buf: torch.Tensor, count: int, skip: int = 0, per_frame: int = 1) -> torch.Tensor:
    """Frames [newest - count, newest - skip) of a buffer whose last column is the newest frame's end."""
    size = buf.shape[-1]
    if count * per_frame > size:
        raise RuntimeError(f"stream window of {count} frames exceeds its buffer")  # a geometry bug
    return buf[..., size - count * per_frame:size - skip * per_frame]


def _shift(buf: torch.Tensor, count: int) -> None:
    """Drop the oldest `count` columns, making room at the end (in place)."""
    if count:
        buf[..., :-count] = buf[..., count:].clone()  # overlapping: copy_ needs a separate source


class StreamingVocoder:
    """One stream through `model`, equal to the stock BoundedVocoder: feed fresh mel [1, C, n] to
    `stream`; each call returns the audio that became final, [1, samples]; finalize=True returns
    the rest and ends the stream. A running stream holds back `geometry.delay` frames.

    State, a dict of fixed-shape tensors (`state_shapes()`), updated in place:
      mel     [1, C, mel_frames] float32: the last mel frames received, the newest at the end;
      source  [1, 1, source_frames * hop] float32: the excitation of the last frames, newest at the end;
      phase   [1, 1, H] float64: each harmonic's phase in cycles (modulo 1) after the last frame;
      sample  [1] int64: excitation samples made so far (where the noise table is read next).
    Which frames these hold follows from how many frames were received: that count is the stream's
    clock, kept on the host (`frames`), since it sets the window sizes, i.e. tensor shapes; reading
    it from the device would stall every chunk. `stream` is `plan`, `run`, then the clock advances.
    """

    def __init__(self, model: CausalHiFTGenerator, block_frames: int = 16,
                 state: Mapping[str, torch.Tensor] | None = None):
        """`state`: tensors placed by the caller; None allocates them here, on first use, so
        a caller may `place` them after reading `regions`."""
        self.model = model
        self.geometry = stream_geometry(model, block_frames)
        self.hop = model.frame_samples
        self._state = None if state is None else self._checked(state)
        self.frames, self.finalized = 0, False

    @property
    def state(self) -> Mapping[str, torch.Tensor]:
        if self._state is None:
            self._state = self.new_state()
        return self._state

    def place(self, state: Mapping[str, torch.Tensor]) -> None:
        """Use `state` (e.g. a store's regions, `regions()`) for this stream from now on."""
        self._state = self._checked(state)

    def state_shapes(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        g, harmonics = self.geometry, self.model.m_source.harmonics
        return {"mel": ((1, self.model.conv_pre.in_channels, g.mel_frames), torch.float32),
                "source": ((1, 1, g.source_frames * self.hop), torch.float32),
                "phase": ((1, 1, harmonics), torch.float64),
                "sample": ((1,), torch.int64)}

    def regions(self, prefix: str = "vocoder") -> list[Region]:
        """The state as engine regions (fixed: their size never depends on the stream's length)."""
        return [Region(f"{prefix}.{name}", shape, dtype) for name, (shape, dtype) in self.state_shapes().items()]

    def new_state(self, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
        device = self.model.conv_pre.bias.device if device is None else device
        return {name: torch.zeros(shape, dtype=dtype, device=device) for name, (shape, dtype) in
                self.state_shapes().items()}

    def _checked(self, state: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        for name, (shape, dtype) in self.state_shapes().items():
            if name not in state or tuple(state[name].shape) != shape or state[name].dtype != dtype:
                raise ValueError(f"vocoder state {name!r} must be {shape} {dtype}")
        return state

    def reset(self) -> None:
        """A new stream: state zeroed in place, clock back to zero."""
        for tensor in self.state.values():
            tensor.zero_()
        self.frames, self.finalized = 0, False

    def stream(self, mel: torch.Tensor, finalize: bool = False) -> torch.Tensor:
        self.check(mel)
        if self.finalized:
            if mel.shape[-1] or not finalize:
                raise ValueError("vocoder stream already finalized; reset() for a new one")
            return mel.new_zeros(1, 0)
        plan = self.plan(self.frames, mel.shape[-1], finalize)
        audio = self.run(self.state, mel, plan)
        self.advance(plan)
        return audio

    def check(self, mel: torch.Tensor) -> None:
        if mel.dim() != 3 or tuple(mel.shape[:2]) != (1, self.model.conv_pre.in_channels):
            raise ValueError(f"vocoder stream needs fresh mel [1, {self.model.conv_pre.in_channels}, frames], "
                             f"got {tuple(mel.shape)}")

    def advance(self, plan: VocoderPlan) -> None:
        """The host clock after `plan` ran (eagerly or replayed)."""
        self.frames += plan.frames
        self.finalized = plan.finalize

    # --- the host side ---------------------------------------------------------------------

    def plan(self, received: int, fresh: int, finalize: bool) -> VocoderPlan:
        """A call of a stream that had received `received` frames, with `fresh` more (in blocks,
        as the stock stream takes them: each block's windows, hence its rounding, match)."""
        g, steps = self.geometry, []
        for first in range(0, fresh, g.block_frames):
            count = min(g.block_frames, fresh - first)
            steps.append(self._plan_step(received, received + count, False, (first, count)))
            received += count
        if finalize:
            steps.append(self._plan_step(received, received, True, None))
        samples = (g.emitted(received, finalize) - g.emitted(received - fresh, False)) * self.hop
        return VocoderPlan(fresh, finalize, tuple(steps), samples)

    def _plan_step(self, before: int, received: int, final: bool, block: tuple[int, int] | None) -> VocoderStep:
        """Bring excitation and audio up to `received` frames (all of them if final)."""
        g = self.geometry
        start, end = g.source_end(before, False), g.source_end(received, final)
        source = None
        if end > start:
            first = max(0, start - g.f0_history)
            source = SourceStep(received - first, start - first, end - start, final)
        done, ready = g.emitted(before, False), g.emitted(received, final)
        decode = None
        if ready > done:
            first = max(0, done - g.history)
            decode = DecodeStep(received - first, received - end, end - first, done - first, final)
        return VocoderStep(block, source, decode)

    # --- the device side -------------------------------------------------------------------

    @torch.inference_mode()
    def run(self, state: Mapping[str, torch.Tensor], mel: torch.Tensor, plan: VocoderPlan) -> torch.Tensor:
        """The work of `plan` on `state` (updated in place): mel [1, C, plan.frames] -> audio
        [1, plan.samples]. Reads nothing back to the host."""
        out = torch.empty(1, plan.samples, dtype=torch.float32, device=mel.device)
        written = 0
        with torch.autocast(mel.device.type, enabled=False):
            for step in plan.steps:
                if step.block is not None:
                    first, count = step.block
                    _shift(state["mel"], count)
                    state["mel"][..., -count:] = mel[..., first:first + count]
                if step.source is not None:
                    self._extend_source(state, step.source)
                if step.decode is not None:
                    d = step.decode
                    audio = self.model.decode(_newest(state["mel"], d.mel, d.ahead),
                                              _newest(state["source"], d.source, 0, self.hop),
                                              finalize=d.final)[:, d.skip * self.hop:]
                    out[:, written:written + audio.shape[1]] = audio
                    written += audio.shape[1]
        if written != plan.samples:
            raise RuntimeError(f"vocoder stream wrote {written} samples, expected {plan.samples}")
        return out

    def _extend_source(self, state: Mapping[str, torch.Tensor], step: SourceStep) -> None:
        """Excitation for `step.frames` more frames appended to state["source"]."""
        g, hop, buf = self.geometry, self.hop, state["source"]
        f0 = self.model.predict_f0(_newest(state["mel"], step.context), finalize=step.final)[:, step.skip:]
        if f0.shape[1] != step.frames:
            raise RuntimeError(f"F0 for {f0.shape[1]} frames, expected {step.frames}")
        _shift(buf, step.frames * hop)
        base = buf.shape[-1] - step.frames * hop
        # In blocks, as stock does: the float64 phase sums then round the same way.
        for i in range(0, step.frames, g.block_frames):
            part = f0[:, i:i + g.block_frames]
            at = base + i * hop
            buf[..., at:at + part.shape[1] * hop] = self.model.m_source.stream(part, state["phase"],
                                                                                state["sample"] + i * hop)
        state["sample"].add_(step.frames * hop)
