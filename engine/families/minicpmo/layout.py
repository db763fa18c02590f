"""MiniCPM-o 4.5's checkpoint as the Hub repository holds it: `config.json` (model_type
"minicpmo"), sharded safetensors with `model.safetensors.index.json`, the tokenizer files.
Only the audio path is read (the Whisper encoder `apm.`, `audio_projection_layer.`, the LLM
`llm.` and the TTS `tts.`); the vision tower and resampler (`vpm.`, `resampler.`) are neither
read nor counted. Every name, shard and shape is checked from the headers before a tensor is
allocated, so a bad folder is refused in one line naming the file."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ...errors import CheckpointError
from ...files.paths import file_in
from ...loading.safetensors_files import read_safetensors_layout
from ...token2wav.token2wav_loading import FILES as TAIL_FILES
from ...token2wav.voice_prompt import FILES as VOICE_FILES
from .host_tables import HOST
from .text_tokens import TOKENIZER_FILES

MODEL_TYPE = "minicpmo"
INDEX = "model.safetensors.index.json"
AUDIO_PARTS = ("apm.", "audio_projection_layer.", "llm.", "tts.")
"""The key prefixes of the audio path (MiniCPMO.__init__: init_audio_module, the LLM, init_tts_module)."""
TAIL_FOLDER = "assets/token2wav"  # MiniCPMO.init_token2wav: _ensure_asset_dir("assets/token2wav")


def read_config(folder: Path) -> dict:
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: not a readable JSON file ({error})") from None
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        raise CheckpointError(f"{path}: not a MiniCPM-o config (model_type must be {MODEL_TYPE!r})")
    return config


def _weight_map(index: object, source: str) -> dict[str, str]:
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{source}: no weight_map of key to shard file")
    return weight_map


def _read_index(folder: Path) -> dict:
    path = folder / INDEX
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: not a readable JSON file ({error})") from None


def shards_of(index: object, folder: Path, source: str) -> dict[str, list[str]]:
    """Shard file name -> the audio path's keys it holds, from an index's contents (shards with
    only vision are left out; one holding both is needed whole). Every name stays in `folder`."""
    shards: dict[str, list[str]] = {}
    for key, shard in _weight_map(index, source).items():
        if key.startswith(AUDIO_PARTS):
            file_in(folder, shard, source, key)
            shards.setdefault(shard, []).append(key)
    if not shards:
        raise CheckpointError(f"{source}: lists no weights of the audio path ({', '.join(AUDIO_PARTS)})")
    return shards


def audio_shards(folder: Path) -> dict[str, list[str]]:
    """The shards of a folder's index holding the audio path's keys, and those keys."""
    return shards_of(_read_index(folder), folder, str(folder / INDEX))


def files(listing: Iterable[str], config: dict, read: Callable[[str], object] | None, name: str) -> list[str]:
    """What the loader reads, for the model library: config, index, the tokenizer, the shards
    holding audio weights (from the index, which `read(file name)` gives: the listing alone
    cannot say) and the token2wav tail where the listing has all of it, with the ONNX front end
    that makes its voice (engine.token2wav.voice_prompt) where it has that too."""
    names = set(listing)
    needed = ["config.json", INDEX, *TOKENIZER_FILES]
    missing = [file for file in needed if file not in names]
    if missing:
        raise ValueError(f"the folder lacks {', '.join(missing)}")
    index = read(INDEX) if read is not None else None
    if index is None:
        raise ValueError(f"{name}/{INDEX} could not be read")
    shards = sorted(shards_of(index, Path(name), f"{name}/{INDEX}"))
    tail = [f"{TAIL_FOLDER}/{file}" for file in TAIL_FILES]
    voice = [f"{TAIL_FOLDER}/{file}" for file in VOICE_FILES]
    tail += voice if names.issuperset(voice) else []
    return needed + shards + (tail if names.issuperset(tail) else [])


def layout(folder: Path) -> dict[str, torch.Tensor]:
    """The audio path's tensors as meta tensors (shape, dtype), from the shards' headers only."""
    out: dict[str, torch.Tensor] = {}
    for shard, keys in audio_shards(folder).items():
        header = read_safetensors_layout(folder / shard)
        for key in keys:
            if key not in header:
                raise CheckpointError(f"{folder / shard}: the index puts {key} here but the file lacks it")
            out[key] = header[key]
    return out


def read_weights(folder: Path, expected: dict[str, tuple[int, ...]], device: torch.device,
                 dtype: torch.dtype, convert=None, host: frozenset[str] = frozenset()) -> dict[str, torch.Tensor]:
    """The tensors `expected` names (key -> shape the configuration implies), checked against
    the headers first (missing, unexpected among the audio parts, wrong shape), then read one
    at a time to `device` (the host for the keys in `host`: host_tables.py) in `dtype` or, given
    `convert(key, tensor, device, dtype)`, kept as it returns from the tensor read to the host."""
    found = layout(folder)
    missing = sorted(set(expected) - set(found))
    if missing:
        raise CheckpointError(f"{folder}: the checkpoint lacks {missing[0]}"
                              + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    for key, shape in expected.items():
        if tuple(found[key].shape) != tuple(shape):
            raise CheckpointError(f"{folder}: {key} has shape {tuple(found[key].shape)}, the config implies {shape}")
    weights: dict[str, torch.Tensor] = {}
    for shard, keys in audio_shards(folder).items():
        wanted = [key for key in keys if key in expected]
        if not wanted:
            continue
        try:
            with safe_open(str(folder / shard), framework="pt") as f:
                for key in wanted:
                    tensor, target = f.get_tensor(key), HOST if key in host else device
                    weights[key] = (tensor.to(device=target, dtype=dtype) if convert is None
                                    else convert(key, tensor, target, dtype))
        except (SafetensorError, OSError, RuntimeError, ValueError) as error:
            raise CheckpointError(f"{folder / shard}: not a readable safetensors file ({error})") from None
    return weights
