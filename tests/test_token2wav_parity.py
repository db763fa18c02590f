"""Our Step-Audio2 token2wav against the stock one (minicpmo-utils 1.0.7), end to end: the same
random weights written as an official model directory (flow.yaml, flow.pt, config.yaml,
hift.pt) and read by our loader, the same prepared voice prompt, the same token chunks.

The stock side is its own `Token2wav.set_stream_cache` and `Token2wav.stream` (cache trimming
and the vocoder's first-chunk silence included), run on a Token2wav whose constructor is
skipped: it loads the ONNX speech tokenizer and speaker model and needs CUDA, neither of which
a prepared prompt on the CPU uses. The DiT is full size (the stock decoder's cache buffers
only fit it); the conformer and the vocoder are small.
"""
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from bench.stock_token2wav import (
    FLOW_YAML,
    VOCODER_YAML,
    start_stock_stream,
    stock_token2wav_runtime,
    write_model_dir,
)
from engine.errors import CheckpointError
from engine.options import RuntimeOptions
from engine.token2wav.chunk_plan import chunk_bounds
from engine.token2wav.token2wav_loading import load_token2wav
from engine.token2wav.token2wav_stream import Prompt, Token2wavStream

STEPS = 2
VOCAB = 300
SMALL_ENCODER = {"output_size: 512": "output_size: 64", "input_size: 512\n        pre": "input_size: 64\n        pre",
                 "attention_heads: 8": "attention_heads: 2", "linear_units: 2048": "linear_units: 128",
                 "num_blocks: 6": "num_blocks: 2", "num_up_blocks: 4": "num_up_blocks: 2",
                 "    input_size: 512\n    output_size: 80": "    input_size: 64\n    output_size: 80",
                 "vocab_size: 6561": f"vocab_size: {VOCAB}"}
SMALL_VOCODER = {"base_channels: 512": "base_channels: 64", "cond_channels: 512": "cond_channels: 64"}


def _small(text: str, changes: dict) -> str:
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


@pytest.fixture(autouse=True)
def stock_eagerly():
    """The stock encoder wraps a method in torch.compile(backend="eager"): the same computation,
    run without its seconds of tracing."""
    with torch.compiler.set_stance("force_eager"):
        yield


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("token2wav")
    flow, hift = write_model_dir(folder, seed=0, flow_yaml=_small(FLOW_YAML, SMALL_ENCODER),
                                 vocoder_yaml=_small(VOCODER_YAML, SMALL_VOCODER))
    return folder, flow, hift


def _prompt(frames_per_token: int = 2, tokens: int = 10):
    g = torch.Generator().manual_seed(3)
    return Prompt(torch.randint(0, VOCAB, (1, tokens), generator=g, dtype=torch.int32),
                  torch.randn(1, 192, generator=g), torch.randn(1, tokens * frames_per_token, 80, generator=g))


def _stock_stream(flow, hift, prompt):
    runtime = stock_token2wav_runtime(flow, hift, STEPS)
    start_stock_stream(runtime, prompt)
    return runtime


def _chunks(tokens: torch.Tensor, size: int = 25, lookahead: int = 3):
    """(tokens, last) per call as a caller streams them: `size` fresh plus `lookahead`, then the rest."""
    for start, stop, last in chunk_bounds(tokens.shape[1], lookahead, size):
        yield tokens[:, start:stop], last


@torch.inference_mode()
def test_streamed_audio_equals_the_stock_token2wav(models):
    folder, flow, hift = models
    model = load_token2wav(folder)
    # Tables both runtimes draw when built, not stored in a checkpoint: the stock's are copied.
    model.vocoder.m_source.noise.copy_(hift.m_source.l_sin_gen.sine_waves[0])
    prompt = _prompt()
    ref = _stock_stream(flow, hift, prompt)
    ours = Token2wavStream(model, prompt, steps=STEPS, noise=flow.decoder.rand_noise)
    tokens = torch.randint(0, VOCAB, (1, 25 * 3 + 9), generator=torch.Generator().manual_seed(4), dtype=torch.int32)
    total, calls = 0, 0
    for chunk, last in _chunks(tokens):
        expected = ref.stream(chunk[0].tolist(), "voice", last_chunk=last, return_waveform=True)
        got = ours.push(chunk, last).numpy()
        assert got.shape == expected.shape, (calls, got.shape, expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-5, err_msg=f"call {calls}")
        total, calls = total + got.shape[1], calls + 1
    # Three full chunks and a last one: the caches were trimmed to prompt + 100 frames on the way.
    assert calls == 4 and total == 8 * 480 + (25 * 3 + 9) * 2 * 480
    assert len(ours.flow.est_order) == 2 * ours.flow.enc_tokens == prompt.mel.shape[1] + 100


@torch.inference_mode()
def test_placement_is_bit_identical_and_memory_follows_the_stream(models):
    """Demand-sized placement (on the CPU its emulation: rows not backed yet hold NaN, so a read
    of one would show) against full-size placement: the same audio, bit for bit, with less
    state held while the stream is young."""
    folder, flow, _ = models
    model = load_token2wav(folder)
    prompt = _prompt()
    tokens = torch.randint(0, VOCAB, (1, 25 * 3 + 9), generator=torch.Generator().manual_seed(5), dtype=torch.int32)
    runs = {}
    for demand in (False, True):
        stream = Token2wavStream(model, prompt, steps=STEPS, noise=flow.decoder.rand_noise,
                                 options=RuntimeOptions(demand_sized_state=demand, graph_replay=False))
        young = stream.store.nbytes("t2w.estimator")
        runs[demand] = [stream.push(chunk, last) for chunk, last in _chunks(tokens)], young
        assert stream.store.regions["t2w.estimator.att"].clock == "mel"
    for full, demand in zip(runs[False][0], runs[True][0], strict=True):
        assert torch.equal(full, demand)
    assert runs[True][1] < runs[False][1]


def test_loading_errors_name_the_file(models, tmp_path):
    folder, flow, _ = models
    with pytest.raises(CheckpointError, match=r"missing flow\.pt, hift\.pt"):
        (tmp_path / "flow.yaml").write_text("x: 1")
        (tmp_path / "config.yaml").write_text("x: 1")
        load_token2wav(tmp_path)
    for name in ("flow.yaml", "config.yaml", "hift.pt"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    state = flow.state_dict()
    state.pop("encoder_proj.weight")
    torch.save(state, tmp_path / "flow.pt")
    with pytest.raises(CheckpointError, match=r"flow\.pt: missing key encoder_proj\.weight"):
        load_token2wav(tmp_path)
    save_file({"a": torch.zeros(1)}, str(tmp_path / "flow.pt"))
    with pytest.raises(CheckpointError, match=r"flow\.pt: not a readable PyTorch state dict"):
        load_token2wav(tmp_path)
    # A pickle that would run code is refused by weights_only, never executed.
    import pickle

    class Exploit:
        def __reduce__(self):
            return (print, ("executed",))
    (tmp_path / "flow.pt").write_bytes(pickle.dumps({"w": Exploit()}))
    with pytest.raises(CheckpointError, match=r"flow\.pt: holds code or objects that are not plain tensors"):
        load_token2wav(tmp_path)
