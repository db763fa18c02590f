"""A loaded MiniCPM-o 4.5 (engine.families.protocol.DuplexModel): its configuration, tokenizer,
the audio path's weights (checked against the configuration from the headers, then read), and
the Step-Audio2 token2wav tail where the folder holds one (`assets/token2wav`, as the Hub
repository does) with its voices: a prepared prompt beside it, or made from recordings by its
ONNX front end (voices.py). It hears 16 kHz a second at a time and speaks 24 kHz."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ...errors import CheckpointError
from ...loading.memory_plan import MemoryPlan
from ...ops import dispatch
from ...token2wav.token2wav_loading import FILES as TAIL_FILES
from ...token2wav.token2wav_loading import Token2wavModel, load_token2wav
from .host_tables import host_keys
from .kept_weights import read_audio_weights
from .layout import TAIL_FOLDER, layout, read_config
from .protocol_settings import UnitSettings
from .quantized import FORMATS, HALF_FLOW, stored_bytes
from .qwen3_weights import Qwen3Sizes, stack_products
from .speech_tokens import SpeechTokensConfig
from .text_tokens import TextTokens
from .voices import Voice, prepare_voices
from .weight_shapes import audio_path_shapes

INPUT_RATE = 16000  # DuplexCapability SAMPLE_RATE
OUTPUT_RATE = 24000  # the token2wav tail's
STEP_SAMPLES = 16000  # CHUNK_MS 1000: a unit is a second (the first is padded in front to 1035 ms)
VOICE_FILE = "voice.safetensors"
"""A prepared voice prompt beside the tail (tokens, speaker embedding, mel: engine.token2wav.prompt)."""
FAMILY = "minicpmo"


@dataclasses.dataclass
class MiniCPMOModel:
    name: str
    path: Path
    config: dict
    tokens: TextTokens
    weights_by_name: dict[str, torch.Tensor]
    dtype: torch.dtype
    tail: Token2wavModel | None
    notice: str = ""
    weight_format: str = "bf16"
    """"bf16" (the model dtype), "int8" or "int4" (quantized.py)."""
    voices: dict[str, Voice] = dataclasses.field(default_factory=dict)
    """Voices made from recordings (voices.py), by name."""
    family = FAMILY
    predictor_file = None
    input_rate = INPUT_RATE
    output_rate = OUTPUT_RATE
    step_samples = STEP_SAMPLES

    @property
    def device(self) -> torch.device:
        return self.weights_by_name["llm.model.norm.weight"].device

    @property
    def weights(self) -> str:
        if self.weight_format != "bf16":
            return self.weight_format
        return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.dtype, "fp32")

    @property
    def weights_option(self) -> str:
        return self.weight_format

    @property
    def voice_file(self) -> Path | None:
        path = self.path / TAIL_FOLDER / VOICE_FILE
        return path if path.is_file() else None


def _checked(folder: Path, config: dict) -> dict[str, tuple[int, ...]]:
    try:
        return audio_path_shapes(config)
    except (TypeError, ValueError, KeyError) as error:
        raise CheckpointError(f"{folder / 'config.json'}: sizes the audio path cannot take ({error})") from None


def load(folder: Path, repo: str | None, device: torch.device, dtype: torch.dtype | None = None,
         weights: str | None = None) -> MiniCPMOModel:
    weights = weights or "bf16"
    if weights not in FORMATS:
        raise CheckpointError(f"{folder}: MiniCPM-o runs with {', '.join(FORMATS)} weights, not {weights}")
    config = read_config(folder)
    expected = _checked(folder, config)
    dtype = dtype or (torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32)
    tokens = TextTokens(folder)
    tensors, kept = read_audio_weights(folder, expected, torch.device(device), dtype, weights,
                                       host_keys(config, device))
    if dispatch.use_triton(tensors["llm.model.norm.weight"]):  # the fused layers' stacked products
        stack_products(tensors, "llm.model.layers.", Qwen3Sizes.from_config(config).layers)
        stack_products(tensors, "tts.model.layers.", SpeechTokensConfig.from_config(config).num_hidden_layers)
    tail_folder = folder / TAIL_FOLDER
    tail = None
    if all((tail_folder / name).is_file() for name in TAIL_FILES):
        half = weights in HALF_FLOW and torch.device(device).type == "cuda"
        tail = load_token2wav(tail_folder, device=device, fp16=half)
        speech_tokens = SpeechTokensConfig.from_config(config).num_audio_tokens - 1  # the last is the TTS's EOS
        if tail.flow_cfg.vocab_size < speech_tokens:
            raise CheckpointError(f"{tail_folder / 'flow.yaml'}: its vocabulary of {tail.flow_cfg.vocab_size} "
                                  f"tokens does not cover the TTS's {speech_tokens} speech tokens")
    name = repo or folder.name
    voices, why_not = prepare_voices(tail_folder) if tail is not None else ({}, "")
    prepared = (folder / TAIL_FOLDER / VOICE_FILE).is_file()
    silent = (f"; {folder.name} has no {TAIL_FOLDER}" if tail is None else
              f"; it has no prepared voice ({TAIL_FOLDER}/{VOICE_FILE}) and {why_not}" if not (voices or prepared)
              else "")
    notice = (f"{name} answers on a one-second rhythm: once a second it decides to listen or to speak"
              + (f"{silent}, so it answers in text only." if silent else "."))
    notice += f" {kept[0].upper()}{kept[1:]}." if kept else ""
    return MiniCPMOModel(name, folder, config, tokens, tensors, dtype, tail, notice, weights, voices)


def plan_memory(folder: Path, repo: str | None, weights: str | None, device) -> MemoryPlan:
    """Weights from the headers of the audio path's tensors (vision not counted); the state of a
    whole window's context in the LLM's cache."""
    config = read_config(folder)
    found = layout(folder)
    shapes = {key: tuple(found[key].shape) for key in _checked(folder, config) if key in found}
    return _plan(config, repo or folder.name, weights, device, shapes)


def plan_config(config: dict, name: str, weights: str | None, device) -> MemoryPlan | None:
    """The plan from config.json alone (a model on the Hub, before its download): the shapes it
    implies; None for a config whose sizes the audio path cannot take."""
    try:
        shapes = audio_path_shapes(config)
    except (TypeError, ValueError, KeyError):
        return None
    return _plan(config, name, weights, device, shapes)


def _plan(config: dict, name: str, weights: str | None, device, shapes: dict) -> MemoryPlan:
    device = torch.device(device)
    element = 2 if device.type == "cuda" else 4
    weights = weights or "bf16"
    on_host = host_keys(config, device)
    weight_bytes = sum(stored_bytes(key, shape, weights, element) for key, shape in shapes.items()
                       if key not in on_host)
    sizes, window = Qwen3Sizes.from_config(config), UnitSettings().basic_window_high_tokens + 512
    state_bytes = 2 * sizes.layers * sizes.kv_heads * sizes.head_dim * window * element
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    # The window bounds the cache, so any length needs this: the plan names 30 minutes.
    return MemoryPlan(name, weights, str(device), weight_bytes, state_bytes, 1800.0, free)
