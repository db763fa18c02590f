"""The second family's checkpoint: a folder with `config.json` (model_type "second-test", its
rates, step and sizes) and `weights.safetensors`; how it is written, claimed, planned for and
loaded."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from engine.config.checks import read_json
from engine.errors import CheckpointError
from engine.loading.memory_plan import MemoryPlan
from engine.state import Region

MODEL_TYPE = "second-test"
WEIGHTS = "weights.safetensors"
CONFIG = {
    "model_type": MODEL_TYPE, "input_rate": 16000, "output_rate": 24000, "step_s": 1.0,
    "dim": 8, "window": 160, "speak_rows": 150, "row": 240, "speak_every": 3, "context_steps": 30,
    "words": ["hello", "again", "listen", "there"],
}
"""A speaking step gives speak_rows x row samples: 1.5 s at 24 kHz."""


def write(folder: Path, seed: int = 0, **changes) -> Path:
    """A checkpoint of random weights in the family's layout."""
    config = {**CONFIG, **changes}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    g = torch.Generator().manual_seed(seed)
    dim = config["dim"]

    def rand(*shape):
        return torch.randn(*shape, generator=g) / shape[-1] ** 0.5

    save_file({"hear": rand(dim, config["window"]), "decide": rand(dim), "text": rand(len(config["words"]), dim),
               "times": rand(config["speak_rows"], dim) * dim ** 0.5, "speak": rand(config["row"], dim)},
              str(folder / WEIGHTS))
    return folder


def claims(root: Path, meta: dict) -> bool:
    return meta.get("model_type") == MODEL_TYPE


@dataclasses.dataclass
class SecondModel:
    """engine.families.protocol.DuplexModel for the second family."""
    name: str
    path: Path
    config: dict
    tensors: dict[str, torch.Tensor]
    notice: str = ""
    family = "second"
    weights = "fp32"
    weights_option = "bf16"
    predictor_file = None

    @property
    def device(self) -> torch.device:
        return self.tensors["hear"].device

    @property
    def input_rate(self) -> int:
        return self.config["input_rate"]

    @property
    def output_rate(self) -> int:
        return self.config["output_rate"]

    @property
    def step_samples(self) -> int:
        return round(self.config["input_rate"] * self.config["step_s"])

    def regions(self) -> list[Region]:
        """Its state: a summary per step heard on its own clock, and the running sum and count."""
        dim = self.config["dim"]
        return [Region("second.heard", (dim,), clock="second", retain=self.config["context_steps"]),
                Region("second.sum", (dim,)), Region("second.count", (1,), torch.int64)]


def _config(root: Path) -> dict:
    config = read_json(root / "config.json")
    if config.get("input_rate", 0) * config.get("step_s", 0) % config.get("window", 1):
        raise CheckpointError(f"{root / 'config.json'}: a step is not a whole number of windows")
    return config


def load(root: Path, repo: str | None, device: torch.device, dtype: torch.dtype | None = None,
         weights: str | None = None) -> SecondModel:
    if weights not in (None, "bf16"):
        raise CheckpointError(f"{root}: the second family has float weights only, not {weights}")
    path = root / WEIGHTS
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    return SecondModel(repo or root.name, root, _config(root), load_file(str(path), device=str(device)))


def plan_memory(root: Path, repo: str | None, weights: str | None, device) -> MemoryPlan:
    config = _config(root)
    model = SecondModel(root.name, root, config, {})
    state = sum(r.bytes_full() for r in model.regions())
    free = torch.cuda.mem_get_info(device)[0] if torch.device(device).type == "cuda" else None
    return MemoryPlan(repo or root.name, "bf16", str(device), (root / WEIGHTS).stat().st_size, state,
                      config["context_steps"] * config["step_s"], free)


def check_persona(root: Path, repo: str | None, voice: str | None, role: str) -> None:
    if voice or role.strip():
        raise ValueError(f"{repo or root.name} takes no voice or role prompt")


def files(listing: set[str], config: dict, weights: str | None, repo: str, read=None) -> list[str]:
    missing = [name for name in ("config.json", WEIGHTS) if name not in listing]
    if missing:
        raise ValueError(f"{repo}: not a second-family checkpoint (it has no {', '.join(missing)})")
    return ["config.json", WEIGHTS]
