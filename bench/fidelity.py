"""Fidelity, teacher-forced: how far our bf16 LM's logits are from the stock runtime's, next
to how far the stock runtime in bf16 is from itself in fp32.

The same token history is fed to every runtime frame by frame (uniform random tokens for all
streams, no delays: each runtime sees the same input row per step), so errors never steer
what comes next. Per frame: the text logits of the temporal transformer, and the audio logits
of every depformer step, each step fed the history's token of the previous codebook. Against
the stock runtime in fp32 (the reference), per runtime: the relative L2 error of the logits
(mean and max over frames) and the top-1 agreement (the share of rows whose argmax equals
the reference's). What int8 weights cost is measured the same way, each int8 runtime against
its own float weights (ours int8 vs ours bf16, stock q8 vs stock bf16).
"""
from __future__ import annotations

from pathlib import Path

import torch

from engine.options import RuntimeOptions
from engine.runtime.stages import Stage, StageRunner

from .stock import stock_lm


def _history(cfg, frames: int, seed: int, device) -> torch.Tensor:
    """[frames, n_q + 1] random tokens (text first), none of them special."""
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(0, cfg.text_card, (frames, 1), generator=g)
    audio = torch.randint(0, cfg.card, (frames, cfg.n_q), generator=g)
    return torch.cat([text, audio], dim=1).to(device)


class _Stock:
    """The stock LMModel, stepped by its own streaming forward functions."""

    def __init__(self, lm):
        self.lm = lm
        self._ctx = lm.streaming(1)
        self._ctx.__enter__()

    def frame(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lm = self.lm
        h, text_logits = lm.forward_text(tokens.view(1, -1, 1))
        audio = []
        with lm.depformer.streaming(1):
            for k in range(lm.dep_q):
                prev = tokens[0] if k == 0 else tokens[k]
                audio.append(lm.forward_depformer(k, prev.view(1, 1, 1), h).view(-1))
        return text_logits.view(-1).float(), torch.stack(audio).float()

    def close(self):
        self._ctx.__exit__(None, None, None)


class _Ours:
    """Our LM teacher-forced, a frame at a time as one eager stage of the stage runner (which
    ticks the frame clock, as it does in a conversation)."""

    def __init__(self, lm, store):
        self.lm = lm
        self.runner = StageRunner(store, lm.device, None, RuntimeOptions(graph_replay=False))

    def frame(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.runner.run(Stage("teacher-forced", lambda: self._frame(tokens), (("frame", 1),)), replay=False)

    def _frame(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lm, store = self.lm, self.runner.store
        h, text_logits = lm.backbone(lm.embed_streams(tokens), store)
        lm.restart_depformer(store)
        audio = [lm.depformer_step(k, tokens[k:k + 1], h, store).view(-1) for k in range(lm.cfg.dep_q)]
        return text_logits.view(-1).float(), torch.stack(audio).float()

    def close(self):
        self.runner.close()


class _Tally:
    def __init__(self):
        self.rel = {"text": [], "audio": []}
        self.agree = {"text": [0, 0], "audio": [0, 0]}

    def add(self, kind: str, got: torch.Tensor, ref: torch.Tensor) -> None:
        got, ref = got.view(-1, ref.shape[-1]), ref.view(-1, ref.shape[-1])
        self.rel[kind].append(((got - ref).norm() / ref.norm()).item())
        self.agree[kind][0] += int((got.argmax(-1) == ref.argmax(-1)).sum())
        self.agree[kind][1] += ref.shape[0]

    def summary(self) -> dict:
        return {kind: {"rel_err_mean": sum(r) / len(r), "rel_err_max": max(r),
                       "top1_agreement": self.agree[kind][0] / self.agree[kind][1]}
                for kind, r in self.rel.items()}


@torch.no_grad()
def measure(model_dir: Path, frames: int, seed: int = 0, q8_dir: Path | None = None) -> dict:
    """Teacher-forced logits of our bf16 LM and the stock LM in bf16 against the stock LM in
    fp32, all loaded from `model_dir` (official layout with config.json) on CUDA. With
    `q8_dir` (the same weights in the official q8 layout) also what int8 costs: our LM from
    the q8 file against our bf16 LM, and the stock q8 LM against the stock bf16 LM."""
    from engine import load_model
    from engine.loading import locate
    from engine.state import FullStore

    def ours(path):
        lm = load_model(path, device="cuda", dtype=torch.bfloat16).lm
        return _Ours(lm, FullStore(lm.regions(), "cuda"))

    lm_file = locate.lm_file(model_dir)
    reference = _Stock(stock_lm(lm_file, "cuda", torch.float32))
    ours_bf16, stock_bf16 = ours(model_dir), _Stock(stock_lm(lm_file, "cuda", torch.bfloat16))
    pairs = {"ours bf16": (reference, ours_bf16), "stock bf16": (reference, stock_bf16)}
    references = dict.fromkeys(pairs, "stock fp32")
    if q8_dir is not None:
        pairs["ours int8"] = (ours_bf16, ours(q8_dir))
        pairs["stock q8"] = (stock_bf16, _Stock(stock_lm(locate.lm_file(q8_dir), "cuda", torch.bfloat16)))
        references.update({"ours int8": "ours bf16", "stock q8": "stock bf16"})
    cfg = ours_bf16.lm.cfg
    frames = min(frames, cfg.context)  # teacher forcing within one attention window
    runtimes = _teacher_forced(pairs, cfg, frames, seed, "cuda")
    for name, summary in runtimes.items():
        summary["reference"] = references[name]
    return {"frames": frames, "reference": "per row", "runtimes": runtimes}


@torch.no_grad()
def measure_int8(path_or_name, frames: int, seed: int = 0, device: str = "cpu", stock: bool = True) -> dict:
    """What int8 weights cost, teacher-forced: our LM with int8 weights (quantized per row on
    load) against our LM with its float weights, and (`stock`) the stock runtime's q8 LM
    (bitsandbytes: int8 weights and int8 activations) against the stock LM with the float
    weights, both from the same file. Float is bf16 on CUDA, fp32 on the CPU (where the demo
    model runs); the stock runtime needs moshi and bitsandbytes installed."""
    import tempfile

    from engine import load_model
    from engine.loading import locate
    from engine.state import FullStore
    from engine.weights.export import export_q8

    reference = load_model(path_or_name, device=device)
    model = load_model(path_or_name, device=device, weights="int8")
    pairs = {"ours int8": (_Ours(reference.lm, FullStore(reference.lm.regions(), device)),
                           _Ours(model.lm, FullStore(model.lm.regions(), device)))}
    frames = min(frames, model.cfg.context)
    with tempfile.TemporaryDirectory() as tmp:
        if stock:
            q8_file = export_q8(path_or_name, tmp, device)
            pairs["stock q8"] = (_Stock(stock_lm(locate.lm_file(reference.path), device, reference.lm.dtype)),
                                 _Stock(stock_lm(q8_file, device, reference.lm.dtype)))
        summaries = _teacher_forced(pairs, model.cfg, frames, seed, device)
    return {"frames": frames, "reference": f"the same runtime with float weights ({str(reference.lm.dtype)[6:]})",
            "runtimes": summaries}


def _teacher_forced(pairs: dict, cfg, frames: int, seed: int, device) -> dict:
    """name -> (reference runtime, runtime): each fed the same random history, the runtime's
    logits tallied against its reference's. A runtime shared by several pairs (one reference
    for all) steps once per frame."""
    runtimes = {id(r): r for pair in pairs.values() for r in pair}
    tallies = {name: _Tally() for name in pairs}
    for tokens in _history(cfg, frames, seed, device):
        logits = {key: runtime.frame(tokens) for key, runtime in runtimes.items()}
        for name, (reference, runtime) in pairs.items():
            (ref_text, ref_audio), (text, audio) = logits[id(reference)], logits[id(runtime)]
            tallies[name].add("text", text, ref_text)
            tallies[name].add("audio", audio, ref_audio)
    for runtime in runtimes.values():
        runtime.close()
    return {name: tally.summary() for name, tally in tallies.items()}


def format_fidelity(result: dict) -> str:
    lines = [f"fidelity, teacher-forced over {result['frames']} frames, against {result['reference']}:",
             "| runtime | text rel err mean / max | text top-1 | audio rel err mean / max | audio top-1 |",
             "|---|---|---|---|---|"]
    for name, r in result["runtimes"].items():
        t, a = r["text"], r["audio"]
        name = f"{name} vs {r['reference']}" if "reference" in r else name
        lines.append(f"| {name} | {t['rel_err_mean']:.4f} / {t['rel_err_max']:.4f} | {t['top1_agreement']:.3f} | "
                     f"{a['rel_err_mean']:.4f} / {a['rel_err_max']:.4f} | {a['top1_agreement']:.3f} |")
    return "\n".join(lines)
