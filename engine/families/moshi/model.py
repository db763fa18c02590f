"""A Moshi-family model, assembled: the LM, its Mimi codec, the text tokenizer, and
(PersonaPlex) its voice prompts, read from a checkpoint folder in the official layout."""
from __future__ import annotations

import dataclasses
import logging
import tarfile
from collections.abc import Iterable
from pathlib import Path

import sentencepiece
import torch

from ...config.checks import read_json
from ...errors import CheckpointError
from ...files.paths import MIMI_NAME, PREDICTOR_NAME, TOKENIZER_NAME, file_in
from ...loading import locate
from ...loading.safetensors_files import read_safetensors, read_safetensors_layout
from ...state import Region
from ...weights.int4 import is_int4
from ...weights.int4_kept import load_kept_int4
from .lm.lm_config import CONFIGS, LMConfig, from_lm_kwargs
from .lm.lm_loading import build_lm
from .lm.moshi_lm import MoshiLM
from .lm.personaplex import VoicePrompt, check_prompt_length, load_voice, wrap_role
from .mimi import Mimi, load_mimi

log = logging.getLogger(__name__)
_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


@dataclasses.dataclass
class MoshiModel:
    """engine.families.protocol.DuplexModel for Moshi and PersonaPlex: it hears and speaks
    24 kHz in 80 ms steps (Mimi's frame)."""
    name: str
    path: Path
    lm: MoshiLM
    mimi: Mimi
    tokenizer: sentencepiece.SentencePieceProcessor
    voices: dict[str, Path]
    """PersonaPlex voice prompts by name (file stem), e.g. "NATF2"."""
    notice: str = ""
    """What the user should know about the load ("" for nothing): int4 weights that could not
    be kept and were quantized in memory."""

    @property
    def cfg(self) -> LMConfig:
        return self.lm.cfg

    @property
    def weights(self) -> str:
        """The LM's linear weights as they are in memory: "int4", "int8", or the float dtype ("bf16",
        "fp16", "fp32": float weights follow the LM's dtype, float32 on the CPU)."""
        dtypes = {p.dtype for p in self.lm.parameters()}
        if torch.uint8 in dtypes:
            return "int4"
        if torch.int8 in dtypes:
            return "int8"
        return _DTYPE_NAMES.get(self.lm.dtype, str(self.lm.dtype).removeprefix("torch."))

    @property
    def weights_option(self) -> str:
        """What RuntimeOptions.weights calls this model's weights: "int4", "int8", or "bf16" for
        float weights (the option asks for 16-bit weights where the device computes in 16 bits)."""
        return self.weights if self.weights in ("int4", "int8") else "bf16"

    @property
    def family(self) -> str:
        return "moshi"

    @property
    def variant(self) -> str:
        """"moshi" or "personaplex" (LMConfig.variant): PersonaPlex takes a voice and a role."""
        return self.cfg.variant

    @property
    def device(self) -> torch.device:
        return self.lm.device

    @property
    def frame_size(self) -> int:
        return self.mimi.frame_size

    @property
    def sample_rate(self) -> int:
        return self.mimi.sample_rate

    input_rate = output_rate = sample_rate
    step_samples = frame_size

    def regions(self, wake: int = 1) -> list[Region]:
        return self.lm.regions(wake) + self.mimi.regions()

    @property
    def predictor_file(self) -> Path | None:
        """A DiffuPlex predictor shipped beside the checkpoint (`diffuplex.safetensors`), if any."""
        path = self.path / PREDICTOR_NAME
        return path if path.is_file() else None

    def load_voice(self, name: str) -> VoicePrompt:
        return load_voice(voice_file(self.path, self.voices, name), self.cfg, self.device, self.lm.dtype)

    def text_piece(self, token: int) -> str:
        """The text of an output token; "" for padding, control pieces (<s>, </s>), unknown
        and ids the tokenizer lacks."""
        sp = self.tokenizer
        if token in (self.cfg.text_padding_id, self.cfg.text_end_padding_id) \
                or not 0 <= token < sp.GetPieceSize() or sp.IsControl(token) or sp.IsUnknown(token):
            return ""
        return self.tokenizer.id_to_piece(token).replace("\u2581", " ")


@dataclasses.dataclass
class LMCheckpoint:
    """An LM checkpoint as read from disk, before any module is built."""
    root: Path
    meta: dict
    """config.json's contents ({} without one)."""
    path: Path
    name: str
    cfg: LMConfig
    tensors: dict


def read_lm_checkpoint(path_or_name: str | Path, download: bool = False, layout_only: bool = False,
                       repo: str | None = None) -> LMCheckpoint:
    """`layout_only`: the tensors as meta tensors (keys, shapes, dtypes), reading only the header.
    `repo`: the repository name of a folder already resolved."""
    root, found = locate.resolve(path_or_name, download=download)
    repo = repo or found
    meta = _read_config(root)
    lm_path = locate.lm_file(root, meta)
    tensors = read_safetensors_layout(lm_path) if layout_only else read_safetensors(lm_path)
    name = _model_name(meta, root, repo)
    return LMCheckpoint(root, meta, lm_path, name, lm_config(meta, root, name, repo, tensors, lm_path), tensors)


def claims(root: Path, meta: dict) -> bool:
    """A folder is this family's unless its config.json names another kind of model: Moshi's
    official checkpoints may have no config.json at all (the loader then names what is
    missing)."""
    return meta.get("model_type", "moshi") == "moshi"


def load(root: Path, repo: str | None, device: torch.device, dtype: torch.dtype | None = None,
         weights: str | None = None) -> MoshiModel:
    """The model in `root` (engine.loading.models.load_model says what it takes).

    dtype applies to the LM's activations and float weights (default: bfloat16 on CUDA,
    float32 elsewhere); `weights` "int8" loads the LM's linear weights in int8 (an official q8
    file as it is, a float checkpoint quantized per row on load), "int4" in our int4 layout (a
    file in it as it is; a float or q8 one quantized once and kept, engine.weights.int4_kept), "bf16" in
    dtype, None as the file holds them. Mimi runs in float32 as in the reference. Any problem raises
    CheckpointError naming the file."""
    ckpt = read_lm_checkpoint(root, repo=repo)
    root, meta, lm_path, name, cfg = ckpt.root, ckpt.meta, ckpt.path, ckpt.name, ckpt.cfg
    device = torch.device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    notice = ""
    if weights == "int4" and not is_int4(ckpt.tensors):
        # Quantized once and kept (engine.weights.int4_kept), not on every load.
        lm, notice = load_kept_int4(cfg, ckpt.tensors, lm_path, device, dtype)
    else:
        lm = build_lm(cfg, ckpt.tensors, lm_path, device, dtype, weights)
    del ckpt
    config = f"{root}/config.json"
    mimi = load_mimi(file_in(root, meta.get("mimi_name", MIMI_NAME), config, key="mimi_name"), device=device,
                     num_codebooks=max(cfg.model_q, cfg.user_q))
    if mimi.cardinality != cfg.card:
        raise CheckpointError(f"{lm_path}: the LM expects {cfg.card} codes per codebook, "
                              f"the Mimi has {mimi.cardinality}")
    tokenizer_file = file_in(root, meta.get("tokenizer_name", TOKENIZER_NAME), config, key="tokenizer_name")
    tokenizer = _read_tokenizer(tokenizer_file, cfg)
    if device.type == "cuda":
        # Loading (and quantizing on load) leaves freed transients in torch's cache; on a
        # small card that is memory the conversation's state needs. And the weights are final
        # before a kernel launched overlapped may read them ahead of its wait
        # (engine.kernels.overlap).
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    return MoshiModel(name, root, lm, mimi, tokenizer, voices_of(root) if cfg.variant == "personaplex" else {},
                       notice)


def check_persona(root: Path, repo: str | None, voice: str | None, role: str) -> None:
    """Before a model's weights load: raise (one line) unless it takes this voice and role and
    they fit its context (lm.personaplex.check_prompt_length). Reads only its config, its
    LM file's header, its tokenizer and the voice prompt."""
    ckpt = read_lm_checkpoint(root, layout_only=True, repo=repo)
    if ckpt.cfg.variant != "personaplex":
        if voice or role.strip():
            raise ValueError(f"{ckpt.name} takes no voice or role prompt (only PersonaPlex does)")
        return
    frames = 0
    if voice is not None:
        path = voice_file(ckpt.root, voices_of(ckpt.root), voice)
        frames = len(load_voice(path, ckpt.cfg, torch.device("cpu"), torch.float32).embeddings)
    tokens = []
    if role.strip():
        name = file_in(ckpt.root, ckpt.meta.get("tokenizer_name", TOKENIZER_NAME), f"{ckpt.root}/config.json",
                       key="tokenizer_name")
        tokens = _read_tokenizer(name, ckpt.cfg).encode(wrap_role(role))
    check_prompt_length(ckpt.cfg, voice, frames, len(tokens))


def mimi_file(path_or_name: str | Path) -> Path:
    """The Mimi checkpoint of a model (anything `load_model` takes), or a Mimi file itself."""
    if Path(path_or_name).is_file():
        return Path(path_or_name)
    root, _ = locate.resolve(path_or_name)
    return file_in(root, _read_config(root).get("mimi_name", MIMI_NAME), f"{root}/config.json", key="mimi_name")


def load_model_mimi(path_or_name: str | Path, device: str | torch.device = "cpu") -> Mimi:
    """The Mimi codec alone (every codebook), of a model (anything `load_model` takes) or from a
    Mimi file itself."""
    return load_mimi(mimi_file(path_or_name), device=device)


def _read_config(root: Path) -> dict:
    path = root / "config.json"
    return read_json(path) if path.exists() else {}


def _model_name(meta: dict, root: Path, repo: str | None) -> str:
    model_id = meta.get("model_id")
    if repo:
        return repo
    if isinstance(model_id, dict) and isinstance(model_id.get("name"), str):
        return model_id["name"]
    return root.name


def lm_config(meta: dict, root: Path, name: str, repo: str | None, tensors: Iterable[str], lm_path: Path
              ) -> LMConfig:
    """A checkpoint's LMConfig from its config.json (`meta`), else its known repository's,
    else the 7B shape its tensor names give."""
    # The checkpoint says how many depformer steps it has. NVIDIA's PersonaPlex loader
    # likewise ignores config.json and fixes 16 steps.
    steps = sum(1 for k in tensors if k.startswith("linears.") and k.endswith(".weight"))
    if "dim" in meta:
        cfg = from_lm_kwargs(meta, str(root / "config.json"), name)
    elif repo in locate.KNOWN_REPOS:
        cfg = CONFIGS[locate.KNOWN_REPOS[repo]]
    else:
        cfg = CONFIGS["personaplex" if steps == 16 else "moshiko"]
    if steps and steps != cfg.dep_q:
        log.info("%s: %d depformer steps in the checkpoint, config says %d; using the checkpoint",
                 lm_path, steps, cfg.dep_q)
        try:
            cfg = dataclasses.replace(cfg, dep_q=steps)
        except ValueError as exc:
            raise CheckpointError(f"{lm_path}: {exc}") from None
    return cfg


def _read_tokenizer(path: Path, cfg: LMConfig) -> sentencepiece.SentencePieceProcessor:
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.Load(str(path))
    except (OSError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: not a SentencePiece model ({exc})") from None
    if sp.GetPieceSize() > cfg.text_card:
        raise CheckpointError(f"{path}: {sp.GetPieceSize()} pieces, more than the LM's {cfg.text_card} text tokens")
    return sp


def voice_file(root: Path, voices: dict[str, Path], name: str) -> Path:
    """The file of the voice prompt `name` among a model's `voices`; CheckpointError without it."""
    if name not in voices:
        raise CheckpointError(f"{root}: no voice prompt named {name!r} (have: {', '.join(sorted(voices)) or 'none'})")
    return voices[name]


def voices_of(root: Path) -> dict[str, Path]:
    """A PersonaPlex checkpoint's voice prompts by name (its voices.tgz unpacked once)."""
    folder, archive = root / "voices", root / "voices.tgz"
    if not folder.is_dir() and archive.is_file():
        # As the reference does: unpack the released voices.tgz beside it, once. Only with the
        # "data" filter (no links out of the folder, no devices), which older Pythons lack.
        if not hasattr(tarfile, "data_filter"):
            raise CheckpointError(f"{archive}: unpacking needs Python >= 3.10.12; unpack it by hand")
        try:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(root, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise CheckpointError(f"{archive}: cannot unpack the voice prompts ({exc})") from None
    return {p.stem: p for p in sorted(folder.glob("*.pt"))} if folder.is_dir() else {}
