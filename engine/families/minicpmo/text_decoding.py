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
    """utils.py top_k_top_p_filtering on a [1, V] row (ties at the k-th value are kept), by masks rather than
    boolean indexing, which reads a count back to the host: the same values without waiting on the device."""
    logits = logits.clone()
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.size(-1)))[0][..., -1, None]
        logits.masked_fill_(logits < kth, -float("inf"))
    if top_p > 0.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
        remove = cumulative > top_p
        remove[..., 1:] = remove[..., :-1].clone()  # keep the token that crosses top_p
        remove[..., 0] = False
        logits.masked_fill_(remove.scatter(1, sorted_indices, remove), -float("inf"))
    return logits


class TextDecoder:
    """The decoder's state across a conversation: the tokens its repetition penalty looks back
    on (the last `text_repetition_window_size` chosen, kept on the device, so a step reads
    back only its two draws), and the forbidden ids (the tokenizer's bad ids, `<|tts_pad|>`
    and `<|chunk_eos|>`). `<|tts_pad|>` is forbidden from the start, so the reference's
    suppression of it after a unit that had one never changes anything and is not repeated."""

    def __init__(self, settings: UnitSettings, *, chunk_eos: int, turn_eos: int, eos: int, forbidden: list[int]):
        self.settings = settings
        self.chunk_eos = chunk_eos
        self.turn_eos = turn_eos
        self.eos = eos
        self.forbidden = list(forbidden) + [chunk_eos]
        self._device_ids: dict[torch.device, torch.Tensor] = {}
        self.reset()

    def reset(self) -> None:
        self.generated: list[int] = []
        self._recent: torch.Tensor | None = None  # [window] ids chosen, a ring; -1 where none yet

    def _forbidden(self, device: torch.device) -> torch.Tensor:
        if device not in self._device_ids:
            self._device_ids[device] = torch.tensor(self.forbidden, dtype=torch.long, device=device)
        return self._device_ids[device]

    def _penalised(self, logits: torch.Tensor) -> torch.Tensor:
        """The repetition penalty on each distinct id among the last window's (a logit divided by it whatever
        its sign, as the reference's `logits[0, recent] /= penalty` does)."""
        s = self.settings
        seen = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
        valid = self._recent >= 0
        seen[0].scatter_(0, self._recent.clamp(min=0), valid)
        scaled = logits / s.text_repetition_penalty if s.text_repetition_penalty > 1.0 \
            else logits * (1.0 / s.text_repetition_penalty)
        return torch.where(seen, scaled, logits)

    def decode(self, logits: torch.Tensor, generator: torch.Generator | None) -> int:
        """The next token for a [1, V] row of fp32 logits. Non-finite logits stop here with an error that
        says so. On CUDA, torch.multinomial would fail on them with a device-side assert, which leaves the
        whole process's CUDA context unusable (no other model could load after it): the first draw is from
        the row with its non-finite values zeroed, and read back with whether there were any."""
        s = self.settings
        logits = logits.clone()
        finite = torch.isfinite(logits).all()
        if s.decode_mode == "greedy":
            first = torch.argmax(logits[0]).view(1)
        else:
            safe = torch.where(finite, logits[0], torch.zeros((), device=logits.device))
            first = torch.multinomial(F.softmax(safe, dim=-1), 1, generator=generator)
        first, finite = torch.cat([first, finite.view(1).long()]).tolist()
        if not finite:
            raise ValueError("MiniCPM-o's language model gave non-finite logits (NaN or infinity); "
                             "the conversation cannot go on")
        if first == self.chunk_eos:
            return first
        logits[:, self._forbidden(logits.device)] = float("-inf")
        if s.text_repetition_penalty != 1.0 and self.generated:
            logits = self._penalised(logits)
        if s.length_penalty != 1.0:
            value = logits[0, self.turn_eos]
            logits[0, self.turn_eos] = torch.where(value > 0, value / s.length_penalty, value * s.length_penalty)
        if s.listen_prob_scale != 1.0:
            logits[0, self.eos] *= s.listen_prob_scale
        if s.listen_top_k is not None and int((logits[0] > logits[0, self.eos]).sum()) < s.listen_top_k:
            return self.eos  # the reference returns here without recording the token
        if s.decode_mode == "greedy":
            chosen = torch.argmax(logits, dim=-1)
        else:
            filtered = top_k_top_p(logits / s.temperature, s.top_k, s.top_p)
            chosen = torch.multinomial(F.softmax(filtered, dim=-1), 1, generator=generator).view(1)
        self._remember(chosen)
        token = int(chosen)
        self.generated.append(token)
        return token

    def warm_up(self, vocab: int, device: torch.device) -> None:
        """Both draws' kernels run once, before the first unit: CUDA loads a kernel at its first launch, which
        made the first spoken unit 0.1 s slower than the rest. Neither the state nor the conversation's
        generator moves: the draws come from a generator of their own."""
        saved = self.generated, self._recent
        generator = torch.Generator(device).manual_seed(0)
        logits = torch.randn(1, vocab, generator=generator, device=device)
        logits[0, [self.chunk_eos, self.eos]] = -1e9  # neither the unit's end nor a listen (finite): both draws
        self.reset()
        for _ in range(2):  # the second with a window of recent ids: the repetition penalty too
            self.decode(logits, generator)
        self.generated, self._recent = saved

    def _remember(self, chosen: torch.Tensor) -> None:
        """The chosen id [1] (on the device) into the window's ring, before it is read back."""
        window = self.settings.text_repetition_window_size
        if self._recent is None:
            self._recent = torch.full((window,), -1, dtype=torch.long, device=chosen.device)
        self._recent[len(self.generated) % window] = chosen[0]
