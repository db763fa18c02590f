"""Record a golden trace of NVIDIA's PersonaPlex runtime on the bundled demo model, for
tests/test_personaplex_golden.py: the fork's own code, not our restatement of it.

The fork (github.com/NVIDIA/personaplex, its `moshi` package) runs the demo model with a
16-frame context, so the KV ring wraps: the voice prompt, silence, a role prompt, silence, then
the bundled speech frame by frame, greedy and seeded. Recorded: input frames, tokens and PCM.
Nothing in the fork's code is changed; two of its constants follow the demo model (see `main`
and `fork_mimi`): the prompt frames' codes and the Mimi it builds.

    python packaging/make_personaplex_golden.py PATH/TO/personaplex [--commit SHA]

(The fork needs sphn, tqdm and einops beside torch.)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import sentencepiece
import soundfile as sf
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "assets" / "demo_model"
OUT = ROOT / "tests" / "golden" / "personaplex_demo.safetensors"
CONTEXT = 16  # frames: the prompts alone outrun it
FRAMES = 30
SEED = 20261130
ROLE = "Be brief."
VOICE = "DEMO"
FRAME_SIZE = 1920


def fork_mimi(moshi):
    from safetensors.torch import load_model

    cfg = json.loads((DEMO / "mimi_config.json").read_text())
    encoder = moshi.modules.SEANetEncoder(**cfg["seanet"])
    decoder = moshi.modules.SEANetDecoder(**cfg["seanet"])
    encoder_transformer = moshi.modules.transformer.ProjectedTransformer(device="cpu", **cfg["transformer"])
    decoder_transformer = moshi.modules.transformer.ProjectedTransformer(device="cpu", **cfg["transformer"])
    quantizer = moshi.quantization.SplitResidualVectorQuantizer(**cfg["quantizer"])
    mimi = moshi.models.MimiModel(
        encoder, decoder, quantizer, channels=1, sample_rate=cfg["sample_rate"], frame_rate=cfg["frame_rate"],
        encoder_frame_rate=cfg["sample_rate"] / encoder.hop_length, causal=True, resample_method="conv",
        encoder_transformer=encoder_transformer, decoder_transformer=decoder_transformer).eval()
    load_model(mimi, str(DEMO / "tokenizer-e351c8d8-checkpoint125.safetensors"))
    mimi.set_num_codebooks(8)
    return mimi


def fork_lm(moshi, config: dict):
    from safetensors.torch import load_file

    # Our metadata, and the end-padding id, which the fork fixes at 0 (the demo's value too).
    assert config["existing_text_end_padding_id"] == 0
    dropped = ("model_id", "duplexcadence_prompt_tokens", "existing_text_end_padding_id")
    kwargs = {k: v for k, v in config.items() if k not in dropped}
    lm = moshi.models.LMModel(device="cpu", dtype=torch.float32, **{**kwargs, "context": CONTEXT})
    state = {k: v.float() for k, v in load_file(str(DEMO / "model.safetensors")).items()}
    lm.load_state_dict(state, strict=True)
    return lm.eval()


@torch.no_grad()
def run(moshi, lm, mimi, role_tokens: list[int], user: np.ndarray, greedy: bool) -> dict[str, torch.Tensor]:
    gen = moshi.models.LMGen(lm, device="cpu", use_sampling=not greedy, temp=0.8, temp_text=0.7, top_k=250,
                             top_k_text=25, audio_silence_frame_cnt=int(0.5 * mimi.frame_rate),
                             sample_rate=mimi.sample_rate, frame_rate=mimi.frame_rate)
    mimi.streaming_forever(1)
    gen.streaming_forever(1)
    gen.load_voice_prompt_embeddings(str(DEMO / "voices" / f"{VOICE}.pt"))
    # Saved in bf16 as released voices are; the fork feeds them to the LM as they are, which an
    # fp32 LM cannot take: cast to the LM's dtype, as ours does when it loads a voice.
    gen.voice_prompt_embeddings = gen.voice_prompt_embeddings.float()
    gen.text_prompt_tokens = role_tokens
    mimi.reset_streaming()
    gen.reset_streaming()
    torch.manual_seed(SEED)
    gen.step_system_prompts(mimi)
    mimi.reset_streaming()
    tokens, pcm = [], []
    for frame in user:
        codes = mimi.encode(torch.from_numpy(frame).view(1, 1, -1))
        out = gen.step(codes)
        tokens.append(out[0, :, 0].clone())
        pcm.append(mimi.decode(out[:, 1:9])[0, 0].clone())
    return {"tokens": torch.stack(tokens), "pcm": torch.stack(pcm)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fork", type=Path, help="a checkout of github.com/NVIDIA/personaplex")
    parser.add_argument("--commit", required=True, help="the checkout's commit id, recorded with the trace")
    args = parser.parse_args()
    sys.path.insert(0, str(args.fork / "moshi"))
    import moshi
    import moshi.models.lm as lm_module

    if not Path(moshi.__file__).resolve().is_relative_to(args.fork.resolve()):
        raise SystemExit(f"imported {moshi.__file__}, not the fork's moshi")
    config = json.loads((DEMO / "config.json").read_text())
    prompt_codes = config["duplexcadence_prompt_tokens"]
    lm_module.SILENCE_TOKENS = np.array(prompt_codes["silence"], dtype=np.int64)
    lm_module.SINE_TOKENS = np.array(prompt_codes["sine"], dtype=np.int64)
    tokenizer = sentencepiece.SentencePieceProcessor(str(DEMO / "tokenizer_spm_32k_3.model"))
    from moshi.offline import wrap_with_system_tags
    role_tokens = tokenizer.encode(wrap_with_system_tags(ROLE))

    speech, rate = sf.read(ROOT / "assets" / "speech_sample.wav", dtype="float32")
    assert rate == 24000
    user = speech[:FRAMES * FRAME_SIZE].reshape(FRAMES, FRAME_SIZE)
    lm, mimi = fork_lm(moshi, config), fork_mimi(moshi)
    trace = {"user_pcm": torch.from_numpy(user.copy())}
    for mode in ("greedy", "sampled"):
        for key, value in run(moshi, lm, mimi, role_tokens, user, mode == "greedy").items():
            trace[f"{mode}.{key}"] = value.contiguous()
    meta = {"fork": "https://github.com/NVIDIA/personaplex", "commit": args.commit, "context": CONTEXT,
            "seed": SEED, "role": ROLE, "voice": VOICE, "frames": FRAMES, "torch": torch.__version__,
            "sampling": "text temperature 0.7 top-k 25, audio temperature 0.8 top-k 250"}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file(trace, str(OUT), metadata={k: str(v) for k, v in meta.items()})
    print(f"wrote {OUT}: {json.dumps(meta)}")


if __name__ == "__main__":
    main()
