"""A Step-Audio2 token2wav model loaded from its official directory.

The directory holds `flow.yaml` and `flow.pt` (the flow-matching decoder) and `config.yaml`
and `hift.pt` (the causal HiFT vocoder). The YAML files are read for their numbers only
(engine.token2wav.token2wav_config); the `.pt` files are read with `weights_only=True`, so a file
cannot run code, and their keys and shapes are checked against our modules, naming the file.
The speech tokenizer and speaker model (ONNX files beside them) are not used: a voice prompt
comes prepared (engine.token2wav.token2wav_stream.Prompt).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ..errors import CheckpointError
from ..loading.pt_files import load_pt
from ..loading.safetensors_files import check_layout, load_into
from ..ops.host_rows import table_home
from .flow import Flow, new_noise
from .token2wav_config import FlowConfig, VocoderConfig, read_flow_config, read_vocoder_config
from .vocoder import CausalHiFTGenerator

FILES = ("flow.yaml", "flow.pt", "config.yaml", "hift.pt")


@dataclasses.dataclass
class Token2wavModel:
    path: Path
    flow: Flow
    vocoder: CausalHiFTGenerator
    flow_cfg: FlowConfig
    vocoder_cfg: VocoderConfig
    noise: torch.Tensor
    """The flow's noise table (engine.token2wav.flow.new_noise), in the flow's dtype."""

    @property
    def device(self) -> torch.device:
        return self.flow.input_embedding.weight.device


def read_pt(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a `.pt` file, with weights_only=True; problems name the file."""
    state = load_pt(path, "PyTorch state dict")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: expected a mapping of parameter names to tensors")
    return state


def load_token2wav(path: str | Path, device: str | torch.device = "cpu", fp16: bool = False,
                   seed: int = 0) -> Token2wavModel:
    """The model in `path` on `device`; `fp16` runs the flow in float16 (the vocoder stays
    float32, as the stock runtime runs it). `seed` draws the vocoder's excitation noise and the
    flow's noise tables (the stock model draws them from the process's generator when built)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a directory holding {', '.join(FILES)}")
    missing = [name for name in FILES if not (path / name).is_file()]
    if missing:
        raise CheckpointError(f"{path}: missing {', '.join(missing)} (a Step-Audio2 token2wav directory holds "
                              f"{', '.join(FILES)})")
    flow_cfg, vocoder_cfg = read_flow_config(path / "flow.yaml"), read_vocoder_config(path / "config.yaml")
    states = {name: read_pt(path / name) for name in ("flow.pt", "hift.pt")}
    # The flow is checked on the meta device first, so sizes that do not fit its file fail
    # before they are allocated. The vocoder computes with its window when built (it cannot be
    # built on the meta device); its config's bounds keep it small.
    with torch.device("meta"):
        check_layout(_built(Flow, flow_cfg, path / "flow.yaml"), states["flow.pt"], path / "flow.pt")
    # Built on the host and then moved: the modules compute tables (windows, frequencies) when
    # built, which a meta-device build would leave empty. They are small next to an LM.
    flow = _built(Flow, flow_cfg, path / "flow.yaml")
    generator = torch.Generator().manual_seed(seed)
    vocoder = _built(lambda cfg: CausalHiFTGenerator.from_config(cfg, generator), vocoder_cfg, path / "config.yaml")
    noise = new_noise(flow_cfg.output_size, generator)
    for module, name in ((flow, "flow.pt"), (vocoder, "hift.pt")):
        load_into(module, states.pop(name), path / name)
    dtype = torch.float16 if fp16 else torch.float32
    flow = flow.to(device, dtype).eval().requires_grad_(False)
    # The excitation noise (300 s of 9 harmonics, 0.26 GB) is read a chunk at a time: on a GPU it
    # stays in host memory, read where it lies (engine.ops.host_rows), and never passes the device.
    source, excitation = vocoder.m_source, vocoder.m_source.noise
    source.noise = torch.empty(0)
    vocoder = vocoder.to(device).eval().requires_grad_(False)
    source.noise = table_home(excitation, device)
    return Token2wavModel(path, flow, vocoder, flow_cfg, vocoder_cfg, noise.to(device, dtype))


def _built(make, cfg, source: Path):
    """`make(cfg)`, a module's own refusal of its numbers (ValueError) naming the file they
    came from."""
    try:
        return make(cfg)
    except ValueError as exc:
        raise CheckpointError(f"{source}: {exc}") from None
