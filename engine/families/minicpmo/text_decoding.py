"""Choosing the LLM's next token in a unit, draw for draw as the reference's
`StreamDecoder.decode` (MiniCPMO45/utils.py) does, so a seeded run matches it: a first draw
from the raw distribution, which alone may end the unit (`<|chunk_eos|>`); then the forbidden
ids masked, the repetition penalty (dividing a repeated token's logit whatever its sign, as
the reference does), the length penalty on `<|turn_eos|>`, the listen scale (on the
tokenizer's eos id, which is what the reference's decoder calls "listen"), temperature, top-k
and top-p, and a second draw. Greedy mode takes the argmax at both points."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .protocol_settings import UnitSettings


def top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """utils.py top_k_top_p_filtering on a [1, V] row (ties at the k-th value are kept)."""
    logits = logits.clone()
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.size(-1)))[0][..., -1, None]
        logits[logits < kth] = -float("inf")
    if top_p > 0.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
        remove = cumulative > top_p
        remove[..., 1:] = remove[..., :-1].clone()  # keep the token that crosses top_p
        remove[..., 0] = False
        logits[0, sorted_indices[remove]] = -float("inf")
    return logits


class TextDecoder:
    """The decoder's state across a conversation: the tokens its repetition penalty looks back
    on, and the forbidden ids (the tokenizer's bad ids, `<|tts_pad|>` and `<|chunk_eos|>`).
    `<|tts_pad|>` is forbidden from the start, so the reference's suppression of it after a
    unit that had one never changes anything and is not repeated here."""

    def __init__(self, settings: UnitSettings, *, chunk_eos: int, turn_eos: int, eos: int, forbidden: list[int]):
        self.settings = settings
        self.chunk_eos = chunk_eos
        self.turn_eos = turn_eos
        self.eos = eos
        self.forbidden = list(forbidden) + [chunk_eos]
        self.generated: list[int] = []

    def reset(self) -> None:
        self.generated = []

    def decode(self, logits: torch.Tensor, generator: torch.Generator | None) -> int:
        """The next token for a [1, V] row of fp32 logits. Non-finite logits stop here with an error that
        says so: on CUDA, torch.multinomial would fail on them with a device-side assert, which leaves the
        whole process's CUDA context unusable (no other model could load after it)."""
        s = self.settings
        if not bool(torch.isfinite(logits).all()):
            raise ValueError("MiniCPM-o's language model gave non-finite logits (NaN or infinity); "
                             "the conversation cannot go on")
        logits = logits.clone()
        if s.decode_mode == "greedy":
            first = int(torch.argmax(logits[0]))
        else:
            first = int(torch.multinomial(F.softmax(logits[0], dim=-1), 1, generator=generator))
        if first == self.chunk_eos:
            return first
        logits[:, self.forbidden] = float("-inf")
        if s.text_repetition_penalty != 1.0 and self.generated:
            recent = torch.tensor(sorted(set(self.generated[-s.text_repetition_window_size:])), dtype=torch.long)
            recent = recent[recent < logits.size(-1)]
            if s.text_repetition_penalty > 1.0:
                logits[0, recent] /= s.text_repetition_penalty
            else:
                logits[0, recent] *= 1.0 / s.text_repetition_penalty
        if s.length_penalty != 1.0:
            value = logits[0, self.turn_eos]
            logits[0, self.turn_eos] = value / s.length_penalty if value > 0 else value * s.length_penalty
        if s.listen_prob_scale != 1.0:
            logits[0, self.eos] *= s.listen_prob_scale
        if s.listen_top_k is not None and int((logits[0] > logits[0, self.eos]).sum()) < s.listen_top_k:
            return self.eos  # the reference returns here without recording the token
        if s.decode_mode == "greedy":
            token = int(torch.argmax(logits, dim=-1))
        else:
            filtered = top_k_top_p(logits / s.temperature, s.top_k, s.top_p)
            token = int(torch.multinomial(F.softmax(filtered, dim=-1), 1, generator=generator))
        self.generated.append(token)
        return token
