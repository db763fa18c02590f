"""Model folders to break: copies of the demo model, a small token2wav folder and the demo
predictor, each with one file rewritten, and the check that a refusal is one line naming
the file."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from bench.stock_token2wav import FLOW_YAML, VOCODER_YAML
from engine.files.paths import DEMO_MODEL_DIR, PREDICTOR_NAME

# A token2wav small enough to build in a moment: the official files' layout and tags, smaller numbers.
SMALL_FLOW = {"output_size: 512": "output_size: 64", "input_size: 512\n        pre": "input_size: 64\n        pre",
              "attention_heads: 8": "attention_heads: 2", "linear_units: 2048": "linear_units: 128",
              "num_blocks: 6": "num_blocks: 1", "num_up_blocks: 4": "num_up_blocks: 1",
              "    input_size: 512\n    output_size: 80": "    input_size: 64\n    output_size: 80",
              "vocab_size: 6561": "vocab_size: 300", "depth: 16": "depth: 1", "num_heads: 8": "num_heads: 2",
              "head_dim: 64": "head_dim: 16", "hidden_size: 512": "hidden_size: 32"}
SMALL_VOCODER = {"base_channels: 512": "base_channels: 16", "cond_channels: 512": "cond_channels: 16"}


def _replaced(text: str, changes: dict) -> str:
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


SMALL_FLOW_YAML = _replaced(FLOW_YAML, SMALL_FLOW)
SMALL_VOCODER_YAML = _replaced(VOCODER_YAML, SMALL_VOCODER)


def demo_copy(folder: Path) -> Path:
    """The demo model's files in `folder` (a model folder the tests may rewrite)."""
    shutil.copytree(DEMO_MODEL_DIR, folder, dirs_exist_ok=True)
    return folder


def write_json(path: Path, data) -> Path:
    # allow_nan: a hostile file may hold NaN, which Python's json reads.
    path.write_text(json.dumps(data, allow_nan=True))
    return path


def demo_json(name: str) -> dict:
    return json.loads((DEMO_MODEL_DIR / name).read_text())


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def token2wav_dir(folder: Path) -> Path:
    """A token2wav folder (flow.yaml, flow.pt, config.yaml, hift.pt) of our modules, small."""
    from engine.token2wav.flow import Flow
    from engine.token2wav.token2wav_config import read_flow_config, read_vocoder_config
    from engine.token2wav.vocoder import CausalHiFTGenerator

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "flow.yaml").write_text(SMALL_FLOW_YAML)
    (folder / "config.yaml").write_text(SMALL_VOCODER_YAML)
    flow = Flow(read_flow_config(folder / "flow.yaml"))
    vocoder = CausalHiFTGenerator.from_config(read_vocoder_config(folder / "config.yaml"))
    torch.save(flow.state_dict(), folder / "flow.pt")
    torch.save(vocoder.state_dict(), folder / "hift.pt")
    return folder


def demo_predictor() -> tuple[dict, dict[str, torch.Tensor]]:
    """The demo predictor's metadata (parsed) and tensors."""
    with safe_open(str(DEMO_MODEL_DIR / PREDICTOR_NAME), "pt") as f:
        meta = json.loads(f.metadata()["diffuplex"])
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (not iterable)
    return meta, tensors


def write_predictor(path: Path, metadata: str, tensors: dict[str, torch.Tensor]) -> Path:
    save_file(tensors, str(path), metadata={"diffuplex": metadata})
    return path


def assert_named(exc: BaseException, path: Path, *words: str) -> None:
    """`exc` is a one-line message naming the file `path` (and holding each of `words`)."""
    message = str(exc)
    assert "\n" not in message, message
    assert path.name in message, message
    for word in words:
        assert word in message, message


# --- mutations for the fuzz test: values replaced, keys dropped, in JSON and in YAML lines ---

class Deep(int):
    """A value written as lists nested this deep (json.dumps itself would overflow on it)."""


_DEEP_MARK = "__deep_value__"


def paths(data, prefix: tuple = ()) -> list[tuple]:
    """Every place in `data` a value sits (objects' keys, lists' indexes), outermost first."""
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            out += paths(value, (*prefix, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += paths(value, (*prefix, i))
    return out


def mutated(data, edits: list[tuple]) -> str:
    """`data` as JSON text with each edit applied: ("set", path, value) or ("drop", path); a
    path no longer there (an earlier edit removed it) is skipped."""
    data = json.loads(json.dumps(data))
    deep = []
    for kind, path, *value in edits:
        if not path:
            data = value[0] if value else {}
            continue
        parent = data
        for part in path[:-1]:
            try:
                parent = parent[part]
            except (KeyError, IndexError, TypeError):
                break
        else:
            last = path[-1]
            if not isinstance(parent, dict | list) or (isinstance(parent, list) and not
                                                       (isinstance(last, int) and last < len(parent))):
                continue
            if isinstance(parent, dict) and not isinstance(last, str):
                continue
            if kind == "drop":
                parent.pop(last) if isinstance(parent, list) else parent.pop(last, None)
            else:
                parent[last] = _marked(value[0], deep)
    text = json.dumps(_marked(data, deep), allow_nan=True)
    for depth in deep:
        text = text.replace(f'"{_DEEP_MARK}"', deep_json(depth), 1)
    return text


def _marked(value, deep: list):
    if isinstance(value, Deep):
        deep.append(int(value))
        return _DEEP_MARK
    return value


def yaml_scalar(value) -> str:
    """`value` written as YAML for one line's value."""
    if isinstance(value, Deep):
        return deep_json(int(value))
    if isinstance(value, float) and value != value:
        return ".nan"
    if isinstance(value, float) and abs(value) == float("inf"):
        return ".inf" if value > 0 else "-.inf"
    return json.dumps(value)


def yaml_lines_mutated(text: str, edits: list[tuple]) -> str:
    """`text` with edits to its `key: value` lines: ("set", line, value) replaces the value,
    ("drop", line) removes the line; line numbers count in the original text."""
    lines = text.splitlines()
    dropped = set()
    for kind, index, *value in edits:
        index %= len(lines)
        if kind == "drop":
            dropped.add(index)
        elif ":" in lines[index]:
            key = lines[index].split(":", 1)[0]
            lines[index] = f"{key}: {yaml_scalar(value[0])}"
    return "\n".join(line for i, line in enumerate(lines) if i not in dropped) + "\n"


TARGETS = ("config.json", "mimi_config.json", "flow.yaml", "predictor")


class Loads:
    """One model folder per target, rewritten for each case: `load(target, text)` writes the
    file and loads what it belongs to; returns None on success, else the engine's refusal."""

    def __init__(self, folder: Path):
        from engine.families.moshi.lm.lm_config import from_lm_kwargs
        self.model = demo_copy(folder / "model")
        self.token2wav = token2wav_dir(folder / "token2wav")
        self.predictor_meta, self.predictor_tensors = demo_predictor()
        self.cfg = from_lm_kwargs(demo_json("config.json"), "config.json", "demo")
        self.originals = {"config.json": demo_json("config.json"), "mimi_config.json": demo_json("mimi_config.json"),
                          "flow.yaml": SMALL_FLOW_YAML, "predictor": self.predictor_meta}

    def file(self, target: str) -> Path:
        if target == "flow.yaml":
            return self.token2wav / "flow.yaml"
        return self.model / (PREDICTOR_NAME if target == "predictor" else target)

    def load(self, target: str, text: str):
        from engine.errors import CheckpointError
        from engine.families.moshi.diffuplex.predictor import load_predictor
        from engine.families.moshi.mimi import load_mimi
        from engine.loading.models import load_model
        from engine.token2wav.token2wav_loading import load_token2wav

        path = self.file(target)
        if target == "predictor":
            write_predictor(path, text, self.predictor_tensors)
        else:
            path.write_text(text)
        try:
            if target == "config.json":
                load_model(self.model)
            elif target == "mimi_config.json":
                load_mimi(self.model)
            elif target == "flow.yaml":
                load_token2wav(self.token2wav)
            else:
                load_predictor(path, self.cfg)
            return None
        except CheckpointError as exc:
            return exc
        finally:
            original = self.originals[target]
            if target == "predictor":
                write_predictor(path, json.dumps(original), self.predictor_tensors)
            else:
                path.write_text(original if isinstance(original, str) else json.dumps(original))


def _child(limit: int) -> None:
    """Runs cases (JSON lines of [target, text] on stdin) under an address-space limit, after
    the imports: one JSON line out per case, "ok", "named" (one line naming the folder) or
    "other" with the exception."""
    import resource
    import sys
    import tempfile

    loads = Loads(Path(tempfile.mkdtemp(prefix="hostile-")))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for line in sys.stdin:
        target, text = json.loads(line)
        try:
            exc = loads.load(target, text)
            message = "" if exc is None else str(exc)
            named = "\n" not in message and str(loads.file(target).parent) in message
            result = "ok" if exc is None else "named" if named else "other"
        except BaseException as exc:  # what the test is looking for: reported, not raised
            result, message = "other", f"{type(exc).__name__}: {exc}"
        print(json.dumps([target, result, message[:300]]), flush=True)


if __name__ == "__main__":
    import sys
    _child(int(sys.argv[1]))
