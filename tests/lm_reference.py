"""Reference-side helpers for the LM tests: small reference models (moshi 0.2.13), saving them
in the official layout, running the reference step loops, and a tiny text tokenizer.

`PersonaPlexReference` restates NVIDIA/personaplex's `LMGen` (moshi/models/lm.py of that
fork: a token cache with a "provided" mask, teacher forcing of the depformer, the prompt
sequence) on top of moshi 0.2.13's `LMModel`, whose layers compute the same functions as the
fork's. It was checked once against the fork itself (same weights, same seeds: identical
tokens, greedy and sampled); the fork is not installable beside moshi 0.2.13, so the tests use
this restatement. One difference lies in the fork's layers, not its step loop: its KV ring
hides the oldest slot once full, so the fork with context C equals moshi 0.2.13 with context
C - 1; build the reference LMModel with `personaplex_context(C)`.
"""
from __future__ import annotations

import io
from pathlib import Path

import sentencepiece as spm
import torch
from moshi.models.lm import LMGen, LMModel
from moshi.utils.sampling import sample_token
from safetensors.torch import save_file

from engine.loading.safetensors_files import official_layout

DELAYS = [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1]


def small_lm_kwargs(dep_q: int = 8, card: int = 40, text_card: int = 60, context: int = 24) -> dict:
    """A tiny Moshi-architecture LM in the reference LM-kwargs (config.json) format."""
    return dict(
        dim=64, text_card=text_card, existing_text_padding_id=3, n_q=16, dep_q=dep_q, card=card,
        num_heads=4, num_layers=2, hidden_scale=4.125, causal=True, layer_scale=None,
        context=context, max_period=10000, gating="silu", norm="rms_norm_f32",
        positional_embedding="rope", depformer_dim=32, depformer_dim_feedforward=int(4.125 * 32),
        depformer_num_heads=4, depformer_num_layers=2, depformer_layer_scale=None,
        depformer_multi_linear=True, depformer_context=dep_q, depformer_max_period=10000,
        depformer_gating="silu", depformer_pos_emb="none", depformer_weights_per_step=True,
        delays=list(DELAYS))


def personaplex_context(context: int) -> int:
    """The moshi 0.2.13 context that reproduces NVIDIA's fork run with `context`."""
    return context - 1


def write_tokenizer(path: Path, vocab: int = 40) -> None:
    """A small SentencePiece model (ids 0 and 3 are the padding ids, as in Moshi's)."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["hello there how are you", "fine thanks and you",
                                "let us talk about the sea", "<system> be kind <system>"]),
        model_writer=model, vocab_size=vocab, model_type="bpe", num_threads=1,
        unk_id=0, bos_id=1, eos_id=2, pad_id=3, normalization_rule_name="identity", minloglevel=2)
    path.write_bytes(model.getvalue())


def make_reference_lm(kwargs: dict, seed: int = 0) -> LMModel:
    torch.manual_seed(seed)
    return LMModel(**kwargs, dtype=torch.float32).eval()


def save_official(lm: LMModel, path: Path) -> None:
    save_file(official_layout(lm.state_dict()), str(path))


@torch.no_grad()
def run_moshi_reference(lm: LMModel, user: torch.Tensor, greedy: bool, seed: int,
                        text=(0.7, 25), audio=(0.8, 250)) -> list[torch.Tensor | None]:
    """moshi 0.2.13 LMGen over user codes [T, 8]; per frame its tokens [dep_q + 1] or None."""
    gen = LMGen(lm, use_sampling=not greedy, temp_text=text[0], top_k_text=text[1],
                temp=audio[0], top_k=audio[1])
    torch.manual_seed(seed)
    out = []
    with gen.streaming(1):
        for codes in user:
            tokens = gen.step(codes.view(1, -1, 1))
            out.append(None if tokens is None else tokens[0, :, 0].clone())
    return out


class PersonaPlexReference:
    """NVIDIA's PersonaPlex LMGen step loop (see module doc), batch 1, global RNG."""

    MODEL_Q = 8

    def __init__(self, lm: LMModel, greedy: bool, text=(0.7, 25), audio=(0.8, 250)):
        self.lm, self.greedy, self.text, self.audio = lm, greedy, text, audio
        self.delays = list(lm.delays)
        self.max_delay = max(self.delays)
        self.slots = self.max_delay + 3
        k = lm.num_codebooks
        self.cache = torch.full((k, self.slots), -2, dtype=torch.long)
        self.provided = torch.zeros((k, self.slots), dtype=torch.bool)
        self.initial = [lm.text_card] + [lm.card] * lm.n_q
        self.offset = 0
        self._stack = lm.streaming(1)
        self._stack.__enter__()

    def close(self) -> None:
        self._stack.__exit__(None, None, None)

    def _write(self, first: int, codes) -> None:
        for i, code in enumerate(codes):
            k = first + i
            pos = (self.offset + self.delays[k]) % self.slots
            self.cache[k, pos] = int(code)
            self.provided[k, pos] = True

    def _prepare(self, user, model, text):
        if user is not None:
            self._write(1 + self.MODEL_Q, user)
        if model is not None:
            self._write(1, model)
        if text is not None:
            self._write(0, [text])
        for k, delay in enumerate(self.delays):
            if self.offset <= delay:
                self.cache[k, self.offset % self.slots] = self.initial[k]
                self.provided[k, self.offset % self.slots] = True
        if self.offset == 0:
            self.cache[:, 0] = torch.tensor(self.initial)
            self.offset = 1
            return None
        return (self.offset - 1) % self.slots, self.offset % self.slots

    def _sample(self, logits, params):
        return sample_token(logits.float(), not self.greedy, params[0], params[1])

    @torch.no_grad()
    def step(self, user, model=None, text=None, embedding=None):
        prepared = self._prepare(user, model, text)
        if prepared is None:
            if embedding is None:
                return None
            prepared = self._prepare(user, model, text)
        inp, target = prepared
        lm = self.lm
        if embedding is None:
            h, text_logits = lm.forward_text(self.cache[None, :, inp:inp + 1])
        else:
            h = lm.out_norm(lm.transformer(embedding.view(1, 1, -1)))
            text_logits = lm.text_linear(h)[:, None]
        text_token = self._sample(text_logits, self.text)[0, 0, 0]
        forced = self.provided[:, target]
        prev = self.cache[0, target] if forced[0] else text_token
        sampled = []
        with lm.depformer.streaming(1):
            for cb in range(lm.dep_q):
                logits = lm.forward_depformer(cb, prev.view(1, 1, 1), h)
                token = self._sample(logits, self.audio)[0, 0, 0]
                sampled.append(token)
                prev = self.cache[cb + 1, target] if forced[cb + 1] else token
        self.provided[:, inp] = False
        new = torch.stack([text_token] + sampled)
        n = new.shape[0]
        self.cache[:n, target] = torch.where(self.provided[:n, target], self.cache[:n, target], new)
        if self.offset <= self.max_delay:
            self.offset += 1
            return None
        rows = [(self.offset - self.max_delay + self.delays[k]) % self.slots for k in range(n)]
        out = torch.stack([self.cache[k, rows[k]] for k in range(n)])
        self.offset += 1
        return out

    def system_prompts(self, voice_embeddings, voice_cache, role_tokens, silence, sine, silence_frames=6):
        pad = 3
        if voice_embeddings is not None:
            start = [self.lm.card] * self.MODEL_Q
            for e in voice_embeddings:
                self.step(start, model=start, text=pad, embedding=e)
            self.cache.copy_(voice_cache[0])
        for token in [None] * silence_frames + list(role_tokens) + [None] * silence_frames:
            self.step(sine, model=silence, text=pad if token is None else token)


def our_lm_runner(lm, greedy: bool, seed: int, text=(0.7, 25), audio=(0.8, 250), wake: int = 1):
    """Our Moshi frame over the LM alone (no Mimi), as the reference tests drive it; its state
    sized for backbone wakes of up to `wake` frames."""
    from engine.families.moshi.diffuplex.wake import Wakes
    from engine.families.moshi.frame import MoshiFrame
    from engine.options import RuntimeOptions
    from engine.runtime.stages import StageRunner
    from engine.state import FullStore

    options = RuntimeOptions(text_temperature=text[0], text_top_k=text[1], audio_temperature=audio[0],
                             audio_top_k=audio[1], greedy=greedy)
    runner = StageRunner(FullStore(lm.regions(wake)), lm.device, torch.Generator().manual_seed(seed), options)
    frame = MoshiFrame(runner, lm, None, options)
    return LMRunner(frame, Wakes(frame))


class LMRunner:
    """Our Moshi frame over the LM alone, with its DiffuPlex wakes: what the reference tests
    drive (a frame's attributes first, then the wakes')."""

    def __init__(self, frame, wakes):
        self.frame, self.wakes = frame, wakes

    @property
    def store(self):
        return self.frame.runner.store

    def __getattr__(self, name):
        return getattr(self.frame, name) if hasattr(self.frame, name) else getattr(self.wakes, name)


def our_lm_step(runner, user, model=None, text=None):
    """One LM frame: tokens [1 + dep_q], or None during start-up."""
    from engine.families.moshi.inputs import LMInputs

    return runner.lm_frame(LMInputs(user, model=model, text=text))[1]
