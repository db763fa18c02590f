"""Build the demo LM shipped in assets/demo_model/ beside the demo Mimi (run that one first).

An untrained (random-weight) LM of the Moshi architecture, shaped like PersonaPlex (16
depformer steps: 8 model + 8 user codebooks), written exactly as released checkpoints are
(`model.safetensors` in the official layout, `config.json` in the reference LM-kwargs format,
`tokenizer_spm_32k_3.model`), plus one voice prompt `voices/DEMO.pt` recorded with our own
Moshi frame the way PersonaPlex records its voices. It babbles; it exists so the whole pipeline
runs without downloading a 7B model. Deterministic: fixed seeds, single-threaded training.

Run: python packaging/make_demo_lm.py [out_dir]
"""
from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.families.moshi.frame import MoshiFrame  # noqa: E402
from engine.families.moshi.inputs import LMInputs  # noqa: E402
from engine.families.moshi.lm.lm_config import CONFIGS, LMConfig, to_lm_kwargs  # noqa: E402
from engine.families.moshi.lm.moshi_lm import MoshiLM  # noqa: E402
from engine.families.moshi.mimi import MimiStream, load_mimi  # noqa: E402
from engine.files.audio import read_audio  # noqa: E402
from engine.files.paths import DEMO_MODEL_DIR, SPEECH_SAMPLE  # noqa: E402
from engine.loading import locate  # noqa: E402
from engine.options import RuntimeOptions  # noqa: E402
from engine.runtime.stages import StageRunner  # noqa: E402
from engine.state import FullStore  # noqa: E402

SEED = 20240918
VOICE_FRAMES = 10
CORPUS = [
    "Hello, how are you doing today?",
    "I am fine, thank you. What would you like to talk about?",
    "Let us talk about the weather, the mountains and the sea.",
    "You are a wise and friendly teacher. Answer questions in a clear and engaging way.",
    "You enjoy having a good conversation about food, music, travel and family.",
    "Sure, that sounds great. Tell me more about it, please.",
    "Yesterday we walked along the river and watched the boats go by.",
    "Numbers like one, two, three, four and five are easy to say.",
    "<system> Quick brown foxes jump over lazy dogs. <system>",
]


def demo_config(card: int, silence: list[int], sine: list[int]) -> LMConfig:
    return dataclasses.replace(CONFIGS["demo"], card=card, silence_tokens=tuple(silence),
                               sine_tokens=tuple(sine))


def train_tokenizer(path: Path) -> None:
    model = io.BytesIO()  # written in memory: no temporary path recorded in the model
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=model, vocab_size=CONFIGS["demo"].text_card, model_type="bpe",
        character_coverage=1.0, num_threads=1, unk_id=0, bos_id=1, eos_id=2, pad_id=3,
        hard_vocab_limit=True, normalization_rule_name="identity", minloglevel=2)
    path.write_bytes(model.getvalue())


def random_weights(lm: MoshiLM, gen: torch.Generator) -> None:
    """Truncated normals with std 1/sqrt(fan in), as the reference initializes; norms at 1."""
    with torch.no_grad():
        for name, p in sorted(lm.named_parameters()):
            if name.endswith("alpha"):
                p.fill_(1.0)
            else:
                std = 1.0 / p.shape[-1] ** 0.5
                p.copy_(torch.randn(p.shape, generator=gen).clamp_(-3, 3) * std)


def prompt_codes(mimi) -> tuple[list[int], list[int]]:
    """The demo Mimi's codes of a silent frame and of a 440 Hz tone frame (PersonaPlex's
    prompt frames), each encoded from a fresh stream."""
    n = mimi.frame_size
    tone = (0.5 * np.sin(2 * np.pi * 440 * np.arange(n) / mimi.sample_rate)).astype(np.float32)
    return ([int(c) for c in MimiStream(mimi).encode_frame(np.zeros(n, np.float32))],
            [int(c) for c in MimiStream(mimi).encode_frame(tone)])


@torch.no_grad()
def record_voice(lm: MoshiLM, mimi, path: Path) -> None:
    """A voice prompt as PersonaPlex saves one: the model stream forced to the codes of a
    speech clip (user stream: tone frames, text: padding), each frame's input embedding
    kept, then the delay lines' tokens."""
    cfg = lm.cfg
    pcm = read_audio(SPEECH_SAMPLE)[: VOICE_FRAMES * mimi.frame_size]
    codes = torch.from_numpy(mimi.encode(pcm))
    store = FullStore(lm.regions())
    runner = MoshiFrame(StageRunner(store, lm.device, torch.Generator().manual_seed(SEED)), lm, None,
                        RuntimeOptions())
    sine, pad = torch.tensor(cfg.sine_tokens), torch.tensor([cfg.text_padding_id])
    inputs = []
    for t in range(codes.shape[1]):
        embedding, _ = runner.lm_frame(LMInputs(sine, model=codes[:cfg.model_q, t], text=pad))
        if embedding is not None:  # PersonaPlex's first frame runs no wake
            inputs.append(embedding)
    tokens = store[lm.lines.tokens_region]
    torch.save({"embeddings": torch.stack(inputs).to(torch.bfloat16),
                "cache": tokens.T.unsqueeze(0).clone()}, path)


def main(out_dir: Path) -> None:
    mimi = load_mimi(out_dir)
    cfg = demo_config(mimi.cardinality, *prompt_codes(mimi))
    lm = MoshiLM(cfg)
    random_weights(lm, torch.Generator().manual_seed(SEED))
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in lm.state_dict().items()}
    save_file(state, str(out_dir / locate.LM_NAME))
    kwargs = to_lm_kwargs(cfg)
    kwargs["model_id"] = {"name": cfg.name}
    (out_dir / "config.json").write_text(json.dumps(kwargs, indent=2) + "\n")
    train_tokenizer(out_dir / locate.TOKENIZER_NAME)
    (out_dir / "voices").mkdir(exist_ok=True)
    lm.to(torch.bfloat16).float()  # record with the weights as shipped
    record_voice(lm, mimi, out_dir / "voices" / "DEMO.pt")
    print(f"wrote the demo LM to {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEMO_MODEL_DIR)
