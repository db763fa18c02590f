"""The unit protocol's settings and token names, as OpenBMB's MiniCPM-o demo runs them.
Values are the reference's (MiniCPM-o-Demo 28b60cf): `DuplexConfig` in
core/schemas/duplex.py (what the demo's worker passes), `DuplexCapability.__init__` and
`streaming_generate` in MiniCPMO45/modeling_minicpmo_unified.py, `DuplexWindowConfig` and
`StreamDecoder` in MiniCPMO45/utils.py. Data, so a test or the bench can change one."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class UnitSettings:
    # core/schemas/duplex.py DuplexConfig: the demo's defaults.
    force_listen_count: int = 3
    max_new_speak_tokens_per_chunk: int = 20
    decode_mode: str = "sampling"  # or "greedy"
    temperature: float = 0.7
    top_k: int = 20
    top_p: float = 0.8
    text_repetition_penalty: float = 1.05
    text_repetition_window_size: int = 512
    length_penalty: float = 1.1
    listen_prob_scale: float = 1.0
    listen_top_k: int | None = None
    tts_temperature: float = 0.8
    tts_repetition_penalty: float = 1.05
    # streaming_generate: a unit's text is cut before it reaches this many characters.
    max_unit_characters: int = 28
    # utils.py DuplexWindowConfig / DuplexCapability: "off" or "basic" (the product runs
    # "basic": a long conversation keeps bounded memory and positions).
    sliding_window_mode: str = "basic"
    basic_window_high_tokens: int = 4000
    basic_window_low_tokens: int = 3500

    def __post_init__(self):
        if self.decode_mode not in ("sampling", "greedy"):
            raise ValueError(f"decode_mode must be 'sampling' or 'greedy', not {self.decode_mode!r}")
        if self.sliding_window_mode not in ("off", "basic"):
            raise ValueError(f"sliding_window_mode must be 'off' or 'basic', not {self.sliding_window_mode!r}")
        if not 0 < self.basic_window_low_tokens <= self.basic_window_high_tokens:
            raise ValueError("the window's low mark must be positive and at most its high mark")


# The tokens the protocol speaks in (added tokens of the checkpoint's tokenizer).
UNIT = "<unit>"
UNIT_END = "</unit>"
LISTEN = "<|listen|>"
SPEAK = "<|speak|>"
TTS_BOS = "<|tts_bos|>"
TTS_PAD = "<|tts_pad|>"
CHUNK_EOS = "<|chunk_eos|>"
CHUNK_TTS_EOS = "<|chunk_tts_eos|>"
TURN_EOS = "<|turn_eos|>"
