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


def _loader(path: Path) -> type:
    class Loader(yaml.SafeLoader):
        pass

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
    try:
        data = yaml.load(path.read_text(), Loader=_loader(path))  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise CheckpointError(f"{path}: not a readable YAML file ({str(exc).splitlines()[0]})") from None
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: not a text file") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a mapping at the top")
    return _resolve(data, data, path)


def _resolve(value, root: dict, path: Path):
    if isinstance(value, _Ref):
        match = _REF.match(value.strip())
        if not match:
            raise CheckpointError(f"{path}: unsupported reference !ref {value} (only !ref <key>)")
        target = root
        for part in re.split(r"[.\[\]]+", match.group(1)):
            if part:
                if not isinstance(target, dict) or part not in target:
                    raise CheckpointError(f"{path}: !ref {value} names no key")
                target = target[part]
        return _resolve(target, root, path)
    if isinstance(value, _Tagged):
        return _Tagged(value.tag, {k: _resolve(v, root, path) for k, v in value.items()})
    if isinstance(value, dict):
        return {k: _resolve(v, root, path) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, root, path) for v in value]
    return value


def _section(data: dict, key: str, tag: str, path: Path) -> dict:
    node = data.get(key)
    if not isinstance(node, _Tagged) or node.tag != tag:
        found = node.tag if isinstance(node, _Tagged) else type(node).__name__
        raise CheckpointError(f"{path}: {key} must be !new:{tag}, found {found}")
    return node


def _fill(cls, values: dict, path: Path, where: str, renames: dict | None = None):
    """An instance of dataclass `cls` from the YAML mapping's numbers; unknown ones ignored
    (dropout rates and the like do nothing at inference), wrong types refused."""
    kwargs = {}
    for field in dataclasses.fields(cls):
        key = (renames or {}).get(field.name, field.name)
        if key not in values or dataclasses.is_dataclass(field.default):
            continue
        value = values[key]
        default = field.default
        if isinstance(default, tuple):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value) if isinstance(value, list) else value
        ok = isinstance(value, type(default)) or (isinstance(default, float) and isinstance(value, int))
        if not ok or isinstance(value, bool) != isinstance(default, bool):
            raise CheckpointError(f"{path}: {where}.{key} = {value!r}, expected {type(default).__name__}")
        kwargs[field.name] = value
    return cls(**kwargs)


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
            raise CheckpointError(f"{path}: flow.encoder.{key} = {encoder[key]!r} is not supported (need {expected!r})")
    if flow.get("output_type", "mel") != "mel":
        raise CheckpointError(f"{path}: flow.output_type = {flow['output_type']!r} is not supported (need 'mel')")
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
