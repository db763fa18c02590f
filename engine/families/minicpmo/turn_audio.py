"""The token2wav tail's side of a MiniCPM-o conversation, as the reference's duplex loop drives it
(`_generate_waveform_from_tokens` with force_flush, `_reset_token2wav_for_new_turn`): one stream
for the whole conversation, restarted at each turn in the same state and graphs; three silence
tokens start a turn's buffer, pushes of a chunk and its lookahead leave the lookahead for the next,
and a turn's end flushes what is left. Between turns, in the time a unit leaves, it prepares the
pushes a turn's short units make (`spare`), so that they replay rather than run eagerly."""
from __future__ import annotations

import time

import torch

from ...options import RuntimeOptions
from ...state.memory_budget import room
from ...token2wav.prompt import Prompt
from ...token2wav.token2wav_stream import Token2wavStream

SILENCE_TOKEN = 4218  # _reset_token2wav_for_new_turn: three of it start each turn's buffer
TAIL_CHUNK = 25  # _generate_waveform_from_tokens' CHUNK_SIZE
TAIL_STEPS = 5  # init_token2wav's n_timesteps
OUTPUT_SECOND = 24000
SPARE_FREE_BYTES = 8 << 30
"""Room a spare-time preparation needs (free device memory, or what a smaller card's budget leaves):
each prepared push is a graph of its own, 15-30 MB of device memory outside torch's pools on an H100
(1-2 GiB for all of them), which a 12 or 8 GB card running int8 or int4 has not to spare; there a
short push runs eagerly once per shape (about 0.25 s more in its unit)."""


class TurnAudio:
    """The tail's stream and buffer: speech tokens in, a unit's audio out. No tail (`tail` None) or
    no voice prompt: no audio."""

    def __init__(self, tail, device: torch.device):
        self.tail, self.device = tail, device
        self.prompt: Prompt | None = None
        self.stream: Token2wavStream | None = None
        self.buffer: list[int] = []
        self._spare_s = 0.0  # the longest a spare-time preparation took

    def use(self, prompt: Prompt | None) -> None:
        """The voice prompt of the turns from the next on: another one takes a stream of its own."""
        if prompt is not self.prompt:
            self.prompt, self.stream = prompt, None

    def new_turn(self, options: RuntimeOptions) -> None:
        """The reference's _reset_token2wav_for_new_turn: a new tail stream (ours restarted in place;
        made, and captured as it is made, at the first turn of a prompt)."""
        if self.stream is not None:
            self.stream.restart()
        elif self.prompt is not None:
            self.stream = Token2wavStream(self.tail, self.prompt, steps=TAIL_STEPS, options=options)
            lookahead = self.stream.lookahead  # `audio` pushes 8-28 tokens, and ends a turn with 3-7
            self.stream.plan_spare(range(lookahead + 5, TAIL_CHUNK + lookahead + 1), range(lookahead, lookahead + 5))
        self.buffer = [SILENCE_TOKEN] * 3

    def audio(self, tokens: list[int], last: bool) -> torch.Tensor | None:
        """A unit's speech tokens through the stream (_generate_waveform_from_tokens with force_flush,
        always on in duplex mode): its audio [n] at 24 kHz, padded in front to a second unless it ends
        the turn, or None where nothing came out."""
        if self.stream is None:
            return None
        buffer, lookahead, pieces = self.buffer + tokens, self.stream.lookahead, []
        while len(buffer) >= lookahead + 5:
            take = min(TAIL_CHUNK + lookahead, len(buffer))
            chunk = torch.tensor([buffer[:take]], dtype=torch.long, device=self.device)
            pieces.append(self.stream.push(chunk)[0].float().clone())
            buffer = buffer[min(TAIL_CHUNK, take - lookahead):]
        if last and buffer:
            chunk = torch.tensor([buffer], dtype=torch.long, device=self.device)
            pieces.append(self.stream.push(chunk, last=True)[0].float().clone())
            buffer = []
        self.buffer = buffer
        if not pieces:
            return None
        audio = torch.cat(pieces)
        if not last and audio.numel() < OUTPUT_SECOND:  # the reference pads a unit's audio to a second, in front
            audio = torch.cat([audio.new_zeros(OUTPUT_SECOND - audio.numel()), audio])
        return audio

    def spare(self, until: float) -> None:
        """Between turns, the pushes of other lengths than a whole chunk's prepared one at a time while
        each is expected to end before `until` (a perf_counter time) and the device has memory to
        spare: the first short push of a turn then replays rather than running eagerly in its unit."""
        stream = self.stream
        if stream is None or not stream.runner.replay or not stream.at_start:
            return
        while (stream.spare_left and time.perf_counter() + self._spare_s <= until
               and room(self.device) >= SPARE_FREE_BYTES):
            began = time.perf_counter()
            stream.prepare_spare()
            torch.cuda.synchronize(self.device)  # its work done here, not waited on by the next unit
            self._spare_s = max(self._spare_s, time.perf_counter() - began)
