"""The bf16 part of the MiniCPM-o golden trace (imported by make_minicpmo_golden.py): the reference's own
bf16 noise. The tiny checkpoint loaded as the demo loads it for the GPU (from_pretrained in fp32, then
`.bfloat16()`, core/processors/unified.py:1358-1374), run by DuplexCapability on the CPU over the fp32
runs BF16_RUNS, teacher-forced: every decode is made to return the fp32 run's token (a FORCE bias on the
logits decode receives, the script's own mechanism) and every TTS step the fp32 run's speech token (FORCE on
head_code's row, as the tail's bias), so the bf16 run sees the fp32 run's history and its logits can be set
against the fp32 ones step by step. Per step it keeps what the fp32 run keeps, read at the fp32 run's top
ids: BF16_KEYS. Everything else (the fp32 keys, their meta) is left as it was."""
from __future__ import annotations

import torch

# The fp32 runs repeated: greedy and seeded sampling, the system prompt with its reference voice, and the run whose
# units reach the 19-decode limit (the longest units). Their own biases are replaced by the forcing; the
# listen_top_k run is not taken (its shortcut may return <|im_end|> whatever the other logits).
BF16_RUNS = ("greedy", "sampled", "system_prompt", "token_limit")
FORCE = 1000.0  # wins both of the decoder's draws and every TTS draw outright: the other tokens' probabilities are 0
TTS_KEPT = 25  # the TTS's 26th draw is discarded, so only 25 are forced
BF16_KEYS = {
    "bf16.audio.u{i}.embeds": "[10, llm_hidden] the bf16 encoder's rows for unit i (as fp32)",
    "bf16.system_prompt.ref_embeds": "[20, llm_hidden] prepare's reference-voice rows in bf16 (as fp32)",
    "bf16.{run}.u{i}.step_tokens": "int64 [S]: what the forced bf16 decode returned (the fp32 run's tokens)",
    "bf16.{run}.u{i}.logits_at_top": "[S, 64] the bf16 row at the fp32 run's logits_top_ids (as fp32)",
    "bf16.{run}.u{i}.logits_probe / logits_lse": "[S, 64] the bf16 row at probe_ids; [S] its log-sum-exp (fp32)",
    "bf16.{run}.u{i}.logits_top1": "int64 [S]: the bf16 row's argmax",
    "bf16.{run}.u{i}.tts_tokens": "int64 [25]: the forced TTS's tokens (the fp32 run's)",
    "bf16.{run}.u{i}.tts_logits_at_top": "[26, 16] head_code's bf16 row at the fp32 run's tts_logits_top_ids",
    "bf16.{run}.u{i}.tts_logits_top1": "int64 [26]: its argmax",
}


def _forcing(trace: dict, name: str, units: int) -> tuple[list, dict]:
    """The fp32 run's tokens as biases: the LLM's (unit, step, token, FORCE) and the TTS's {(unit, step): ...}."""
    llm, tts = [], {}
    for unit in range(units):
        steps = trace.get(f"{name}.u{unit}.step_tokens", torch.zeros(0, dtype=torch.int64))
        llm += [(unit, step, int(token), FORCE) for step, token in enumerate(steps.tolist())]
        speech = trace.get(f"{name}.u{unit}.tts_tokens", torch.zeros(0, dtype=torch.int64))
        assert len(speech) in (0, TTS_KEPT), (name, unit)  # no audio EOS in these runs
        tts.update({(unit, step): [(int(token), FORCE)] for step, token in enumerate(speech.tolist())})
    return llm, tts


def _tts_bias_hook(rec, bias: dict):
    def hook(module, args, out):
        step = len(rec.tts_logits) - 1  # the recorder's own hook, registered first, has appended this step's
        added = bias.get((rec.unit, step))
        if added:
            out = out.clone()
            for token, value in added:
                out[:, -1, token] += value
        return out
    return hook


def record(run, runs: dict, modeling, folder, fp32: dict, audio: torch.Tensor, units: int,
           probe: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict]:
    """The forced bf16 runs (`run`, `runs`: the golden script's session and RUNS; `fp32`: its trace so far)."""
    model = modeling.MiniCPMO.from_pretrained(str(folder)).bfloat16().eval()  # the demo's GPU load, on the CPU
    assert model.llm.lm_head.weight.dtype == torch.bfloat16
    trace: dict[str, torch.Tensor] = {}
    meta = dict(runs=list(BF16_RUNS), force=FORCE, load="MiniCPMO.from_pretrained(folder).bfloat16()",
                device="cpu", steps={})
    for name in BF16_RUNS:
        llm_bias, tts_bias = _forcing(fp32, name, units)
        spec = {**runs[name], "bias": llm_bias}

        def hook(model, duplex, rec, tts_bias=tts_bias):
            model.tts.head_code[0].register_forward_hook(_tts_bias_hook(rec, tts_bias))
        prepared, rec, _ = run(modeling, model, f"bf16.{name}", spec, audio, units, probe, hook=hook)
        if "ref_embeds" in prepared:
            trace[f"bf16.{name}.ref_embeds"] = prepared["ref_embeds"].float()
        meta["steps"][name] = []
        for unit, u in enumerate(rec.units):
            p, q = f"bf16.{name}.u{unit}", f"{name}.u{unit}"
            rows = u["embeds"].float()
            if f"bf16.audio.u{unit}.embeds" in trace:  # the audio path does not depend on the run
                assert torch.equal(trace[f"bf16.audio.u{unit}.embeds"], rows), (name, unit)
            trace[f"bf16.audio.u{unit}.embeds"] = rows
            meta["steps"][name].append(len(u["steps"]))
            if u["steps"]:
                tokens = torch.tensor([t for _, t in u["steps"]], dtype=torch.int64)
                assert torch.equal(tokens, fp32[f"{q}.step_tokens"]), (name, unit)  # the forcing held
                logits = torch.stack([row for row, _ in u["steps"]]).float()
                trace[f"{p}.step_tokens"] = tokens
                trace[f"{p}.logits_at_top"] = logits.gather(1, fp32[f"{q}.logits_top_ids"])
                trace[f"{p}.logits_probe"] = logits[:, probe]
                trace[f"{p}.logits_lse"] = logits.logsumexp(-1)
                trace[f"{p}.logits_top1"] = logits.argmax(-1)
            if "tts_tokens" in u:
                assert torch.equal(u["tts_tokens"], fp32[f"{q}.tts_tokens"]), (name, unit)
                head = u["tts_logits"].float()
                trace[f"{p}.tts_tokens"] = u["tts_tokens"]
                trace[f"{p}.tts_logits_at_top"] = head.gather(1, fp32[f"{q}.tts_logits_top_ids"])
                trace[f"{p}.tts_logits_top1"] = head.argmax(-1)
    return trace, meta
