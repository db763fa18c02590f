"""Our MiniCPM-o family teacher-forced through the golden's fp32 runs, for the bf16 fidelity tests: every
decode returns the fp32 run's token and every TTS step draws the fp32 run's speech token (a bias on the
TTS head's row, as packaging/minicpmo_golden_bf16.py forces the reference), so the history never drifts
and our logits can be set against the fp32 ones step by step. The golden also holds the reference's own
bf16 run forced the same way ("bf16.*"); `fidelity` measures both alike, as bench/fidelity.py does: per
step the relative L2 error of the logits and the top-1 agreement, plus the largest error, the error of the
log-probabilities (through each row's log-sum-exp) and a KL divergence over the columns the golden keeps."""
from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import torch
from safetensors import safe_open

from engine.families.minicpmo import speech_tokens
from engine.families.minicpmo.audio_encoder import StreamingAudioEncoder
from engine.families.minicpmo.conversation import system_prompt
from engine.families.minicpmo.protocol_settings import UnitSettings
from engine.families.minicpmo.qwen3 import Qwen3Model
from engine.families.minicpmo.units import UnitProtocol

GOLDEN = Path(__file__).parent / "golden"
FOLDER = GOLDEN / "minicpmo_tiny"
META = json.loads((GOLDEN / "minicpmo_tiny_trace.json").read_text())
BF16_RUNS = META["bf16"]["runs"]
FORCE = META["bf16"]["force"]
NONE = torch.zeros(0, dtype=torch.int64)


def load_trace() -> dict[str, torch.Tensor]:
    with safe_open(str(GOLDEN / "minicpmo_tiny_trace.safetensors"), framework="pt") as f:
        return {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118


def reference_bf16(trace: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The reference's forced bf16 run, keyed as `forced` keys ours."""
    return {key[len("bf16."):]: value for key, value in trace.items() if key.startswith("bf16.")}


def _settings(spec: dict) -> UnitSettings:
    g, duplex = spec["generate"], spec["spec"].get("duplex", {})
    return UnitSettings(force_listen_count=duplex.get("force_listen_count", 0), decode_mode=g["decode_mode"],
                        temperature=g["temperature"], top_k=g["top_k"], top_p=g["top_p"],
                        listen_prob_scale=g["listen_prob_scale"], listen_top_k=g["listen_top_k"],
                        text_repetition_penalty=g["text_repetition_penalty"],
                        text_repetition_window_size=g["text_repetition_window_size"],
                        length_penalty=g["length_penalty"], sliding_window_mode="off")


@torch.inference_mode()
def forced(model, trace: dict[str, torch.Tensor], run: str, seed: int = META["seed"]) -> dict[str, torch.Tensor]:
    """One golden run through our modules in the model's device and dtype, forced to the fp32 run's tokens:
    the encoder's rows, and per unit each decode's row and each TTS step's head row read where the golden
    reads the fp32 ones (at its top ids and probe ids, with the row's log-sum-exp and argmax)."""
    spec, device, dtype, w = META["runs"][run], model.device, model.dtype, model.weights_by_name
    encoder = StreamingAudioEncoder(model.config, w, device, dtype)
    llm = Qwen3Model(model.config, w, device, dtype, capacity=1024)
    units = UnitProtocol(llm, model.tokens, _settings(spec))
    tts = speech_tokens.SpeechTokenGenerator(model.config, w, device, dtype)
    generator = torch.Generator(device).manual_seed(seed)  # only the TTS draws, every one of them forced
    pcm, probe, out = trace["audio.pcm16"], trace["probe_ids"], {}
    if spec["spec"].get("prompt"):
        reference = encoder.encode_reference((pcm[6:8].reshape(-1).float() / 32768).numpy())
        out[f"{run}.ref_embeds"] = reference.float().cpu()
        units.prepare(*system_prompt(""), reference_rows=reference)
    else:
        units.prepare()
    rows: list[torch.Tensor] = []
    head_rows: list[torch.Tensor] = []
    tokens = {"llm": [], "tts": []}

    def decode(logits, generator):
        rows.append(logits[0].float().cpu())
        return tokens["llm"][len(rows) - 1]
    units.decoder.decode = decode
    linear = speech_tokens.linear

    def head(x, weight):
        y = linear(x, weight)
        if weight is tts.head:
            head_rows.append(y[0].float().cpu())
            if len(head_rows) <= len(tokens["tts"]):
                y = y.clone()
                y[:, tokens["tts"][len(head_rows) - 1]] += FORCE
        return y

    with mock.patch.object(speech_tokens, "linear", head):
        for i, facts in enumerate(spec["units"]):
            p = f"{run}.u{i}"
            rows.clear()
            tokens["llm"] = trace.get(f"{p}.step_tokens", NONE).tolist()
            embeds = encoder.encode((pcm[i % len(pcm)].float() / 32768).numpy())
            out[f"audio.u{i}.embeds"] = embeds.float().cpu()
            units.prefill(embeds)
            result = units.generate(generator, interrupt="override" in facts["actions"])
            assert len(rows) == len(tokens["llm"]) and result.text == facts["text"], p
            if rows:
                logits = torch.stack(rows)
                out[f"{p}.step_tokens"] = torch.tensor(tokens["llm"])
                out[f"{p}.logits_at_top"] = logits.gather(1, trace[f"{p}.logits_top_ids"])
                out[f"{p}.logits_probe"], out[f"{p}.logits_lse"] = logits[:, probe], logits.logsumexp(-1)
                out[f"{p}.logits_top1"] = logits.argmax(-1)
            if not result.listen:
                ids = [token for token, _ in result.spoken]
                assert ids == trace[f"{p}.tts_text_ids"].tolist(), p
                hidden = torch.cat([h for _, h in result.spoken]) if ids else None
                head_rows.clear()
                tokens["tts"] = trace[f"{p}.tts_tokens"].tolist()
                speech = tts.generate(tts.condition(ids, hidden), generator, end_of_turn=result.end_of_turn)
                assert list(speech) == tokens["tts"], p
                logits = torch.stack(head_rows)
                out[f"{p}.tts_logits_at_top"] = logits.gather(1, trace[f"{p}.tts_logits_top_ids"])
                out[f"{p}.tts_logits_top1"] = logits.argmax(-1)
            units.finalize()
    return out


def _kl(ref: torch.Tensor, got: torch.Tensor) -> torch.Tensor:
    """KL(ref || got) per row over the given log-probability columns and one bucket for the rest of the
    vocabulary (a coarsening of the whole distribution, so never more than the whole rows' KL)."""
    def buckets(logp):
        logp = logp.double()
        rest = (1 - logp.exp().sum(-1, keepdim=True)).clamp_min(1e-300)
        return torch.cat([logp, rest.log()], dim=-1)
    ref, got = buckets(ref), buckets(got)
    return (ref.exp() * (ref - got)).sum(-1).clamp_min(0)


def fidelity(candidate: dict[str, torch.Tensor], trace: dict[str, torch.Tensor], runs) -> dict:
    """The candidate's forced runs (ours, or the golden's reference bf16) against the fp32 golden. LLM, per
    step over the columns kept (the fp32 row's top 64 and the 64 probe ids): relative L2 error and largest
    error of the logits, largest error of the log-probabilities, KL(fp32 || candidate), the recorded token's
    log-probability error where it is among the columns, top-1 agreement with the fp32 argmax. TTS, per step
    over the fp32 head row's top 16: relative L2 error, largest error, top-1 agreement. Encoder, per unit (and
    reference voice): the rows' relative L2 error and largest error. Each: mean, 90th percentile and max."""
    llm = {k: [] for k in ("rel_err", "max_abs", "logprob_err", "kl", "token_logprob_err", "top1")}
    tts = {k: [] for k in ("rel_err", "max_abs", "top1")}
    encoder = {k: [] for k in ("rel_err", "max_abs")}
    probe = trace["probe_ids"]
    for run in runs:
        for i in range(len(META["runs"][run]["units"])):
            p = f"{run}.u{i}"
            if f"{p}.logits_at_top" in candidate:
                ids = trace[f"{p}.logits_top_ids"]
                extra = ~(probe[None, :, None] == ids[:, None, :]).any(-1)  # probe columns not among the top ids
                for s in range(len(ids)):
                    ref = torch.cat([trace[f"{p}.logits_top_values"][s], trace[f"{p}.logits_probe"][s, extra[s]]])
                    got = torch.cat([candidate[f"{p}.logits_at_top"][s], candidate[f"{p}.logits_probe"][s, extra[s]]])
                    ref_lp, got_lp = ref - trace[f"{p}.logits_lse"][s], got - candidate[f"{p}.logits_lse"][s]
                    llm["rel_err"].append((got - ref).norm() / ref.norm())
                    llm["max_abs"].append((got - ref).abs().max())
                    llm["logprob_err"].append((got_lp - ref_lp).abs().max())
                    llm["kl"].append(_kl(ref_lp, got_lp))
                    hit = (torch.cat([ids[s], probe[extra[s]]]) == trace[f"{p}.step_tokens"][s]).nonzero()
                    if len(hit):
                        llm["token_logprob_err"].append((got_lp[hit[0, 0]] - ref_lp[hit[0, 0]]).abs())
                    llm["top1"].append(candidate[f"{p}.logits_top1"][s] == ids[s, 0])
            if f"{p}.tts_logits_at_top" in candidate:
                ref, got = trace[f"{p}.tts_logits_top_values"], candidate[f"{p}.tts_logits_at_top"]
                tts["rel_err"] += list((got - ref).norm(dim=-1) / ref.norm(dim=-1))
                tts["max_abs"] += list((got - ref).abs().amax(-1))
                tts["top1"] += list(candidate[f"{p}.tts_logits_top1"] == trace[f"{p}.tts_logits_top_ids"][:, 0])
    rows = [key for key in candidate if key.startswith("audio.") or key.endswith(".ref_embeds")]
    for key in [key for key in rows if key.split(".")[0] in ("audio", *runs)]:
        got, ref = candidate[key], trace[key]
        encoder["rel_err"].append((got - ref).norm() / ref.norm())
        encoder["max_abs"].append((got - ref).abs().max())

    def summary(values: dict) -> dict:
        out = {"steps": len(values["rel_err"])}
        if "top1" in values:
            out["top1_agreement"] = float(torch.stack(values["top1"]).float().mean())
        for name, v in values.items():
            if name != "top1":
                v = torch.stack(v).double()
                out[f"{name}_mean"], out[f"{name}_p90"], out[f"{name}_max"] = (
                    float(v.mean()), float(v.quantile(0.9)), float(v.max()))
        return out
    return {"llm": summary(llm), "tts": summary(tts), "encoder": summary(encoder)}


# The bounds, after bench/fidelity.py's (mean error at most 1.25 times the reference bf16's, top-1 agreement
# at most 0.02 under it), with the spread of the errors bounded too: the 90th percentile at 1.5 times, and the
# worst step at 4 times only, a guard against a wrong step (a bug moves logits by units, bf16 by hundredths).
# The worst step is a poor measure of fidelity: it is where one rounding happened to flip upstream, and our
# CPU bf16, equal to the reference's bit for bit but for one-ulp roundings in the encoder's attention, has a
# worst LLM step twice the reference's. KL grows with the square of small logit errors: its bounds squared.
SCALES = {"mean": 1.25, "p90": 1.5, "max": 4.0}
TOP1_MARGIN = 0.02
SLACK = 1e-7  # absolute, for an error that is 0 in the reference


def within_reference_noise(ours: dict, ref: dict, parts=("llm", "tts", "encoder")) -> list[str]:
    """What of ours exceeds the reference bf16's noise under the bounds above (empty: all within)."""
    bad = []
    for part in parts:
        for name, value in ours[part].items():
            limit = ref[part][name]
            if name == "top1_agreement":
                if value < limit - TOP1_MARGIN:
                    bad.append(f"{part} {name} {value:.4f} < {limit:.4f} - {TOP1_MARGIN}")
            elif name != "steps":
                scale = SCALES[name.rsplit("_", 1)[1]] ** (2 if name.startswith("kl_") else 1)
                if value > scale * limit + SLACK:
                    bad.append(f"{part} {name} {value:.4g} > {scale:g} x {limit:.4g}")
    return bad


def format_fidelity(ours: dict, ref: dict, parts=("llm", "tts", "encoder")) -> str:
    lines = ["| statistic | ours | reference bf16 | ratio |", "|---|---|---|---|"]
    for part in parts:
        lines += [f"| {part} {name} | {value:.4g} | {ref[part][name]:.4g} | {value / ref[part][name]:.2f} |"
                  if ref[part][name] else f"| {part} {name} | {value:.4g} | {ref[part][name]:.4g} | |"
                  for name, value in ours[part].items()]
    return "\n".join(lines)
