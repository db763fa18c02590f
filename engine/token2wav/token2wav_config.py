"""The numbers of a Step-Audio2 token2wav model, read from its official YAML files.

`flow.yaml` and `config.yaml` are HyperPyYAML: object tags (`!new:module.Class`) that the
stock loader executes, and `!ref <key>` references between values. Here they are read with
a safe loader that executes nothing: a tagged mapping becomes a plain mapping remembering its
tag, a reference is resolved against the file's own top-level keys, and any other tag (a
`!!python/...` one above all) is refused. Only the tags of the official files are accepted,
and only their numbers are used: the classes are always ours.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import yaml

from ..config.checks import MAX_CONFIG_BYTES, MAX_DEPTH, bounded_float, bounded_int, shown
from ..errors import CheckpointError

FLOW_TAGS = {
    "flow": "cosyvoice2.flow.flow.CausalMaskedDiffWithXvec",
    "encoder": "cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2",
    "decoder": "cosyvoice2.flow.flow_matching.CausalConditionalCFM",
    "estimator": "cosyvoice2.flow.decoder_dit.DiT",
}
VOCODER_TAGS = {
    "hift": "cosyvoice.hifigan.generator.CausalHiFTGenerator",
    "f0_predictor": "cosyvoice.hifigan.f0_predictor.CausalConvRNNF0Predictor",
}
MEL = dict(n_fft=1920, num_mels=80, sampling_rate=24000, hop_size=480, win_size=1920, fmin=0, fmax=8000,
           center=False)
"""The mel features the vocoder was trained on (the stock loader refuses any other)."""


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    input_size: int = 512
    output_size: int = 512
    attention_heads: int = 8
    linear_units: int = 2048
    num_blocks: int = 6
    num_up_blocks: int = 4
    pre_lookahead_len: int = 3
    up_stride: int = 2
    up_scale_factor: int = 2
    key_bias: bool = True
    normalize_before: bool = True


@dataclasses.dataclass(frozen=True)
class DiTConfig:
    in_channels: int = 320
    out_channels: int = 80
    mlp_ratio: float = 4.0
    depth: int = 16
    num_heads: int = 8
    head_dim: int = 64
    hidden_size: int = 512


@dataclasses.dataclass(frozen=True)
class FlowConfig:
    input_size: int = 512
    output_size: int = 80
    spk_embed_dim: int = 192
    vocab_size: int = 6561
    inference_cfg_rate: float = 0.7
    encoder: EncoderConfig = EncoderConfig()
    estimator: DiTConfig = DiTConfig()


@dataclasses.dataclass(frozen=True)
class VocoderConfig:
    in_channels: int = 80
    base_channels: int = 512
    nb_harmonics: int = 8
    sampling_rate: int = 24000
    nsf_alpha: float = 0.1
    nsf_sigma: float = 0.003
    nsf_voiced_threshold: float = 10
    upsample_rates: tuple[int, ...] = (8, 5, 3)
    upsample_kernel_sizes: tuple[int, ...] = (16, 11, 7)
    istft_n_fft: int = 16
    istft_hop_len: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 7, 11)
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99
    conv_pre_look_right: int = 4
    f0_cond_channels: int = 512

    @property
    def hop(self) -> int:
        """Audio samples per mel frame."""
        product = 1
        for rate in self.upsample_rates:
            product *= rate
        return product * self.istft_hop_len


class _Tagged(dict):
    """A mapping that carried an object tag in the file."""

    def __init__(self, tag: str, items):
        super().__init__(items)
        self.tag = tag


class _Ref(str):
    """A `!ref <key>` scalar, resolved once the whole file is read."""


_MAX_ALIASES = 64
"""YAML aliases (`*name`) in one file: the official files use none. Each is expanded when the
references are resolved, so a few nested ones could multiply a small file a billion times."""
_MAX_VALUES = 100_000
"""Values in a file once its aliases and references are expanded (the official flow.yaml: 60)."""
_MAX_REFS = 32
"""References followed one through another (the official files: 1)."""


def _loader(path: Path) -> type:
    class Loader(yaml.SafeLoader):
        aliases = depth = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > _MAX_ALIASES:
                    raise CheckpointError(f"{path}: more than {_MAX_ALIASES} YAML aliases")
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise CheckpointError(f"{path}: nested deeper than {MAX_DEPTH} levels")
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    def tagged(loader, suffix, node):
        if not isinstance(node, yaml.MappingNode):
            raise CheckpointError(f"{path}: tag !{suffix} on a {node.id}, expected a mapping")
        return _Tagged(suffix, loader.construct_mapping(node, deep=True))

    def named(loader, suffix, node):  # `!name:fn` with arguments: a function's keyword arguments
        items = loader.construct_mapping(node, deep=True) if isinstance(node, yaml.MappingNode) else {}
        return _Tagged(suffix, items)

    Loader.add_multi_constructor("!new:", tagged)
    Loader.add_multi_constructor("!name:", named)
    Loader.add_constructor("!ref", lambda loader, node: _Ref(loader.construct_scalar(node)))
    return Loader


_REF = re.compile(r"^<([\w.\[\]]+)>$")


def read_yaml(path: str | Path) -> dict:
    """A HyperPyYAML file as plain data (tagged mappings keep their tag); nothing executed."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise CheckpointError(f"{path}: {size} bytes is too large for a config file (at most {MAX_CONFIG_BYTES})")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_loader(path))  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise CheckpointError(f"{path}: not a readable YAML file ({str(exc).splitlines()[0]})") from None
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: not a text file") from None
    except ValueError as exc:  # a value its constructor refuses: an integer of too many digits, a bad date
        raise CheckpointError(f"{path}: not a readable YAML file ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a mapping at the top")
    return _Resolver(data, path).resolve(data, (), 0)


class _Resolver:
    """Copies the file's data with each `!ref <key>` replaced by what it names, counting what
    it makes: a cycle of references is named, and an expansion past _MAX_VALUES refused."""

    def __init__(self, root: dict, path: Path):
        self.root, self.path, self.made = root, path, 0

    def resolve(self, value, refs: tuple[str, ...], depth: int):
        self.made += 1
        if self.made > _MAX_VALUES:
            raise CheckpointError(f"{self.path}: expands to more than {_MAX_VALUES} values "
                                  f"(aliases or !ref repeat too much)")
        if depth > MAX_DEPTH + _MAX_REFS:  # a YAML alias inside the node it names
            raise CheckpointError(f"{self.path}: nested deeper than {MAX_DEPTH} levels once expanded "
                                  f"(a recursive alias?)")
        if isinstance(value, _Ref):
            return self._follow(value, refs, depth)
        if isinstance(value, _Tagged):
            return _Tagged(value.tag, {k: self.resolve(v, refs, depth + 1) for k, v in value.items()})
        if isinstance(value, dict):
            return {k: self.resolve(v, refs, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v, refs, depth + 1) for v in value]
        return value

    def _follow(self, value: str, refs: tuple[str, ...], depth: int):
        match = _REF.match(value.strip())
        if not match:
            raise CheckpointError(f"{self.path}: unsupported reference !ref {value} (only !ref <key>)")
        key = match.group(1)
        if key in refs:
            chain = " -> ".join(f"<{k}>" for k in (*refs[refs.index(key):], key))
            what = "refers to itself" if len(refs) - refs.index(key) == 1 else f"is a cycle ({chain})"
            raise CheckpointError(f"{self.path}: !ref <{key}> {what}")
        if len(refs) >= _MAX_REFS:
            raise CheckpointError(f"{self.path}: more than {_MAX_REFS} references followed one through another")
        target = self.root
        for part in re.split(r"[.\[\]]+", key):
            if part:
                if not isinstance(target, dict) or part not in target:
                    raise CheckpointError(f"{self.path}: !ref {value} names no key")
                target = target[part]
        return self.resolve(target, (*refs, key), depth + 1)


def _section(data: dict, key: str, tag: str, path: Path) -> dict:
    node = data.get(key)
    if not isinstance(node, _Tagged) or node.tag != tag:
        found = node.tag if isinstance(node, _Tagged) else type(node).__name__
        raise CheckpointError(f"{path}: {key} must be !new:{tag}, found {found}")
    return node


# Bounds on the numbers that size the flow and the vocoder, checked before anything is built:
# "where.key" -> (least, most); a list's entries each. The official values are the dataclasses'
# defaults above (the flow 512 wide, a 16-deep DiT of 8 heads of 64, vocab 6561; the vocoder
# 512 channels over upsampling rates 8, 5, 3).
_BOUNDS = {
    "flow.input_size": (1, 4096), "flow.output_size": (1, 512), "flow.spk_embed_dim": (1, 4096),
    "flow.vocab_size": (1, 1 << 17), "flow.decoder.inference_cfg_rate": (0.0, 10.0),
    "flow.encoder.input_size": (1, 4096), "flow.encoder.output_size": (1, 4096),
    "flow.encoder.attention_heads": (1, 64), "flow.encoder.linear_units": (1, 16384),
    "flow.encoder.num_blocks": (1, 64), "flow.encoder.num_up_blocks": (1, 64),
    "flow.encoder.pre_lookahead_len": (0, 64), "flow.encoder.up_stride": (1, 16),
    "flow.encoder.up_scale_factor": (1, 16),
    "flow.decoder.estimator.in_channels": (1, 4096), "flow.decoder.estimator.out_channels": (1, 512),
    "flow.decoder.estimator.mlp_ratio": (0.25, 16.0), "flow.decoder.estimator.depth": (1, 64),
    "flow.decoder.estimator.num_heads": (1, 64), "flow.decoder.estimator.head_dim": (1, 512),
    "flow.decoder.estimator.hidden_size": (1, 4096),
    "hift.in_channels": (1, 512), "hift.base_channels": (1, 4096), "hift.nb_harmonics": (0, 64),
    "hift.sampling_rate": (8000, 192000), "hift.nsf_alpha": (0.0, 100.0), "hift.nsf_sigma": (0.0, 100.0),
    "hift.nsf_voiced_threshold": (0.0, 1e4), "hift.upsample_rates": (1, 64), "hift.upsample_kernel_sizes": (1, 128),
    "hift.istft_n_fft": (1, 4096), "hift.istft_hop_len": (1, 4096), "hift.resblock_kernel_sizes": (1, 64),
    "hift.resblock_dilation_sizes": (1, 64), "hift.source_resblock_kernel_sizes": (1, 64),
    "hift.source_resblock_dilation_sizes": (1, 64), "hift.lrelu_slope": (0.0, 1.0), "hift.audio_limit": (0.0, 10.0),
    "hift.conv_pre_look_right": (0, 64), "hift.f0_cond_channels": (1, 4096),
}
_MAX_ENTRIES = 8
"""Entries of a list of sizes (the official vocoder's longest: 3)."""


def _fill(cls, values: dict, path: Path, where: str, renames: dict | None = None):
    """An instance of dataclass `cls` from the YAML mapping's numbers; unknown ones ignored
    (dropout rates and the like do nothing at inference), wrong types and numbers out of
    their bounds refused."""
    kwargs = {}
    for field in dataclasses.fields(cls):
        key = (renames or {}).get(field.name, field.name)
        if key not in values or dataclasses.is_dataclass(field.default):
            continue
        value, default, name = values[key], field.default, f"{where}.{key}"
        if isinstance(default, tuple):
            value = _sizes(value, name, path, isinstance(default[0], tuple))
        else:
            ok = isinstance(value, type(default)) or (isinstance(default, float) and isinstance(value, int))
            if not ok or isinstance(value, bool) != isinstance(default, bool):
                raise CheckpointError(f"{path}: {name} = {shown(value)}, expected {type(default).__name__}")
            if name in _BOUNDS and not isinstance(value, bool):
                bounds = _BOUNDS[name]
                check = bounded_float if isinstance(default, float) else bounded_int
                value = check(value, name, str(path), *bounds)
        kwargs[field.name] = value
    return cls(**kwargs)


def _sizes(value, name: str, path: Path, nested: bool) -> tuple:
    """A list of sizes (of lists of sizes, `nested`) as tuples, each entry bounded."""
    kind = "a list of lists of integers" if nested else "a list of integers"
    if not isinstance(value, list) or not value or len(value) > _MAX_ENTRIES:
        raise CheckpointError(f"{path}: {name} = {shown(value)}, expected {kind} (1 to {_MAX_ENTRIES} entries)")
    if nested:
        return tuple(_sizes(v, f"{name}[{i}]", path, False) for i, v in enumerate(value))
    low, high = _BOUNDS.get(name.split("[")[0], (1, 4096))
    return tuple(bounded_int(v, f"{name}[{i}]", str(path), low, high) for i, v in enumerate(value))


def read_flow_config(path: str | Path) -> FlowConfig:
    path = Path(path)
    data = read_yaml(path)
    flow = _section(data, "flow", FLOW_TAGS["flow"], path)
    encoder = _section(flow, "encoder", FLOW_TAGS["encoder"], path)
    decoder = _section(flow, "decoder", FLOW_TAGS["decoder"], path)
    estimator = _section(decoder, "estimator", FLOW_TAGS["estimator"], path)
    for key, expected in (("input_layer", "linear"), ("pos_enc_layer_type", "rel_pos_espnet"),
                          ("selfattention_layer_type", "rel_selfattn"), ("activation_type", "swish")):
        if encoder.get(key, expected) != expected:
            raise CheckpointError(f"{path}: flow.encoder.{key} = {shown(encoder[key])} is not supported "
                                  f"(need {expected!r})")
    if flow.get("output_type", "mel") != "mel":
        raise CheckpointError(f"{path}: flow.output_type = {shown(flow['output_type'])} is not supported (need 'mel')")
    top = _fill(FlowConfig, flow, path, "flow")
    return dataclasses.replace(
        top, inference_cfg_rate=_fill(FlowConfig, decoder, path, "flow.decoder").inference_cfg_rate,
        encoder=_fill(EncoderConfig, encoder, path, "flow.encoder"),
        estimator=_fill(DiTConfig, estimator, path, "flow.decoder.estimator"))


def read_vocoder_config(path: str | Path) -> VocoderConfig:
    path = Path(path)
    data = read_yaml(path)
    hift = _section(data, "hift", VOCODER_TAGS["hift"], path)
    f0 = _section(hift, "f0_predictor", VOCODER_TAGS["f0_predictor"], path)
    istft = hift.get("istft_params", {})
    values = {**hift, "istft_n_fft": istft.get("n_fft", 16), "istft_hop_len": istft.get("hop_len", 4),
              "f0_cond_channels": f0.get("cond_channels", 512)}
    config = _fill(VocoderConfig, values, path, "hift")
    features = data.get("feat_extractor")
    if isinstance(features, dict):
        wrong = {k: features[k] for k, v in MEL.items() if k in features and features[k] != v}
        if wrong:
            raise CheckpointError(f"{path}: feat_extractor {wrong} differs from the vocoder's mel features {MEL}")
    if config.sampling_rate != 24000 or config.hop != 480:
        raise CheckpointError(f"{path}: hift must make 24 kHz audio with 480 samples per mel frame "
                              f"(found {config.sampling_rate} Hz, {config.hop} samples)")
    return config
