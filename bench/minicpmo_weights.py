"""A MiniCPM-o 4.5 checkpoint with random weights for bench.minicpmo, written by the reference's
own classes: `MiniCPMO` (OpenBMB MiniCPM-o-Demo, MiniCPMO45/) built at the real sizes (or tiny
ones), seeded and scaled so that logits vary, saved by its `save_pretrained` in the Hub layout
with the tokenizer files beside it, plus a full-size random Step-Audio2 tail and a prepared voice
prompt in assets/token2wav/. The GPU machine has no Hub access, so the folder is made there.

Built on the meta device and materialised where it is initialised (the GPU for the full size:
seconds instead of minutes of CPU random numbers), then written from the CPU."""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import torch

LLM_VOCAB = 151748
"""The tokenizer's size: vocab.json's 151643 ids and added_tokens.json's 105 (MiniCPMO45/); the
LLM's own config.json is on the Hub, which the GPU machine cannot reach."""
FULL = {
    # Qwen3-8B (the demo's README: "built on SigLip2, Whisper-medium, CosyVoice2 and Qwen3-8B"),
    # with Qwen3-8B's published config.json numbers.
    "llm": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, rope_theta=1000000.0, rms_norm_eps=1e-6,
                max_position_embeddings=40960, tie_word_embeddings=False, vocab_size=LLM_VOCAB,
                bos_token_id=151643, eos_token_id=151645),  # generation_config.json's ids
    # Whisper-medium's encoder (openai/whisper-medium): d_model 1024, 24 layers of 16 heads, ffn 4096,
    # 80 mels, 1500 positions. The decoder numbers are whisper-medium's too (the encoder ignores them).
    "whisper": dict(d_model=1024, encoder_layers=24, encoder_attention_heads=16, encoder_ffn_dim=4096,
                    num_mel_bins=80, max_source_positions=1500, decoder_layers=24, decoder_attention_heads=16,
                    decoder_ffn_dim=4096),
    # MiniCPMTTSConfig's defaults (configuration_minicpmo.py; docs/en/model.md lists the same: hidden 768,
    # 20 layers, 12 heads) with what 4.5 changes: llm_dim is the LLM's hidden size (projector_semantic
    # reads the LLM's hidden states), 6562 audio tokens (Step-Audio2's 6561 plus the EOS,
    # DuplexCapability's tts_eos_token = num_audio_tokens - 1), text embeddings over 152064 ids,
    # audio BOS 151687, the Step-Audio2 tail (init_token2wav(streaming=True)).
    "tts": dict(llm_dim=4096, hidden_size=768, intermediate_size=3072, num_attention_heads=12,
                num_key_value_heads=12, num_hidden_layers=20, num_audio_tokens=6562, num_text_tokens=152064,
                audio_bos_token_id=151687, projector_type="mlp", backbone_model="llama",
                audio_tokenizer_type="s3tokenizer_step_audio"),
}
TINY = {
    "llm": {**FULL["llm"], **dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=16)},
    "whisper": {**FULL["whisper"], **dict(d_model=64, encoder_layers=2, encoder_attention_heads=4,
                                          encoder_ffn_dim=256, decoder_layers=2, decoder_attention_heads=4,
                                          decoder_ffn_dim=256)},
    "tts": {**FULL["tts"], **dict(llm_dim=64, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                  num_key_value_heads=2, num_hidden_layers=2)},
}
SIZES = {"full": FULL, "tiny": TINY}
TOKENIZER_FILES = ("vocab.json", "merges.txt", "added_tokens.json", "special_tokens_map.json",
                   "tokenizer_config.json", "preprocessor_config.json")
TAIL = "assets/token2wav"
VOICE = "voice.safetensors"
TAIL_VOCAB = 6561
WRITTEN = "written.json"  # in a kept checkpoint: its counts, written last


def import_reference(demo: Path):
    """The reference's configuration and modeling modules from the checkout `demo` (a copy of
    its MiniCPMO45/ folder is enough), never an installed copy."""
    demo = Path(demo).resolve()
    if not (demo / "MiniCPMO45" / "modeling_minicpmo_unified.py").is_file():
        raise ValueError(f"{demo}: no MiniCPMO45/modeling_minicpmo_unified.py (a MiniCPM-o-Demo checkout)")
    sys.path.insert(0, str(demo))
    import MiniCPMO45.configuration_minicpmo as configuration
    import MiniCPMO45.modeling_minicpmo_unified as modeling

    if not Path(modeling.__file__).resolve().is_relative_to(demo):
        raise ValueError(f"imported {modeling.__file__}, not the reference at {demo}")
    return configuration, modeling


def _init(name: str, shape: torch.Size, hidden: int) -> tuple[float, float]:
    """(mean, std) per tensor: linear layers keep their activations' scale (std fan_in^-1/2),
    norms' gains near 1; the LM head gives logits of std about 3, the TTS head's gains about 3.5
    (its EOS row is zeroed apart: `write_checkpoint`)."""
    if name.endswith("bias"):
        return 0.0, 0.1
    if "norm" in name:
        return 1.0, 0.1
    if name.endswith("original0"):  # weight_norm's magnitude g of the TTS head: the logits' scale
        return 3.5, 0.3
    if "embed_positions" in name:
        return 0.0, 0.2
    if name == "llm.lm_head.weight":
        return 0.0, 3.0 / hidden ** 0.5
    if "embed_tokens" in name or "emb_text" in name or "emb_code" in name:
        return 0.0, 1.0
    fan_in = shape[1] * (shape[2] if len(shape) > 2 else 1) if len(shape) > 1 else shape[0]
    return 0.0, fan_in ** -0.5


def build_model(configuration, modeling, size: str, device: torch.device, seed: int):
    """The reference's MiniCPMO at `size`, in bf16 on `device`, every parameter drawn from a
    generator seeded with `seed`."""
    sizes = SIZES[size]
    config = configuration.MiniCPMOConfig(
        init_vision=False, init_audio=True, init_tts=True, audio_pool_step=5, audio_chunk_length=1.0,
        audio_config=sizes["whisper"], tts_config=sizes["tts"], torch_dtype="bfloat16", **sizes["llm"])
    config.architectures = ["MiniCPMO"]
    with torch.device("meta"):
        model = modeling.MiniCPMO(config).eval()
    model = model.to(torch.bfloat16).to_empty(device=device)
    generator = torch.Generator(device).manual_seed(seed)
    hidden = sizes["llm"]["hidden_size"]
    eos = sizes["tts"]["num_audio_tokens"] - 1
    with torch.no_grad():
        for name, param in model.named_parameters():
            mean, std = _init(name, param.shape, hidden)
            param.normal_(mean, std, generator=generator)
            if name.endswith("original0"):
                param.abs_()
                # The TTS's EOS logit is 0 whatever the state while the others spread with std ~3.5:
                # it is practically never drawn, so every speaking unit runs its 26 TTS steps on both sides.
                param[eos] = 0
        for buffer in model.buffers():
            buffer.zero_()  # none is saved (the rotary tables are recomputed), but none is left unset
    return model


def write_checkpoint(demo: Path, folder: Path, size: str, device: torch.device, seed: int) -> dict:
    """The checkpoint in `folder` (created): shards, index and config by `save_pretrained`, the
    tokenizer files copied from the reference's MiniCPMO45/. Returns counts for the report."""
    configuration, modeling = import_reference(demo)
    model = build_model(configuration, modeling, size, device, seed)
    params = sum(p.numel() for p in model.parameters())
    model = model.to("cpu")  # the writer reads host tensors
    if device.type == "cuda":
        torch.cuda.empty_cache()
    shard = "5GB" if size == "full" else "2MB"
    model.save_pretrained(folder, max_shard_size=shard, safe_serialization=True)
    del model
    for name in TOKENIZER_FILES:
        shutil.copy(Path(demo) / "MiniCPMO45" / name, folder / name)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    prefixes = sorted({key.split(".")[0] for key in index["weight_map"]})
    if prefixes != ["apm", "audio_projection_layer", "llm", "tts"]:
        raise RuntimeError(f"unexpected checkpoint parts {prefixes}")
    return {"parameters": params, "tensors": len(index["weight_map"]),
            "bytes": sum(p.stat().st_size for p in folder.iterdir() if p.is_file())}


def random_checkpoint(demo: Path, size: str, device: torch.device, seed: int, tail: bool, tmp: Path,
                      keep_in: Path | None = None) -> tuple[Path, dict]:
    """The random checkpoint of `size` and `seed` (with the tail or not), in `tmp`; or, with `keep_in`, kept
    there for the next run on the same machine (writing full size takes most of a minute a call), written
    in `tmp` and moved there once whole, so a run cut off leaves none. Returns it and its counts."""
    name = f"MiniCPM-o-4_5-random-{size}-{seed}" + ("" if tail else "-text")
    kept = keep_in / name if keep_in is not None else None
    if kept is not None and (kept / WRITTEN).exists():
        return kept, {**json.loads((kept / WRITTEN).read_text()), "kept": True}
    began = time.perf_counter()
    folder = tmp / name
    info = write_checkpoint(demo, folder, size, device, seed)
    if tail:
        write_tail(folder, seed)
    info["write_s"] = time.perf_counter() - began
    if kept is None:
        return folder, info
    (folder / WRITTEN).write_text(json.dumps(info))
    folder.rename(kept)
    return kept, info


def write_tail(folder: Path, seed: int) -> None:
    """The full-size random Step-Audio2 tail (bench.stock_token2wav) and the prepared voice
    prompt (bench.token2wav.bench_prompt: 3 s) both sides read from it."""
    from safetensors.torch import save_file

    from .stock_token2wav import write_model_dir
    from .token2wav import bench_prompt

    tail = folder / TAIL
    tail.mkdir(parents=True, exist_ok=True)
    write_model_dir(tail, seed)
    prompt = bench_prompt(TAIL_VOCAB, seed)
    save_file({"tokens": prompt.tokens.contiguous(), "speaker": prompt.speaker.contiguous(),
               "mel": prompt.mel.contiguous()}, str(tail / VOICE))
