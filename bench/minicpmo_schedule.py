"""What bench.minicpmo makes both runtimes do, and how it times them: the committed schedule of
listening and speaking units (forced by a logit bias on what each side's text decoder receives,
so that both do the same work whatever the random weights say), the stage clock (synchronized
laps, each stage's time its own), and the summaries and ratios of the report."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np
import torch

FORCED_LISTEN = 3  # DuplexConfig.force_listen_count, the demo's (core/schemas/duplex.py)
STEPS = 20  # max_new_speak_tokens_per_chunk: 19 decodes, then the chunk_eos the loop defers
SPEAK_RUNS = (4, 6, 8, 5, 7)
LISTEN_RUNS = (5, 4, 7, 6, 8)
BIAS = 1.0e4
"""Added to the chosen token's logit: past any logit of the random model, in bf16 too, through
the repetition and length penalties, the temperature, top-k and top-p of either decoder."""
TEXT = (" So the weather was fine this morning and we walked along the river until the bridge,"
        " then we talked about music, books and what to cook for dinner tonight")
"""The words the speaking units say, cycled: ordinary text tokens, none special."""
STAGES = ("encoder", "llm_prefill", "llm_decode", "tts", "tail", "finalize", "other")
CADENCE_S = 1.0


@dataclasses.dataclass(frozen=True)
class Unit:
    kind: str
    """"forced" (the first units: the protocol's forced listens, no decode), "listen" or "speak"."""
    end_of_turn: bool = False
    """A speaking unit that ends the turn: <|turn_eos|> at its 19th decode, then chunk_eos."""


def schedule(units: int) -> list[Unit]:
    """The first FORCED_LISTEN units listen by the protocol, then runs of speaking and listening
    units alternate (lengths cycling through SPEAK_RUNS and LISTEN_RUNS); each speaking run ends
    its turn, a run cut by the end of the schedule too."""
    out = [Unit("forced") for _ in range(min(units, FORCED_LISTEN))]
    run = 0
    while len(out) < units:
        speak = min(SPEAK_RUNS[run % len(SPEAK_RUNS)], units - len(out))
        out += [Unit("speak", end_of_turn=i == speak - 1) for i in range(speak)]
        listen = min(LISTEN_RUNS[run % len(LISTEN_RUNS)], units - len(out))
        out += [Unit("listen") for _ in range(listen)]
        run += 1
    return out


class Forcing:
    """The token each decode step of the schedule must draw, and a wrapper for a decoder's
    `decode(logits, ...)` that adds BIAS to it. `ids`: the tokenizer's ids of <|listen|> and
    <|turn_eos|>; `words`: the text tokens speaking units cycle through."""

    def __init__(self, plan: list[Unit], listen: int, turn_eos: int, words: list[int]):
        self.plan, self.listen, self.turn_eos, self.words = plan, listen, turn_eos, words
        self.unit, self.step, self.spoken = 0, 0, 0
        self.decodes: list[int] = [0] * len(plan)

    def begin(self, unit: int) -> None:
        self.unit, self.step = unit, 0

    def token(self) -> int:
        unit = self.plan[self.unit]
        if unit.kind != "speak":
            return self.listen
        if unit.end_of_turn and self.step == STEPS - 2:  # the last decode of the unit
            return self.turn_eos
        return self.words[(self.unit * STEPS + self.step) % len(self.words)]

    def wrap(self, decode: Callable) -> Callable:
        def forced(logits: torch.Tensor, *args, **kwargs):
            biased = logits.clone()
            biased[0, self.token()] += BIAS
            self.step += 1
            self.decodes[self.unit] += 1
            return decode(biased, *args, **kwargs)
        return forced


class StageClock:
    """Each lap synchronizes the device and gives the time since the previous lap to a stage.
    `enter`/`leave` nest: a wrapped call's time is its stage's, the rest its caller's."""

    def __init__(self, device: torch.device):
        self.device = device
        self.stack = ["other"]
        self.times = dict.fromkeys(STAGES, 0.0)
        self.last = time.perf_counter()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def begin(self) -> None:
        self._sync()
        self.stack, self.times = ["other"], dict.fromkeys(STAGES, 0.0)
        self.last = time.perf_counter()

    def lap(self, stage: str) -> None:
        self._sync()
        now = time.perf_counter()
        self.times[stage] += now - self.last
        self.last = now

    def enter(self, stage: str) -> None:
        self.lap(self.stack[-1])
        self.stack.append(stage)

    def leave(self) -> None:
        self.lap(self.stack.pop())

    def end(self) -> dict[str, float]:
        """Milliseconds per stage of the unit now ended (synchronized)."""
        self.lap(self.stack[-1])
        return {stage: seconds * 1000 for stage, seconds in self.times.items()}

    def wrap(self, obj, name: str, stage: str) -> None:
        """`obj.name` (an instance attribute from now on) timed as `stage`."""
        original = getattr(obj, name)

        def timed(*args, **kwargs):
            self.enter(stage)
            try:
                return original(*args, **kwargs)
            finally:
                self.leave()

        setattr(obj, name, timed)


def _stats(ms: list[float]) -> dict:
    if not ms:
        return {"count": 0}
    a = np.asarray(ms)
    return {"count": len(a), "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)),
            "max_ms": float(a.max()), "mean_ms": float(a.mean())}


def summarize(records: list[dict]) -> dict:
    """Speaking and listening units' times, the units over the cadence (the first included),
    and each stage's mean per speaking and per listening unit. Profiled units are left out."""
    timed = [r for r in records if not r.get("profiled")]
    speak = [r for r in timed if r["kind"] == "speak"]
    listen = [r for r in timed if r["kind"] != "speak"]
    out = {"speaking": _stats([r["ms"] for r in speak]), "listening": _stats([r["ms"] for r in listen]),
           "over_cadence": sum(r["ms"] > CADENCE_S * 1000 for r in timed),
           "over_cadence_units": [r["unit"] for r in timed if r["ms"] > CADENCE_S * 1000][:50],
           "first_unit_ms": records[0]["ms"] if records else None,
           "first_speaking_ms": speak[0]["ms"] if speak else None}
    for name, group in (("speaking_stage_mean_ms", speak), ("listening_stage_mean_ms", listen)):
        out[name] = {s: float(np.mean([r["stages"][s] for r in group])) for s in STAGES} if group else {}
    return out


def ratios(reference: dict, ours: dict) -> dict:
    """Reference over ours (above 1: ours is faster or smaller)."""
    def over(a, b):
        return a / b if a and b else None
    r, o = reference["summary"], ours["summary"]
    out = {f"speaking_{k}": over(r["speaking"].get(k), o["speaking"].get(k)) for k in ("p50_ms", "p99_ms", "max_ms")}
    out.update({f"listening_{k}": over(r["listening"].get(k), o["listening"].get(k)) for k in ("p50_ms", "p99_ms")})
    out["ready_s"] = over(reference.get("ready_s"), ours.get("ready_s"))
    out["peak_allocated"] = over(reference.get("peak_allocated_bytes"), ours.get("peak_allocated_bytes"))
    out["device_used"] = over(reference.get("device_used_max_bytes"), ours.get("device_used_max_bytes"))
    out["speaking_stage_mean"] = {s: over(r["speaking_stage_mean_ms"].get(s), o["speaking_stage_mean_ms"].get(s))
                                  for s in STAGES}
    return out


def same_work(reference: list[dict], ours: list[dict]) -> dict:
    """Units where the two sides did not do the same work (decodes, speech tokens, audio out,
    the LLM's context after the unit: the windows drop the same units)."""
    keys = ("kind", "decodes", "speech_tokens", "audio_samples", "context")
    differ = [a["unit"] for a, b in zip(reference, ours) if any(a.get(k) != b.get(k) for k in keys)]
    return {"units_compared": min(len(reference), len(ours)), "units_differing": differ[:50],
            "count_differing": len(differ)}
