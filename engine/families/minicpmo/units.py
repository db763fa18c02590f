"""The per-second unit protocol of MiniCPM-o's duplex mode, as `DuplexCapability`
(MiniCPMO45/modeling_minicpmo_unified.py) runs it: `prefill` feeds `<unit>` and the second's
audio rows; `generate` decides listen or speak and decodes up to 19 text tokens (the 20th
step is `<|chunk_eos|>`), cut before the unit's text reaches 28 characters; `finalize` feeds
the deferred terminator and `</unit>`, and keeps the context inside the window by dropping
whole units after the system prompt. The first `force_listen_count` units listen; a break
(`generate(interrupt=True)`) ends the model's turn with `<|turn_eos|>` and listens."""
from __future__ import annotations

import dataclasses

import torch

from . import protocol_settings as names
from .protocol_settings import UnitSettings
from .text_decoding import TextDecoder
from .text_tokens import TextTokens


@dataclasses.dataclass
class UnitResult:
    listen: bool
    """The model listens this second (no speech)."""
    text: str
    """What it says this second ("" when listening)."""
    end_of_turn: bool
    """It ended its turn with this unit."""
    spoken: list[tuple[int, torch.Tensor]]
    """Each kept text token after the unit's first, with its final-norm hidden state [1, H]:
    what the TTS is conditioned on."""
    steps: list[int]
    """Every token the unit chose, in order (terminators included): for traces and tests."""
    broke_turn: bool = False
    """An interrupt ended the model's turn here (`<|turn_eos|>` fed before the unit)."""


class UnitProtocol:
    """One conversation's LLM side. `llm` is the Qwen3 model with its KV cache (qwen3.py)."""

    def __init__(self, llm, tokens: TextTokens, settings: UnitSettings):
        self.llm = llm
        self.tokens = tokens
        self.settings = settings
        self.ids = {name: tokens.id(name) for name in (names.UNIT, names.UNIT_END, names.LISTEN, names.SPEAK,
                                                       names.TTS_BOS, names.TTS_PAD, names.CHUNK_EOS,
                                                       names.CHUNK_TTS_EOS, names.TURN_EOS)}
        self.terminators = {self.ids[names.LISTEN], self.ids[names.CHUNK_EOS], self.ids[names.CHUNK_TTS_EOS]}
        self.decoder = TextDecoder(settings, chunk_eos=self.ids[names.CHUNK_EOS], turn_eos=self.ids[names.TURN_EOS],
                                   eos=tokens.eos_id, forbidden=[self.ids[names.TTS_PAD]] + tokens.bad_token_ids)
        self.reset()

    def reset(self) -> None:
        self.llm.reset()
        self.decoder.reset()
        self.turn_ended = True
        self.units_generated = 0
        self.system_length = 0
        self.unit_lengths: list[int] = []  # cached positions of each unit still in the window
        self._unit_start = None
        self._pending_logits = None
        self._pending_finalize = None

    def _feed(self, embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, hidden = self.llm.forward(embeds)
        return logits[-1:], hidden[-1:]

    def _feed_ids(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return self._feed(self.llm.embed(torch.tensor(ids, dtype=torch.long)))

    def prepare(self, prefix: str = "", suffix: str = "", reference_rows: torch.Tensor | None = None) -> None:
        """A new conversation: the system prompt's text before and after a reference voice's
        audio rows (each fed as its own batch, as the reference does), protected from the window."""
        self.reset()
        ids = self.tokens.encode(prefix) if prefix else []
        if ids:
            self._feed_ids(ids)
        if reference_rows is not None and len(reference_rows):
            self._feed(reference_rows)
        ids = self.tokens.encode(suffix) if suffix else []
        if ids:
            self._feed_ids(ids)
        if prefix or suffix or reference_rows is not None:
            self.system_length = self.llm.length

    def prefill(self, audio_rows: torch.Tensor) -> None:
        """The second's `<unit>` and audio rows [n, H]; the logits after them wait for `generate`."""
        if self._pending_finalize is not None:
            raise RuntimeError("prefill before the previous unit was finalized")
        self._unit_start = self.llm.length
        self._feed_ids([self.ids[names.UNIT]])
        self._pending_logits, _ = self._feed(audio_rows)

    def generate(self, generator: torch.Generator | None = None, interrupt: bool = False) -> UnitResult:
        s, ids = self.settings, self.ids
        logits, self._pending_logits = self._pending_logits, None
        if logits is None:
            raise RuntimeError("generate without a prefilled unit")
        force_listen = self.units_generated < s.force_listen_count or interrupt
        self.units_generated += 1
        steps: list[int] = []
        broke_turn = interrupt and not self.turn_ended
        if broke_turn:
            steps.append(ids[names.TURN_EOS])
            logits, _ = self._feed_ids([ids[names.TURN_EOS]])
            self.turn_ended = True
        spoken: list[tuple[int, torch.Tensor]] = []
        kept: list[int] = []
        listen = end_of_turn = False
        terminator = None
        for j in range(s.max_new_speak_tokens_per_chunk):
            if j == s.max_new_speak_tokens_per_chunk - 1:
                terminator = ids[names.CHUNK_EOS]
                steps.append(terminator)
                break
            if force_listen:
                token = ids[names.LISTEN]
            else:
                token = self.decoder.decode(logits.float(), generator)
                if token == ids[names.LISTEN] and not self.turn_ended:
                    token = ids[names.TTS_BOS]  # no listening before the turn has ended
            steps.append(token)
            listen = token == ids[names.LISTEN]
            if token in self.terminators:
                terminator = token
                break
            self.turn_ended = False
            if j != 0 and len(self.tokens.decode(kept + [token])) >= s.max_unit_characters:
                steps[-1] = terminator = ids[names.CHUNK_EOS]  # the token is dropped, not fed
                break
            logits, hidden = self._feed_ids([token])
            end_of_turn = token == ids[names.TURN_EOS]
            if end_of_turn:
                self.turn_ended = True
            if j != 0:  # the unit's first token is neither said nor given to the TTS
                spoken.append((token, hidden))
                kept.append(token)
        self._pending_finalize = (terminator, listen)
        if listen:  # the reference's listening result: no text, no turn end (its tokens were fed all the same)
            return UnitResult(listen=True, text="", end_of_turn=False, spoken=[], steps=steps, broke_turn=broke_turn)
        text = self.tokens.decode(kept) if kept else ""
        return UnitResult(listen=listen, text=text, end_of_turn=end_of_turn, spoken=spoken, steps=steps,
                          broke_turn=broke_turn)

    def finalize(self) -> None:
        """The unit's deferred terminator and `</unit>`, then the window."""
        if self._pending_finalize is None:
            return
        terminator, _ = self._pending_finalize
        self._pending_finalize = None
        tail = [terminator] if terminator is not None else []
        self._feed_ids(tail + [self.ids[names.UNIT_END]])
        length = self.llm.length - self._unit_start
        if length > 0:
            self.unit_lengths.append(length)
        if self.settings.sliding_window_mode == "basic":
            self._enforce_window()

    def _enforce_window(self) -> None:
        """utils.py StreamDecoder.enforce_window: over the high mark, drop the oldest units
        until under the low mark (their positions, keys re-rotated, as the reference does)."""
        s = self.settings
        if self.llm.length <= s.basic_window_high_tokens:
            return
        while self.llm.length > s.basic_window_low_tokens and self.unit_lengths:
            self.llm.drop(self.system_length, self.unit_lengths.pop(0))
