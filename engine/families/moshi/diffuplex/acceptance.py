"""Whether a planned frame is played: the checks of the LISTEN and SPEAK policies.

Split in two because the first half needs no depformer: the wake's text token and its
confidence are on the host already (copied as the wake ended), so a frame the text refuses
costs nothing. The second half runs on the depformer's output and reads the device once.
A loop takes any object with these two methods (a benchmark forces its own acceptance)."""
from __future__ import annotations

import torch

from ....options import RuntimeOptions
from ..lm.lm_config import LMConfig


class PolicyChecks:
    """`listen` plays a predicted frame only while the assistant is predicted silent (a
    padding text token), `speak` also while it speaks; both only with confidence >= tau, and
    with `verify="semantic"` only if the user said what was predicted (the predicted user
    semantic code against the real one).

    After a refusal, `refused` names the first check that failed (a stats.REFUSALS name): the wake
    that follows reports it, so a user can see why predicted frames were not played."""

    refused: str | None = None

    def __init__(self, cfg: LMConfig, device: torch.device):
        self._silent_ids = (cfg.text_padding_id, cfg.text_end_padding_id)
        self._silent = torch.tensor(self._silent_ids, device=device)
        self._user_semantic = 1 + cfg.model_q

    def text_allows(self, i: int, text: torch.Tensor, confidence: torch.Tensor, options: RuntimeOptions) -> bool:
        """Planned frame i on the host: its text token's confidence, and for LISTEN silence."""
        if float(confidence[i]) < options.tau:
            self.refused = "below_tau"
        elif options.policy == "listen" and int(text[i]) not in self._silent_ids:
            self.refused = "speech"
        else:
            return True
        return False

    def accepts(self, i: int, generated: torch.Tensor, confidence: torch.Tensor, user: torch.Tensor,
                options: RuntimeOptions) -> bool:
        """Planned frame i after its depformer: generated [1 + dep_q], its confidence, the
        user's real codes [user_q]."""
        names, checks = ["below_tau"], [confidence >= options.tau]
        if options.verify == "semantic":
            names.append("user_missed")
            checks.append(generated[self._user_semantic] == user[0])
        if options.policy == "listen":
            names.append("speech")
            checks.append((generated[0] == self._silent).any())
        passed = torch.stack(checks).tolist()  # one read of the device
        self.refused = next((name for name, ok in zip(names, passed) if not ok), None)
        return self.refused is None


class PlayFirst:
    """Plays the first `accept` frames of every plan and refuses the next before its
    depformer, reading nothing: the checks under which a loop's frames take each wake shape
    in turn (the loop's `prepare`)."""

    refused: str | None = None

    def __init__(self, accept: int = 0):
        self.accept = accept

    def text_allows(self, i: int, text: torch.Tensor, confidence: torch.Tensor, options: RuntimeOptions) -> bool:
        return i < self.accept

    def accepts(self, i: int, generated: torch.Tensor, confidence: torch.Tensor, user: torch.Tensor,
                options: RuntimeOptions) -> bool:
        return True
