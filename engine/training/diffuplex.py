"""Training a DiffuPlex predictor by self-distillation from the frozen AR model.

1. Rollouts: the AR model converses (greedy) against user audio, one real frame at a time, as a
   session would, recording each frame's input and generated tokens: its outputs are the targets.
2. Training: windows of real history ending at a random frame t, then K masked future positions
   (MASK embeddings where the input is not known yet, the user's codes where the staircase says
   they are); the LoRA acts at the masked positions only. Loss: cross-entropy of the text token
   and every depformer codebook (teacher-forced on the targets, as in AR training) against what
   the AR model generated at frames t+1..t+K. Only the predictor learns; base weights never change.
Data: a folder of audio files (any format soundfile reads). Of a stereo file (a conversation, user
left, assistant right) the left channel is the user; the assistant comes from the AR model itself.
A checkpoint is a predictor file holding the steps done, so training resumes from it.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from torch.nn import functional as F

from ..errors import AudioInputError
from ..families.moshi.diffuplex.predictor import Predictor, load_predictor, new_predictor, save_predictor
from ..families.moshi.model import MoshiModel
from ..files.audio import read_audio, split_frames
from ..ops.linear import matmul
from ..options import RuntimeOptions
from ..period import FRAME_SIZE, SAMPLE_RATE
from ..session import DuplexSession
from ..state import FullStore
from ..weights.int8 import weight_of

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif"}


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    steps: int = 400
    block: int = 4
    rank: int = 8
    lr: float = 3e-3
    batch: int = 8
    window: int = 24
    """Real frames of history before each predicted block."""
    seed: int = 0
    checkpoint_every: int = 100

    def __post_init__(self):
        for name in ("steps", "block", "rank", "batch", "window", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not math.isfinite(self.lr) or self.lr <= 0:
            raise ValueError("lr must be a positive number")


@dataclasses.dataclass
class Rollout:
    inputs: torch.Tensor  # [T, n_q + 1]: each frame's input tokens
    generated: torch.Tensor  # [T, 1 + dep_q]: what each frame generated


def user_audio(folder: Path) -> list[tuple[Path, np.ndarray]]:
    """Every audio file in `folder` (sorted; or `folder` itself, a file), the user's side at
    24 kHz mono."""
    if folder.is_file():
        files = [folder]
    elif folder.is_dir():
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES)
    else:
        raise AudioInputError(f"{folder}: no such file or folder")
    if not files:
        raise AudioInputError(f"{folder}: no audio files ({', '.join(sorted(AUDIO_SUFFIXES))})")
    out = []
    for path in files:
        try:
            info = sf.info(str(path))
        except (sf.LibsndfileError, RuntimeError, OSError) as exc:
            raise AudioInputError(f"{path}: not a readable audio file ({exc})") from None
        if info.channels > 2:
            raise AudioInputError(f"{path}: {info.channels} channels; use mono (user) or stereo (user left)")
        pcm = read_audio(path, channel=0)  # mono, or the user's (left) side of a conversation
        out.append((path, pcm))
    return out


@torch.no_grad()
def rollout(model: MoshiModel, pcm: np.ndarray, seed: int) -> Rollout:
    """The AR model against this user audio (greedy), frame by frame, from the default prompts."""
    session = DuplexSession(model, RuntimeOptions(seed=seed, greedy=True, graph_replay=False))
    lines, store = model.lm.lines, session.store
    inputs, generated = [], []
    for frame in split_frames(pcm):
        row = store[lines.slot_region] % lines.slots
        session.step(frame)
        inputs.append(store[lines.tokens_region].index_select(0, row)[0].clone())
        generated.append(session.conversation.frame.last_generated().clone())
    session.close()
    return Rollout(torch.stack(inputs), torch.stack(generated))


def staircase(model: MoshiModel, k: int) -> torch.Tensor:
    """[k, n_q + 1] bool: which input tokens of future positions 1..k are known (the same
    staircase as a wake's)."""
    return torch.tensor([model.lm.lines.known_ahead(f) for f in range(1, k + 1)])


def loss(model: MoshiModel, predictor: Predictor, inputs: torch.Tensor, targets: torch.Tensor,
         known: torch.Tensor) -> torch.Tensor:
    """One window: inputs [W + K, n_q + 1] (the last K rows future), targets [K, 1 + dep_q]:
    the mean cross-entropy of the text token and every codebook at the K future positions."""
    lm, cfg = model.lm, model.cfg
    k = targets.shape[0]
    rows = [lm.embed_streams(inputs[:inputs.shape[0] - k])]
    rows.append(lm.embed_known(inputs[-k:], known.to(inputs.device), predictor.mask_embeddings))
    x = torch.cat(rows, dim=1)
    h = lm.out_norm(lm.transformer(x, None, adapter=predictor.at_last(k)))[:, -k:]
    total = F.cross_entropy(matmul(h, weight_of(lm.text_linear))[0].float(), targets[:, 0], reduction="sum")
    for f in range(k):
        # Scratch depformer state: its position restarts every frame; teacher-forced on the targets.
        store = FullStore(lm.depformer.regions(), h.device)
        prev = targets[f, :1]
        for step in range(cfg.dep_q):
            logits = lm.depformer_step(step, prev, h[:, f:f + 1], store)
            prev = targets[f, 1 + step:2 + step]
            total = total + F.cross_entropy(logits.float(), prev, reduction="sum")
    return total / (k * (1 + cfg.dep_q))


def train_predictor(model: MoshiModel, data: Path, out: Path, settings: TrainSettings, resume: bool = False,
          progress: Callable[[int, int, float], None] | None = None) -> Predictor:
    """Train (or, with `resume`, continue training from `out`) a predictor for `model` on the
    audio in `data`; checkpoints go to `out` every `checkpoint_every` steps and at the end."""
    cfg, k = model.cfg, settings.block
    if not cfg.predicts_user:
        raise ValueError(f"{model.name}: DiffuPlex needs a model that predicts the user's stream (PersonaPlex shape)")
    clips = user_audio(data)
    rollouts = [rollout(model, pcm, settings.seed) for _, pcm in clips]
    starts = [(r, t) for r, roll in enumerate(rollouts)
              for t in range(settings.window - 1, roll.inputs.shape[0] - k)]
    if not starts:
        need = (settings.window + k + 1) * FRAME_SIZE / SAMPLE_RATE
        raise AudioInputError(f"{data}: too little audio: each file needs at least {need:.1f} s")
    predictor, done = _start(model, out, settings, resume)
    if done >= settings.steps:
        raise ValueError(f"{out}: already trained for {done} steps; ask for more (--steps)")
    parameters = [p.requires_grad_(True) for p in predictor.parameters()]
    optimizer = torch.optim.Adam(parameters, lr=settings.lr)
    known = staircase(model, k)
    gen = torch.Generator().manual_seed(settings.seed + done)
    began, value = time.monotonic(), float("nan")
    for step in range(done, settings.steps):
        picks = torch.randint(len(starts), (settings.batch,), generator=gen).tolist()
        batch = []
        for r, t in (starts[i] for i in picks):
            roll = rollouts[r]
            window = roll.inputs[t - settings.window + 1:t + k + 1].to(model.device)
            batch.append(loss(model, predictor, window, roll.generated[t + 1:t + k + 1].to(model.device), known))
        total = torch.stack(batch).mean()
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        value = float(total.detach())
        if progress is not None:
            progress(step + 1, settings.steps, value)
        if (step + 1) % settings.checkpoint_every == 0 or step + 1 == settings.steps:
            _checkpoint(predictor, out, settings, data, step + 1, value, time.monotonic() - began)
    return predictor.requires_grad_(False).eval()


def _start(model: MoshiModel, out: Path, settings: TrainSettings, resume: bool) -> tuple[Predictor, int]:
    if not resume:
        fresh = new_predictor(model.cfg, rank=settings.rank, block=settings.block, seed=settings.seed)
        return fresh.to(model.device), 0
    predictor = load_predictor(out, model.cfg, model.device)
    if (predictor.spec.block, predictor.spec.rank) != (settings.block, settings.rank):
        raise ValueError(f"{out}: trained with block {predictor.spec.block} and rank {predictor.spec.rank}; "
                         f"resume with the same (--block {predictor.spec.block} --rank {predictor.spec.rank})")
    return predictor.float(), int(predictor.spec.training.get("steps_done", 0))


def _checkpoint(predictor: Predictor, out: Path, settings: TrainSettings, data: Path, steps: int,
                value: float, seconds: float) -> None:
    """Written beside `out`, then moved over it with the user's usual file mode: a crash never
    leaves a half-written adapter, and another job writing `out` is refused."""
    from ..files.outputs import OutputFiles  # here: this function is the module's only writer

    training = {**dataclasses.asdict(settings), "steps_done": steps, "loss": value, "data": data.name,
                "seconds": round(seconds, 1), "method": "self-distillation from greedy AR rollouts"}
    predictor.spec = dataclasses.replace(predictor.spec, training=training)
    with OutputFiles(out) as written:
        save_predictor(predictor, written.temporary(out))

