"""Build a tiny random MiniCPM-o 4.5 checkpoint and record the reference's own duplex trace on
it, for the MiniCPM-o parity tests: the OpenBMB demo's code (MiniCPMO45/), not our reading of it.

The checkpoint (tests/golden/minicpmo_tiny/) is the reference's MiniCPMO class with its real
vocabularies and tiny layers, saved by its own save_pretrained in the Hub layout. The trace
runs DuplexCapability (fp32, CPU) over fixed speech as the demo server calls it: greedy, seeded
sampling, and runs whose protocol rules are reached by a logit bias added from outside (RUNS),
never by editing the reference. Its keys are in TRACE_KEYS; the token2wav tail's runs (the stock
Token2wav's waveforms) are minicpmo_golden_tail.py's, the forced bf16 runs minicpmo_golden_bf16.py's.

    refvenv/bin/python packaging/make_minicpmo_golden.py PATH/TO/MiniCPM-o-Demo [--commit SHA]
(the reference's venv: transformers 4.51, scipy, soundfile, einops, minicpmo-utils 1.0.7 beside torch)."""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import minicpmo_golden_bf16 as bf16
import minicpmo_golden_tail as tail
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[1]
CKPT = ROOT / "tests" / "golden" / "minicpmo_tiny"
TRACE = ROOT / "tests" / "golden" / "minicpmo_tiny_trace.safetensors"
SEED = 20260501
# The real vocabularies: the protocol's ids reach 151748 (tokenizer) and the TTS embeds LLM ids.
LLM_VOCAB = 152064
TTS_TEXT_TOKENS = 152064
TTS_AUDIO_TOKENS = 6562
AUDIO_BOS = 151687
# Tiny widths: the three 152064-row tables (LLM embedding, LM head, TTS text embedding) dominate
# the size (with the TTS backbone's unused 32000-row table): LLM width 4, TTS width 2 (one head of
# 2) keep the folder, tokenizer's 4.3 MB included, under 8 MB.
LLM = dict(hidden_size=4, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
           head_dim=8, rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=40960,
           tie_word_embeddings=False, vocab_size=LLM_VOCAB, bos_token_id=151643, eos_token_id=151645)
WHISPER = dict(d_model=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64, num_mel_bins=80,
               max_source_positions=1500, decoder_layers=2, decoder_attention_heads=2, decoder_ffn_dim=64)
TTS = dict(llm_dim=4, hidden_size=2, intermediate_size=8, num_attention_heads=1, num_key_value_heads=1,
           num_hidden_layers=2, num_audio_tokens=TTS_AUDIO_TOKENS, num_text_tokens=TTS_TEXT_TOKENS,
           audio_bos_token_id=AUDIO_BOS, projector_type="mlp", backbone_model="llama",
           audio_tokenizer_type="s3tokenizer_step_audio")
TOKENIZER_FILES = ("vocab.json", "merges.txt", "added_tokens.json", "special_tokens_map.json",
                   "tokenizer_config.json", "preprocessor_config.json")


# The trace's tensors ({run} is a key of RUNS, u{i} a unit, 0-based; fp32 unless said). The logits rows are
# the ones DuplexCapability hands StreamDecoder.decode, before the run's bias is added; "step" is the j of
# streaming_generate's loop (one decode call each; force-listen units have none).
TRACE_KEYS = {
    "audio.pcm16": "int16 [8, 16000]: the units' input; unit i's samples are pcm16[i % 8] / 32768 (fp32)",
    "audio.u{i}.mel": "[80, T] the mel frames the streaming encoder got for unit i (same in every run)",
    "audio.u{i}.embeds": "[10, llm_hidden] the rows fed to the LLM for unit i (projected and pooled)",
    "probe_ids": "int64 [64]: the protocol's special ids, then random ids; logits_probe's columns",
    "{run}.prompt_ids": "int64: what prepare fed the LLM cache, -1 for each reference-audio row",
    "{run}.ref_mel / ref_embeds": "system_prompt only: prepare's reference audio (units 6-7) mel and rows",
    "{run}.fed_ids": "int64: every LLM cache position at the end (prompt, units), -1 for audio rows",
    "{run}.bias_at / bias_value": "int64 [n, 3] (unit, step, token id) and [n]: added to that step's logits",
    "{run}.u{i}.rng": "uint8: torch.get_rng_state() before streaming_generate (the LLM's draws, then the TTS's)",
    "{run}.u{i}.step_tokens": "int64 [S]: decode's return per step (before the listen -> tts_bos rewrite)",
    "{run}.u{i}.logits_top_values / _top_ids": "[S, 64] / int64: each step's top 64 logits, descending",
    "{run}.u{i}.logits_probe / logits_lse": "[S, 64] the row at probe_ids; [S] its log-sum-exp",
    "greedy.u0.logits_full.s0": "[152064] one whole row",
    "{run}.u{i}.fed_generate": "int64: the tokens streaming_generate fed (the refused char-limit token is not)",
    "{run}.u{i}.total_ids": "int64: what the unit appended to DuplexCapability.total_ids (incl. </unit>)",
    "{run}.u{i}.tts_text_ids / tts_hidden": "int64 [n] / [n, llm_hidden]: the TTS condition's inputs",
    "{run}.u{i}.tts_condition": "[n + 1, tts_hidden] _convert_results_to_tts_input's rows (last: audio BOS)",
    "{run}.u{i}.tts_rng": "uint8: torch.get_rng_state() right before MiniCPMTTS.generate_chunk",
    "{run}.u{i}.tts_tokens": "int64 [k]: generate_chunk's tokens (k = 25 unless the audio EOS was drawn)",
    "{run}.u{i}.tts_logits_top_values / _top_ids": "[steps, 16]: head_code's raw logits per TTS step",
    "sampled.u0.tts_logits_full": "[2, 6562] the first two TTS steps' whole rows",
    "long.embeds": "[32, 10, llm_hidden] the encoder rows of 32 forced-listen units (inputs pcm16[i % 8])",
    "long.u{28,29,30}.mel": "[80, T] around unit 29, where the Whisper cache resets and the mel buffer slides",
    **tail.TAIL_KEYS,
    **bf16.BF16_KEYS,
}
# The per-unit facts (decision, text, end reason, TTS start position, actions) and each run's settings are in
# the safetensors metadata "meta" and, readable, in minicpmo_tiny_trace.json beside it.


def import_reference(demo: Path):
    sys.path.insert(0, str(demo))
    import MiniCPMO45.configuration_minicpmo as configuration
    import MiniCPMO45.modeling_minicpmo_unified as modeling

    if not Path(modeling.__file__).resolve().is_relative_to(demo.resolve()):
        raise SystemExit(f"imported {modeling.__file__}, not the reference's")
    return configuration, modeling


def _init_std(name: str, shape: torch.Size) -> tuple[float, float]:
    """(mean, std) per tensor: big enough that random logits differ, small enough to stay finite."""
    if name.endswith("bias"):
        return 0.0, 0.1
    if "norm" in name:  # RMSNorm / LayerNorm gains
        return 1.0, 0.1
    if name.endswith("original0"):  # weight_norm's magnitude g of the TTS head: the logit scale
        return 2.0, 0.3
    if "embed_positions" in name:
        return 0.0, 0.2
    if "embed_tokens" in name or "emb_text" in name or "emb_code" in name or "lm_head" in name:
        return 0.0, 1.0
    fan_in = shape[1] * (shape[2] if len(shape) > 2 else 1) if len(shape) > 1 else shape[0]
    return 0.0, fan_in ** -0.5


def build_checkpoint(demo: Path, configuration, modeling) -> None:
    config = configuration.MiniCPMOConfig(
        init_vision=False, init_audio=True, init_tts=True, audio_pool_step=5, audio_chunk_length=1.0,
        audio_config=WHISPER, tts_config=TTS, torch_dtype="bfloat16", **LLM)
    config.architectures = ["MiniCPMO"]
    torch.manual_seed(SEED)
    model = modeling.MiniCPMO(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            mean, std = _init_std(name, param.shape)
            if name.endswith("original0"):
                param.copy_((mean + std * torch.randn(param.shape)).abs())
            else:
                param.copy_(mean + std * torch.randn(param.shape))
    if CKPT.exists():
        shutil.rmtree(CKPT)
    model.to(torch.bfloat16).save_pretrained(CKPT, max_shard_size="2MB", safe_serialization=True)
    for name in TOKENIZER_FILES:
        shutil.copy(demo / "MiniCPMO45" / name, CKPT / name)
    for path in CKPT.iterdir():
        path.chmod(0o644)  # safetensors writes its shards 0600
    index = json.loads((CKPT / "model.safetensors.index.json").read_text())
    prefixes = sorted({key.split(".")[0] for key in index["weight_map"]})
    assert prefixes == ["apm", "audio_projection_layer", "llm", "tts"], prefixes
    size = sum(p.stat().st_size for p in CKPT.iterdir())
    print(f"wrote {CKPT}: {len(index['weight_map'])} tensors, {size} bytes")


# ---------------------------------------------------------------- the trace
UNITS = 6  # units per run; the audio-only run goes past the Whisper cache's 1500 positions
LONG_UNITS = 32
TOP = 64  # logits kept per decode step: the top TOP, the probe ids, the log-sum-exp
TTS_TOP = 16
SYSTEM_TEXT = "Streaming Omni Conversation."  # core/processors/unified.py DuplexView.prepare's default
# The demo server's per-unit call (core/processors/unified.py DuplexView.generate, DuplexConfig's defaults);
# max_new_speak_tokens_per_chunk is not passed there, so streaming_generate's own 20 applies.
GENERATE = dict(decode_mode="sampling", temperature=0.7, top_k=20, top_p=0.8, listen_prob_scale=1.0,
                listen_top_k=None, text_repetition_penalty=1.05, text_repetition_window_size=512,
                length_penalty=1.1)
IDS = dict(listen=151705, speak=151706, tts_bos=151703, tts_eos=151704, chunk_eos=151718, chunk_tts_eos=151721,
           turn_eos=151717, tts_pad=151722, im_end=151645, unit=151683, unit_end=151684)
BIG = 30.0  # a bias that wins both of the decoder's draws
LETTERS = list(range(64, 90))  # "a".."z": one character each, so 19 tokens stay under the 28-character limit


def _bias(unit: int, step: int, token: str | int, value: float = BIG) -> tuple[int, int, int, float]:
    return unit, step, IDS[token] if isinstance(token, str) else token, value


# Each run: decoding overrides, DuplexCapability kwargs, prepare's prompt, the logit-bias schedule
# (unit, decode step, token id, value added to the logits row decode() receives), and per-unit actions.
RUNS: dict[str, dict] = {
    "greedy": dict(generate={"decode_mode": "greedy"}),
    "sampled": dict(),
    "system_prompt": dict(prompt=True),
    # u0 listen (turn ended: allowed); u2 listen while speaking -> tts_bos, then turn_eos + chunk_eos ends
    # the turn; u3 listen; u5 turn_eos then listen: a unit with text that still returns is_listen.
    "listen_rules": dict(bias=[_bias(0, 0, "listen"), _bias(2, 0, "listen"), _bias(2, 2, "turn_eos"),
                               _bias(2, 3, "chunk_eos"), _bias(3, 0, "listen"), _bias(5, 2, "turn_eos"),
                               _bias(5, 3, "listen")]),
    # u0: chunk_eos at the first step (a speak unit with no text: the TTS gets the audio-BOS row alone);
    # u1: chunk_eos at step 3.
    "chunk_eos": dict(bias=[_bias(0, 0, "chunk_eos"), _bias(1, 3, "chunk_eos")]),
    # u1, u2: single letters favoured at every step, so the 20-decode limit ends the unit, not the characters.
    "token_limit": dict(bias=[_bias(u, j, t, 6.0) for u in (1, 2) for j in range(20) for t in LETTERS]),
    "force_listen_count": dict(duplex={"force_listen_count": 3}),
    # u2: the frontend's break (set_break_event, a no-op for generation) with force_listen_override while
    # speaking: turn_eos is fed first; u3: override again with the turn already ended; u4 speaks again.
    "break": dict(actions={2: ["set_break", "override"], 3: ["override"], 4: ["clear_break"]}),
    # duplex_generate's own defaults (listen_top_k=5): the decoder's "listen" is the tokenizer's eos
    # (<|im_end|>); in the top 5 it is returned without the second draw and taken as a text token.
    "listen_top_k": dict(generate={"listen_top_k": 5, "listen_prob_scale": 1.5},
                         bias=[_bias(1, 2, "im_end", 12.0), _bias(2, 1, "im_end", 12.0)]),
}


def load_audio(units: int) -> torch.Tensor:
    """assets/speech_sample.wav (24 kHz) resampled to 16 kHz and rounded to int16: [units, 16000]."""
    import soundfile as sf
    from scipy.signal import resample_poly

    speech, rate = sf.read(ROOT / "assets" / "speech_sample.wav", dtype="float64")
    assert rate == 24000
    pcm = resample_poly(speech, 2, 3)[: units * 16000]
    return torch.from_numpy((pcm * 32768).round().clip(-32768, 32767).astype("int16")).view(units, 16000)


def build_processor(configuration_dir: Path):
    """The processor as MiniCPMOProcessor.from_pretrained would build it, without tokenizer.json or
    trust_remote_code: the reference's own classes over the checkpoint's files."""
    from MiniCPMO45.processing_minicpmo import MiniCPMAAudioProcessor, MiniCPMOProcessor, MiniCPMVImageProcessor
    from MiniCPMO45.tokenization_minicpmo_fast import MiniCPMOTokenizerFast

    pre = json.loads((configuration_dir / "preprocessor_config.json").read_text())
    tokenizer = MiniCPMOTokenizerFast.from_pretrained(str(configuration_dir))
    return MiniCPMOProcessor(image_processor=MiniCPMVImageProcessor(**pre),
                             audio_processor=MiniCPMAAudioProcessor(**pre), tokenizer=tokenizer,
                             audio_pool_step=pre["audio_pool_step"])


class Recorder:
    """Wraps the reference's objects from outside (instance attributes only) to record each unit."""

    def __init__(self, model, duplex, bias: list[tuple[int, int, int, float]], probe: torch.Tensor):
        self.model, self.duplex, self.probe = model, duplex, probe
        self.bias: dict[tuple[int, int], list[tuple[int, float]]] = {}
        for unit, step, token, value in bias:
            self.bias.setdefault((unit, step), []).append((token, value))
        self.unit = -1
        self.fed: list[int] = []  # the LLM cache's positions: token ids, -1 for audio rows
        self.units: list[dict] = []
        self._embedded: tuple[torch.Tensor, list[int]] | None = None
        decoder, tts = duplex.decoder, model.tts
        for obj, name in ((decoder, "decode"), (decoder, "feed"), (decoder, "embed_token"), (decoder, "embed_tokens"),
                          (model, "get_audio_embedding_streaming"), (duplex, "_convert_results_to_tts_input"),
                          (tts, "generate_chunk")):
            setattr(obj, name, getattr(self, "_" + name.lstrip("_"))(getattr(obj, name)))
        self.tts_logits: list[torch.Tensor] = []
        tts.head_code[0].register_forward_hook(
            lambda mod, args, out: self.tts_logits.append(out[0, -1].detach().clone()))

    @property
    def cur(self) -> dict:
        return self.units[self.unit]

    def begin_unit(self, unit: int) -> None:
        self.unit = unit
        self.units.append({"steps": [], "tokens": [], "fed_start": len(self.fed)})

    def _embed_token(self, original):
        def wrapped(tid):
            out = original(tid)
            self._embedded = (out, [int(tid)])
            return out
        return wrapped

    def _embed_tokens(self, original):
        def wrapped(token_ids):
            out = original(token_ids)
            self._embedded = (out, [int(t) for t in token_ids])
            return out
        return wrapped

    def _feed(self, original):
        def wrapped(embeds, return_logits=False):
            if self._embedded is not None and embeds is self._embedded[0]:
                self.fed += self._embedded[1]
            else:
                self.fed += [-1] * embeds.shape[0]
            self._embedded = None
            return original(embeds, return_logits=return_logits)
        return wrapped

    def _decode(self, original):
        def wrapped(logits, **kwargs):
            step = len(self.cur["steps"])
            raw = logits.detach().clone()
            biased = logits.clone()
            for token, value in self.bias.get((self.unit, step), []):
                biased[0, token] += value
            token = original(biased, **kwargs)
            self.cur["steps"].append((raw[0], int(token.item())))
            return token
        return wrapped

    def _get_audio_embedding_streaming(self, original):
        def wrapped(data, **kwargs):
            out = original(data, **kwargs)
            self.cur["mel"] = data["audio_features"][0].detach().clone()
            self.cur["embeds"] = torch.cat([t for g in out for t in g], dim=0).detach().clone()
            return out
        return wrapped

    def _convert_results_to_tts_input(self, original):
        def wrapped(results):
            out = original(results)
            self.cur["tts_text_ids"] = torch.tensor([r[0] for r in results], dtype=torch.int64)
            self.cur["tts_hidden"] = (torch.cat([r[1].reshape(1, -1) for r in results]) if results
                                      else torch.zeros(0, self.model.config.hidden_size))
            self.cur["tts_condition"] = out[0].detach().clone()
            return out
        return wrapped

    def _generate_chunk(self, original):
        def wrapped(**kwargs):
            self.cur["tts_rng"] = torch.get_rng_state()
            self.cur["tts_text_start_pos"] = int(kwargs["text_start_pos"])
            self.cur["tts_min_new_tokens"] = int(kwargs["min_new_tokens"])
            self.tts_logits = []
            tokens, cache = original(**kwargs)
            self.cur["tts_tokens"] = tokens[0, :, 0].clone()
            self.cur["tts_logits"] = torch.stack(self.tts_logits)
            return tokens, cache
        return wrapped


def _step_tensors(prefix: str, steps: list, probe: torch.Tensor, full_rows: tuple[int, ...]) -> dict:
    if not steps:
        return {}
    rows = torch.stack([row for row, _ in steps])
    top = rows.topk(TOP, dim=-1)
    out = {f"{prefix}.step_tokens": torch.tensor([t for _, t in steps], dtype=torch.int64),
           f"{prefix}.logits_top_values": top.values, f"{prefix}.logits_top_ids": top.indices,
           f"{prefix}.logits_probe": rows[:, probe], f"{prefix}.logits_lse": rows.logsumexp(-1)}
    for step in full_rows:
        if step < len(steps):
            out[f"{prefix}.logits_full.s{step}"] = rows[step].clone()
    return out


def run(modeling, model, name: str, spec: dict, audio: torch.Tensor, units: int, probe: torch.Tensor, hook=None):
    """One session as the demo server runs it (cleanup's reset_session, prepare, then per unit
    prefill -> generate -> finalize), seeded once after prepare. `hook(model, duplex, recorder)`
    wraps more before prepare; spec["prepare"] adds prepare's arguments."""
    model.reset_session(reset_token2wav_cache=True)  # the server's cleanup between sessions
    # A fresh processor per session: its feature extractor's log-norm mode is stateful (see the notes).
    model.processor = build_processor(CKPT)
    duplex = modeling.DuplexCapability(model=model, device="cpu", **spec.get("duplex", {}))
    rec = Recorder(model, duplex, spec.get("bias", []), probe)
    if hook is not None:
        hook(model, duplex, rec)
    rec.begin_unit(-1)  # prepare's feeds
    prompt = dict(spec.get("prepare", {}))
    if spec.get("prompt"):
        ref = (audio[6:8].reshape(-1).float() / 32768).numpy()
        prompt = dict(prefix_system_prompt=f"<|im_start|>system\n{SYSTEM_TEXT}\n<|audio_start|>",
                      suffix_system_prompt="<|audio_end|><|im_end|>", ref_audio=ref)
        original = model.get_audio_embedding

        def ref_embedding(data, **kwargs):
            out = original(data, **kwargs)
            rec.cur["ref_mel"] = data["audio_features"][0].detach().clone()
            rec.cur["ref_embeds"] = torch.cat([t for g in out for t in g]).detach().clone()
            return out
        model.get_audio_embedding = ref_embedding
    duplex.prepare(**prompt)
    model.__dict__.pop("get_audio_embedding", None)
    prepared = rec.units.pop()
    prepared["ids"] = list(rec.fed)
    rec.units.clear()
    torch.manual_seed(SEED)
    gen = {**GENERATE, **spec.get("generate", {})}
    results = []
    for unit in range(units):
        actions = spec.get("actions", {}).get(unit, [])
        if "set_break" in actions:
            duplex.set_break_event()
        if "clear_break" in actions:
            duplex.clear_break_event()
        rec.begin_unit(unit)
        ids_before = len(duplex.total_ids)
        ok = duplex.streaming_prefill(audio_waveform=(audio[unit % len(audio)].float() / 32768).numpy())
        assert ok["success"], ok
        rec.cur["rng"] = torch.get_rng_state()
        rec.cur["fed_prefill"] = len(rec.fed)
        turn_ended = duplex.current_turn_ended
        result = duplex.streaming_generate(**gen, force_listen_override="override" in actions)
        rec.cur["fed_generate"] = len(rec.fed)
        duplex.finalize_unit()
        rec.cur["total_ids"] = duplex.total_ids[ids_before:]
        results.append(dict(unit=unit, is_listen=bool(result["is_listen"]), end_of_turn=bool(result["end_of_turn"]),
                            text=result["text"], n_tokens=int(result["n_tokens"]),
                            n_tts_tokens=int(result["n_tts_tokens"]), turn_ended_before=bool(turn_ended),
                            break_set=duplex.is_break_set(), actions=actions))
    for obj, attr in ((model, "get_audio_embedding_streaming"), (model.tts, "generate_chunk")):
        obj.__dict__.pop(attr, None)
    model.tts.head_code[0]._forward_hooks.clear()
    return prepared, rec, results


def _end_reason(unit: dict, fed_tokens: list[int], force_listen: bool) -> str:
    """Why the unit's decoding stopped, told from what was decoded and what was fed."""
    if force_listen:
        return "force_listen"
    steps = [t for _, t in unit["steps"]]
    last = steps[-1]
    names = {v: k for k, v in IDS.items()}
    if last in (IDS["listen"], IDS["chunk_eos"], IDS["chunk_tts_eos"]) and (
            last != IDS["listen"] or unit["total_ids"][len(steps) - 1] == IDS["listen"]):
        return names[last]
    if len(fed_tokens) < len(steps):
        return "char_limit"  # the last decoded token was refused, not fed
    return "token_limit"


def record(modeling, model, audio: torch.Tensor, probe: torch.Tensor) -> tuple[dict, dict]:
    trace: dict[str, torch.Tensor] = {"audio.pcm16": audio.clone(), "probe_ids": probe.clone()}
    meta: dict = {"runs": {}}
    audio_rows: dict[int, torch.Tensor] = {}
    for name, spec in RUNS.items():
        prepared, rec, results = run(modeling, model, name, spec, audio, UNITS, probe)
        trace[f"{name}.prompt_ids"] = torch.tensor(prepared["ids"], dtype=torch.int64)
        if "ref_embeds" in prepared:
            trace[f"{name}.ref_mel"], trace[f"{name}.ref_embeds"] = prepared["ref_mel"], prepared["ref_embeds"]
        trace[f"{name}.fed_ids"] = torch.tensor(rec.fed, dtype=torch.int64)
        bias = spec.get("bias", [])
        trace[f"{name}.bias_at"] = torch.tensor([b[:3] for b in bias], dtype=torch.int64).view(-1, 3)
        trace[f"{name}.bias_value"] = torch.tensor([b[3] for b in bias], dtype=torch.float32)
        force_count = spec.get("duplex", {}).get("force_listen_count", 0)
        for unit, (u, res) in enumerate(zip(rec.units, results)):
            p = f"{name}.u{unit}"
            if unit in audio_rows:  # the audio path does not depend on the run
                assert torch.equal(audio_rows[unit], u["embeds"]), (name, unit)
            else:
                audio_rows[unit] = u["embeds"]
                trace[f"audio.u{unit}.mel"], trace[f"audio.u{unit}.embeds"] = u["mel"], u["embeds"]
            trace[f"{p}.rng"] = u["rng"]
            trace[f"{p}.total_ids"] = torch.tensor(u["total_ids"], dtype=torch.int64)
            fed_tokens = rec.fed[u["fed_prefill"]:u["fed_generate"]]
            trace[f"{p}.fed_generate"] = torch.tensor(fed_tokens, dtype=torch.int64)
            full = (0,) if name == "greedy" and unit == 0 else ()
            trace.update(_step_tensors(p, u["steps"], probe, full))
            if "tts_tokens" in u:
                trace[f"{p}.tts_text_ids"], trace[f"{p}.tts_hidden"] = u["tts_text_ids"], u["tts_hidden"]
                trace[f"{p}.tts_condition"], trace[f"{p}.tts_rng"] = u["tts_condition"], u["tts_rng"]
                trace[f"{p}.tts_tokens"] = u["tts_tokens"]
                top = u["tts_logits"].topk(TTS_TOP, dim=-1)
                trace[f"{p}.tts_logits_top_values"], trace[f"{p}.tts_logits_top_ids"] = top.values, top.indices
                if name == "sampled" and unit == 0:
                    trace[f"{p}.tts_logits_full"] = u["tts_logits"][:2].clone()
                res.update(tts_text_start_pos=u["tts_text_start_pos"], tts_min_new_tokens=u["tts_min_new_tokens"])
            forced = unit < force_count or "override" in res["actions"]
            res["end_reason"] = _end_reason(u, fed_tokens, forced)
        shown = {k: v for k, v in spec.items() if k != "bias" or len(v) <= 16}  # token_limit's is in the trace
        meta["runs"][name] = dict(spec=shown, units=results,
                                  generate={**GENERATE, **spec.get("generate", {})})
    return trace, meta


def record_long(modeling, model, audio: torch.Tensor) -> dict[str, torch.Tensor]:
    """The audio path alone over LONG_UNITS units (every unit a forced listen), past the Whisper
    cache's reset and the mel buffer's 30 s slide; unit i's input is audio.pcm16[i % 8]."""
    spec = {"duplex": {"force_listen_count": LONG_UNITS}}
    _, rec, _ = run(modeling, model, "long", spec, audio, LONG_UNITS, torch.zeros(1, dtype=torch.int64))
    out = {"long.embeds": torch.stack([u["embeds"] for u in rec.units])}
    for unit in (28, 29, 30):  # unit 29 both resets the Whisper cache and slides the mel buffer
        out[f"long.u{unit}.mel"] = rec.units[unit]["mel"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("demo", type=Path, help="a checkout of github.com/OpenBMB/MiniCPM-o-Demo")
    parser.add_argument("--commit", default="28b60cf", help="the checkout's commit id, recorded with the trace")
    parser.add_argument("--checkpoint-only", action="store_true", help="write the checkpoint, not the trace")
    args = parser.parse_args()
    configuration, modeling = import_reference(args.demo)
    build_checkpoint(args.demo, configuration, modeling)
    if args.checkpoint_only:
        return
    torch.set_num_threads(1)
    model = modeling.MiniCPMO.from_pretrained(str(CKPT), torch_dtype=torch.float32).eval()
    audio = load_audio(8)
    gen = torch.Generator().manual_seed(SEED)
    probe = torch.cat([torch.tensor(sorted(set(IDS.values())), dtype=torch.int64),
                       torch.randperm(LLM_VOCAB, generator=gen)[:TOP - len(set(IDS.values()))]])
    trace, meta = record(modeling, model, audio, probe)
    trace.update(record_long(modeling, model, audio))
    tail_trace, meta["tail"] = tail.record(run, RUNS, GENERATE, modeling, model, audio, UNITS, probe,
                                            SYSTEM_TEXT)
    trace.update(tail_trace)
    bf16_trace, meta["bf16"] = bf16.record(run, RUNS, modeling, CKPT, trace, audio, UNITS, probe)  # its own noise
    trace.update(bf16_trace)
    trace = {k: v.contiguous() for k, v in trace.items()}
    meta.update(reference="https://github.com/OpenBMB/MiniCPM-o-Demo", commit=args.commit, seed=SEED,
                torch=torch.__version__, ids=IDS, top=TOP, tts_top=TTS_TOP, units=UNITS, long_units=LONG_UNITS)
    save_file(trace, str(TRACE), metadata={"meta": json.dumps(meta)})
    TRACE.chmod(0o644)
    TRACE.with_suffix(".json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {TRACE}: {len(trace)} tensors, {TRACE.stat().st_size} bytes")


if __name__ == "__main__":
    main()
