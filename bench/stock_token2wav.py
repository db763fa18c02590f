"""The stock Step-Audio2 token2wav (`minicpmo-utils` 1.0.7, module `stepaudio2`, installed
--no-deps) for the benchmark and the parity tests: its modules built with given numbers and
random weights, written as an official model directory our loader reads, loaded back as
`Token2wav.__init__` loads them, and streamed by its own `set_stream_cache` / `stream`.

The package's `__init__` imports the whole speech front end (ONNX tokenizers, torchaudio, …)
only to export `Token2wav`, so its submodules are imported without it, unchanged. Front-end-only
imports that are not installed get an empty placeholder module (calling anything from one
raises); what the streaming path uses must be installed: numpy, scipy, einops, PyYAML.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

import torch

from engine.token2wav.prompt import Prompt
from engine.token2wav.token2wav_config import FlowConfig, VocoderConfig, read_flow_config, read_vocoder_config
from engine.token2wav.token2wav_loading import read_pt

FLOW_YAML = """\
# HyperPyYAML as the official files write it (object tags, references)
sample_rate: 24000
token_frame_rate: 25
flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec
    input_size: 512
    output_size: 80
    spk_embed_dim: 192
    output_type: 'mel'
    vocab_size: 6561
    encoder: !new:cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2
        output_size: 512
        attention_heads: 8
        linear_units: 2048
        num_blocks: 6
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: 512
        pre_lookahead_len: 3
        num_up_blocks: 4
        up_stride: 2
        up_scale_factor: 2
        key_bias: True
    decoder: !new:cosyvoice2.flow.flow_matching.CausalConditionalCFM
        inference_cfg_rate: 0.7
        estimator: !new:cosyvoice2.flow.decoder_dit.DiT
            in_channels: 320
            out_channels: 80
            mlp_ratio: 4.0
            depth: 16
            num_heads: 8
            head_dim: 64
            hidden_size: 512
"""
"""The official Step-Audio2 `flow.yaml` (its numbers: the full-size model)."""

VOCODER_YAML = """\
sample_rate: 24000
hift: !new:cosyvoice.hifigan.generator.CausalHiFTGenerator
    in_channels: 80
    base_channels: 512
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 5, 3]
    upsample_kernel_sizes: [16, 11, 7]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: [7, 7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99
    conv_pre_look_right: 4
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.CausalConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: 512
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: 8000
    center: False
"""
"""The official Step-Audio2 vocoder `config.yaml`."""

STOCK_ROWS = 1000
"""Estimator attention rows the stock decoder's cache buffer holds (`att_cache_buffer`)."""
STOCK_STEPS = 16
"""Euler steps it holds."""

_FRONT_END = ("s3tokenizer", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi", "hyperpyyaml",
              "librosa", "librosa.filters", "onnxruntime")


def stock(module: str):
    """`stepaudio2.<module>` from the installed minicpmo-utils, e.g. stock("causal_vocoder.generator")."""
    if "stepaudio2" not in sys.modules:
        spec = importlib.util.find_spec("stepaudio2")
        if spec is None:
            raise ModuleNotFoundError("stepaudio2 (pip install --no-deps minicpmo-utils==1.0.7)")
        _stand_in_for_the_front_end()
        package = types.ModuleType("stepaudio2")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["stepaudio2"] = package
    return importlib.import_module(f"stepaudio2.{module}")


def stock_token2wav():
    """The stock `stepaudio2.token2wav` module, for its streaming logic (`Token2wav.stream`,
    `set_stream_cache`, the cache trimming and the vocoder's first-chunk silence)."""
    return stock("token2wav")


def _stand_in_for_the_front_end() -> None:
    for name in sorted(name for name in _FRONT_END if not _importable(name.split(".")[0])):
        placeholder = types.ModuleType(name)
        placeholder.__path__ = []
        # A spec without an origin: torch._dynamo looks some of these names up (find_spec) and
        # skips a module it cannot locate, where a missing spec would raise.
        placeholder.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        placeholder.__getattr__ = functools.partial(_unavailable, name)  # `from name import x` gets a stand-in
        sys.modules[name] = placeholder
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, placeholder)


def _importable(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        importlib.import_module(name)
    except ImportError:  # absent, or present without its own needs (minicpmo-utils' s3tokenizer wants onnx)
        return False
    return True


def _unavailable(module: str, attribute: str):
    if attribute.startswith("__"):
        raise AttributeError(attribute)

    def refuse(*args, **kwargs):
        raise RuntimeError(f"{module}.{attribute} is not installed here; the stock streaming path does not use it")
    return refuse


# --- the model -----------------------------------------------------------------------------------

def build_stock(flow_cfg: FlowConfig, vocoder_cfg: VocoderConfig) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The stock flow (`CausalMaskedDiffWithXvec`) and vocoder (`CausalHiFTGenerator`) with the
    given numbers, as the official YAML files make them; weights as the stock initialises them,
    from torch's global generator (its noise tables too)."""
    enc, dit = stock("cosyvoice2.transformer.upsample_encoder_v2"), stock("cosyvoice2.flow.decoder_dit")
    cfm, flow_mod = stock("cosyvoice2.flow.flow_matching"), stock("cosyvoice2.flow.flow")
    gen, f0 = stock("causal_vocoder.generator"), stock("causal_vocoder.f0_predictor")
    encoder = enc.UpsampleConformerEncoderV2(**vars(flow_cfg.encoder))
    decoder = cfm.CausalConditionalCFM(dit.DiT(**vars(flow_cfg.estimator)), flow_cfg.inference_cfg_rate)
    flow = flow_mod.CausalMaskedDiffWithXvec(input_size=flow_cfg.input_size, output_size=flow_cfg.output_size,
                                             spk_embed_dim=flow_cfg.spk_embed_dim, vocab_size=flow_cfg.vocab_size,
                                             encoder=encoder, decoder=decoder)
    # Lists, as the YAML gives them (the stock code concatenates them with lists).
    numbers = {k: _lists(v) for k, v in dataclasses.asdict(vocoder_cfg).items()}
    istft = {"n_fft": numbers.pop("istft_n_fft"), "hop_len": numbers.pop("istft_hop_len")}
    predictor = f0.CausalConvRNNF0Predictor(num_class=1, in_channels=vocoder_cfg.in_channels,
                                            cond_channels=numbers.pop("f0_cond_channels"))
    hift = gen.CausalHiFTGenerator(**numbers, istft_params=istft, f0_predictor=predictor)
    return flow.eval(), hift.eval()


def _lists(value):
    return [_lists(v) for v in value] if isinstance(value, tuple) else value


def write_model_dir(folder: Path, seed: int, flow_yaml: str = FLOW_YAML,
                    vocoder_yaml: str = VOCODER_YAML) -> tuple[torch.nn.Module, torch.nn.Module]:
    """An official token2wav directory in `folder` with random weights: the YAML files as
    given, the stock modules built with their numbers (read by our safe reader: the stock
    would run hyperpyyaml) and perturbed (the stock initialisation zeroes the DiT's gates and
    output, which would make every chunk the same), their state dicts as flow.pt and hift.pt.
    Returns the stock modules, on the CPU. Torch's global generator is left as it was."""
    folder = Path(folder)
    (folder / "flow.yaml").write_text(flow_yaml)
    (folder / "config.yaml").write_text(vocoder_yaml)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        flow, hift = build_stock(read_flow_config(folder / "flow.yaml"), read_vocoder_config(folder / "config.yaml"))
        with torch.no_grad():
            for p in (*flow.parameters(), *hift.parameters()):
                p.add_(torch.randn_like(p) * 0.02)
    torch.save(flow.state_dict(), folder / "flow.pt")
    torch.save(hift.state_dict(), folder / "hift.pt")
    return flow, hift


def load_stock(folder: Path, device: torch.device | str, fp16: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The stock modules from an official directory, loaded as `Token2wav.__init__` loads them:
    the flow halved first with `fp16`, then its weights, then moved; the vocoder in float32."""
    folder = Path(folder)
    flow, hift = build_stock(read_flow_config(folder / "flow.yaml"), read_vocoder_config(folder / "config.yaml"))
    if fp16:
        flow.half()
    flow.load_state_dict(read_pt(folder / "flow.pt"), strict=True)
    hift.load_state_dict(read_pt(folder / "hift.pt"), strict=True)
    return flow.to(device).eval(), hift.float().to(device).eval()


def check_stock_limits(prompt_frames: int, chunk_tokens: int, steps: int, flow_cfg: FlowConfig) -> None:
    """What the stock decoder's fixed cache buffers hold (16 steps of a 16-block, 8-head, 64-wide
    DiT, 1000 rows): a stream that needs more would fail inside the stock code."""
    est = flow_cfg.estimator
    if (est.depth, est.num_heads, est.head_dim, est.hidden_size) != (16, 8, 64, 512):
        raise ValueError("the stock decoder's cache buffers only fit the official DiT (16 blocks, 8 heads of 64, 512)")
    if not 1 <= steps <= STOCK_STEPS:
        raise ValueError(f"the stock decoder holds 1..{STOCK_STEPS} Euler steps, got {steps}")
    rows = prompt_frames + 100 + flow_cfg.encoder.up_stride * chunk_tokens
    if rows > STOCK_ROWS:
        raise ValueError(f"a stream needs {rows} estimator rows; the stock decoder holds {STOCK_ROWS}")


# --- the stream ------------------------------------------------------------------------------------

def stock_token2wav_runtime(flow: torch.nn.Module, hift: torch.nn.Module, steps: int, fp16: bool = False):
    """A stock `Token2wav` over built modules: its constructor's attributes for the streaming
    path, without the constructor (it loads the ONNX speech tokenizer and speaker model, which
    a prepared prompt does not use, and needs CUDA). Its checks are kept."""
    t2w = stock_token2wav()
    runtime = t2w.Token2wav.__new__(t2w.Token2wav)
    runtime.float16, runtime.n_timesteps = fp16, steps
    runtime.device = next(flow.parameters()).device
    runtime.flow, runtime.hift = flow, hift
    runtime.bounded_vocoder = stock("causal_vocoder.bounded_vocoder").BoundedVocoder(hift)
    runtime.sample_rate, runtime.hop_samples = 24000, 480
    runtime.vocoder_delay_frames = hift.f0_predictor.condnet[0].causal_padding + hift.conv_pre_look_right + 1
    if runtime.vocoder_delay_frames != 8:
        raise ValueError(f"the stock Token2wav requires the 8-frame causal delay, got {runtime.vocoder_delay_frames}")
    runtime.vocoder_delay_samples = runtime.vocoder_delay_frames * runtime.hop_samples
    runtime.source_cache_len = runtime.vocoder_delay_samples
    runtime.cache, runtime.stream_cache, runtime.hift_cache_dict, runtime._stream_prompt = {}, None, {}, None
    return runtime


def start_stock_stream(runtime, prompt: Prompt, name: str = "voice") -> None:
    """A new stream on `runtime` from a prepared prompt (as `_prepare_prompt` would leave it for
    a WAV file: tokens, their count, the speaker embedding, the mel and its length)."""
    device = runtime.device
    lens = torch.tensor([prompt.tokens.shape[1]], dtype=torch.int32, device=device)
    runtime.cache[name] = (prompt.tokens.to(device, torch.int32), lens, prompt.speaker.to(device, torch.float32),
                           prompt.mel.to(device, torch.float32), lens * 2)
    runtime.stream_cache = None  # the previous stream's caches go before the new ones are made
    runtime.set_stream_cache(name)


def stock_stream_bytes(runtime) -> int:
    """Bytes of a stream's state in the stock runtime: the tensors of its flow cache and its
    vocoder cache, each storage counted once (a cache that is a view of the decoder's buffers
    counts the whole buffer, which is what it holds)."""
    tensors = [*runtime.stream_cache.values(), *runtime.hift_cache_dict.values()]
    return storage_bytes(t for t in tensors if isinstance(t, torch.Tensor))


def stock_scratch_bytes(runtime) -> int:
    """The decoder's cache buffers (every step's new caches are written there first), held by
    the model whether a stream views them or not."""
    decoder = runtime.flow.decoder
    return storage_bytes((decoder.cnn_cache_buffer, decoder.att_cache_buffer))


def storage_bytes(tensors) -> int:
    """Bytes of the storages behind `tensors`, each counted once."""
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(seen.values())
