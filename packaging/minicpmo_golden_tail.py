"""The token2wav tail of the MiniCPM-o golden trace (imported by make_minicpmo_golden.py): runs that
speak, end turns and break, the reference's DuplexCapability driving the stock Step-Audio2 Token2wav
(minicpmo-utils 1.0.7) as MiniCPMO.init_token2wav(streaming=True) sets it up (5 flow steps), and the
waveform each unit returned. The tail is small and random, written by bench.stock_token2wav's
write_model_dir from TAIL_SEED; its DiT stays full size (the stock decoder's buffers only fit that), so
flow.pt is ~460 MB and the test writes it again from the seed instead of a shipped copy. The voice
prompt is prepared (the stock front end needs ONNX models that are not here): the runtime's
_prepare_prompt hands it to the reference's own _init_token2wav_cache. The system prompt is the one
our conversation feeds (the demo's text, no reference audio). Keys: TAIL_KEYS."""
from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

import torch
import torch._dynamo  # noqa: F401  before the stock's stand-ins: importing dynamo asks each module's spec

ROOT = Path(__file__).resolve().parents[1]
TAIL_SEED = 20260502
TAIL_STEPS = 5  # MiniCPMO.init_token2wav's n_timesteps: the duplex model calls it with the default
VOICE = "voice"  # the prepared prompt's name: prepare's prompt_wav_path, the stock runtime's cache key
PROMPT_TOKENS = 10
NOISE_FRAMES = 256  # flow noise a stream reads: its offset stays under prompt + 100 frames, plus a chunk's
TTS_EOS = 6561  # num_audio_tokens - 1
BIG = 30.0
# tests/test_token2wav_parity.py's small conformer and vocoder, the vocabulary kept whole: the TTS draws
# speech tokens up to 6560, and our loader refuses a tail that does not cover them.
SMALL_FLOW = {"output_size: 512": "output_size: 64", "input_size: 512\n        pre": "input_size: 64\n        pre",
              "attention_heads: 8": "attention_heads: 2", "linear_units: 2048": "linear_units: 128",
              "num_blocks: 6": "num_blocks: 2", "num_up_blocks: 4": "num_up_blocks: 2",
              "    input_size: 512\n    output_size: 80": "    input_size: 64\n    output_size: 80"}
SMALL_VOCODER = {"base_channels: 512": "base_channels: 64", "cond_channels: 512": "cond_channels: 64"}
# Each tail run: the RUNS entry it repeats (its LLM bias and actions) and a bias on the TTS head's logits
# (unit, TTS step, token, value): an early audio EOS where min_new_tokens is 0 (a turn's first TTS unit).
TAIL_RUNS = {
    "tail_sampled": ("sampled", [(0, 10, TTS_EOS, BIG)]),  # 10 speech tokens: 0.4 s, left-padded to 1 s
    "tail_listen_rules": ("listen_rules", []),  # a turn's end flushes (last_chunk); the next turn starts anew
    "tail_break": ("break", []),  # the break resets the tail (its buffer dropped), not the TTS
    "tail_chunk_eos": ("chunk_eos", [(0, 2, TTS_EOS, BIG)]),  # 2 speech tokens: no audio, 5 buffered after
}
TAIL_KEYS = {
    "tail.prompt.tokens / speaker / mel": "int32 [10], [192], [20, 80]: the prepared voice prompt",
    "tail.flow_noise": "[80, 256] the stock flow's rand_noise (first frames), to check a rebuilt tail",
    "{tail_run}.bias_at / bias_value": "as {run}'s: the bias on the logits decode receives",
    "{tail_run}.tts_bias_at / tts_bias_value": "int64 [n, 3] (unit, TTS step, token), [n]: on head_code's row",
    "{tail_run}.u{i}.tts_tokens": "int64 [k]: the unit's speech tokens, what the tail was given",
    "{tail_run}.u{i}.wav": "[n] the audio_waveform the unit returned (24 kHz, int16 / 32768); absent: None",
}


def _replaced(text: str, changes: dict[str, str]) -> str:
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def tail_yaml() -> tuple[str, str]:
    """flow.yaml and config.yaml of the small tail."""
    from bench.stock_token2wav import FLOW_YAML, VOCODER_YAML
    return _replaced(FLOW_YAML, SMALL_FLOW), _replaced(VOCODER_YAML, SMALL_VOCODER)


def weights_digest(*modules: torch.nn.Module) -> str:
    """sha256 over the modules' state dicts (names and float32 bytes): the test's rebuilt tail must equal it."""
    digest = hashlib.sha256()
    for module in modules:
        for name, tensor in module.state_dict().items():
            digest.update(name.encode())
            digest.update(tensor.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()


def voice_prompt() -> dict[str, torch.Tensor]:
    """The prepared prompt: speech tokens, a CAM++-sized speaker embedding, 2 mel frames per token."""
    g = torch.Generator().manual_seed(TAIL_SEED)
    return {"tokens": torch.randint(0, TTS_EOS, (PROMPT_TOKENS,), generator=g, dtype=torch.int32),
            "speaker": torch.randn(192, generator=g), "mel": torch.randn(2 * PROMPT_TOKENS, 80, generator=g)}


def build_runtime(folder: Path, prompt: dict[str, torch.Tensor]):
    """The stock Token2wav over the tail written in `folder` (start_stock_stream's injection, done where
    the reference asks for it: `_prepare_prompt(VOICE)` returns the prepared prompt)."""
    sys.path.insert(0, str(ROOT))
    from bench.stock_token2wav import stock_token2wav_runtime, write_model_dir

    flow, hift = write_model_dir(folder, TAIL_SEED, *tail_yaml())
    runtime = stock_token2wav_runtime(flow, hift, TAIL_STEPS)
    lens = torch.tensor([PROMPT_TOKENS], dtype=torch.int32)
    prepared = (prompt["tokens"][None], lens, prompt["speaker"][None], prompt["mel"][None], lens * 2)

    def prepare_prompt(prompt_wav):
        assert prompt_wav == VOICE, prompt_wav
        return prepared
    runtime._prepare_prompt = prepare_prompt
    return runtime, flow, hift


class TailRecorder:
    """run()'s hook for a tail run: wraps the duplex object's token2wav steps and the runtime's stream
    from outside, and adds the run's TTS bias to head_code's output (after the recorder's own hook)."""

    def __init__(self, runtime):
        self.rec, self.tts_bias = None, {}
        stream = runtime.stream

        def recorded_stream(tokens, prompt_wav=None, last_chunk=False, return_waveform=False):
            state = torch.get_rng_state()
            out = stream(tokens, prompt_wav=prompt_wav, last_chunk=last_chunk, return_waveform=return_waveform)
            # The tail draws nothing, so the LLM's and the TTS's draws stay the conversation's.
            assert torch.equal(state, torch.get_rng_state())
            self.rec.cur.setdefault("pushes", []).append([len(tokens), bool(last_chunk), len(out) // 2])
            return out
        runtime.stream = recorded_stream

    def __call__(self, model, duplex, rec) -> None:
        self.rec = rec
        waveform, reset = duplex._generate_waveform_from_tokens, duplex._reset_token2wav_for_new_turn

        def recorded_waveform(new_tokens, prompt_wav_path, is_last_chunk=False, force_flush=False):
            out = waveform(new_tokens, prompt_wav_path, is_last_chunk, force_flush=force_flush)
            rec.cur["wav"] = None if out is None else torch.from_numpy(out.copy())
            rec.cur["buffer_after"] = len(duplex.token2wav_buffer)
            return out

        def recorded_reset():
            rec.cur["resets"] = rec.cur.get("resets", 0) + 1
            reset()
        duplex._generate_waveform_from_tokens = recorded_waveform
        duplex._reset_token2wav_for_new_turn = recorded_reset

        def bias(module, args, out):
            step = len(rec.tts_logits) - 1  # the recorder's hook, registered first, has appended this step's
            added = self.tts_bias.get((rec.unit, step))
            if added:
                out = out.clone()
                for token, value in added:
                    out[:, -1, token] += value
            return out
        model.tts.head_code[0].register_forward_hook(bias)


def record(run, runs: dict, generate: dict, modeling, model, audio: torch.Tensor, units: int,
           probe: torch.Tensor, system_text: str) -> tuple[dict[str, torch.Tensor], dict]:
    """The tail runs (`run` and `runs`, `generate`: the golden script's session, RUNS, GENERATE): their
    trace tensors and their meta (the tail's recipe; per run its units' facts, and per unit `pushes`:
    [tokens, last_chunk, samples] per stock stream call, `padded`: zeros put in front)."""
    prompt = voice_prompt()
    with tempfile.TemporaryDirectory() as tmp:
        runtime, flow, hift = build_runtime(Path(tmp), prompt)
    flow_yaml, vocoder_yaml = tail_yaml()
    trace = {f"tail.prompt.{k}": v for k, v in prompt.items()}
    trace["tail.flow_noise"] = flow.decoder.rand_noise[0, :, :NOISE_FRAMES].clone()
    meta = dict(seed=TAIL_SEED, steps=TAIL_STEPS, voice=VOICE, flow_yaml=flow_yaml, vocoder_yaml=vocoder_yaml,
                weights_sha256=weights_digest(flow, hift), runs={})
    model.tts.audio_tokenizer = runtime
    recorder = TailRecorder(runtime)
    prepare = dict(prefix_system_prompt=f"<|im_start|>system\n{system_text}\n<|audio_start|>",
                   suffix_system_prompt="<|audio_end|><|im_end|>", prompt_wav_path=VOICE)
    # The stock encoder wraps a method in torch.compile(backend="eager"): the same computation, untraced.
    with torch.compiler.set_stance("force_eager"):
        for name, (source, tts_bias) in TAIL_RUNS.items():
            spec = {**runs[source], "prepare": prepare}
            recorder.tts_bias = {}
            for unit, step, token, value in tts_bias:
                recorder.tts_bias.setdefault((unit, step), []).append((token, value))
            _, rec, results = run(modeling, model, name, spec, audio, units, probe, hook=recorder)
            bias = spec.get("bias", [])
            trace[f"{name}.bias_at"] = torch.tensor([b[:3] for b in bias], dtype=torch.int64).view(-1, 3)
            trace[f"{name}.bias_value"] = torch.tensor([b[3] for b in bias], dtype=torch.float32)
            trace[f"{name}.tts_bias_at"] = torch.tensor([b[:3] for b in tts_bias], dtype=torch.int64).view(-1, 3)
            trace[f"{name}.tts_bias_value"] = torch.tensor([b[3] for b in tts_bias], dtype=torch.float32)
            for unit, (u, res) in enumerate(zip(rec.units, results)):
                if "tts_tokens" in u:
                    trace[f"{name}.u{unit}.tts_tokens"] = u["tts_tokens"]
                    res.update(tts_text_start_pos=u["tts_text_start_pos"], tts_min_new_tokens=u["tts_min_new_tokens"])
                if u.get("wav") is not None:
                    trace[f"{name}.u{unit}.wav"] = u["wav"]
                samples = 0 if u.get("wav") is None else len(u["wav"])
                pushes = u.get("pushes", [])
                res.update(pushes=pushes, tail_resets=u.get("resets", 0), buffer_after=u.get("buffer_after"),
                           wav_samples=samples, padded=samples - sum(p[2] for p in pushes) if samples else 0)
            meta["runs"][name] = dict(source=source, spec={k: v for k, v in spec.items() if k != "prepare"},
                                      prepare=prepare, tts_bias=tts_bias, units=results,
                                      generate={**generate, **spec.get("generate", {})})
    model.tts.audio_tokenizer = None
    return trace, meta
