"""Our causal HiFT vocoder against the stock one (minicpmo-utils 1.0.7, `stepaudio2.causal_vocoder`):
the same keys, the same whole-signal audio as `CausalHiFTGenerator.inference`, and the same audio,
call by call, as the stock `BoundedVocoder` stream, on random weights shared by both.

Random init would predict an F0 of about 0 Hz everywhere (all frames unvoiced, no sines); the
F0 head is rescaled so that most frames are voiced (up to ~300 Hz) and some are not. Snake alphas
and weight-norm gains are randomised too, so a swapped or ignored parameter would show.
"""
from __future__ import annotations

import pytest
import torch

from engine.state import FullStore
from engine.token2wav.vocoder import CausalHiFTGenerator
from engine.token2wav.vocoder_stream import StreamingVocoder, stream_geometry
from tests.stepaudio2_reference import stock

NOISE_SEED = 7
"""Seeds the stock model's global draws and our generator alike: both draw the noise table from it."""

OFFICIAL = dict(  # the stock constructor's arguments, as in the official config.yaml
    in_channels=80, base_channels=512, nb_harmonics=8, sampling_rate=24000, nsf_alpha=0.1, nsf_sigma=0.003,
    nsf_voiced_threshold=10, upsample_rates=[8, 5, 3], upsample_kernel_sizes=[16, 11, 7],
    istft_params={"n_fft": 16, "hop_len": 4}, resblock_kernel_sizes=[3, 7, 11],
    resblock_dilation_sizes=[[1, 3, 5]] * 3, source_resblock_kernel_sizes=[7, 7, 11],
    source_resblock_dilation_sizes=[[1, 3, 5]] * 3, lrelu_slope=0.1, audio_limit=0.99, conv_pre_look_right=4)

WHOLE_TOL = dict(rtol=1e-5, atol=1e-5)
"""Whole signal: stock computes the sines per sample, we per frame; the values agree here to the
bit, but a CPU whose vector and scalar sine differ in a last bit could move the audio by ~1e-6."""
STREAM_TOL = dict(rtol=0.0, atol=1e-7)
"""Streaming runs the very same operations on the same shapes as stock (equal to the bit here). This
tight, the bound also catches a shorter history: 20 frames instead of 31 moves the audio by ~5e-7."""

SCHEDULES = {
    # (fresh frames, finalize) per call; the first runs far past the 55-frame mel history.
    "varied": [(50, False), (50, False), (7, False), (33, False), (1, False), (20, False), (12, True)],
    "empty_flush": [(40, False), (3, False), (17, False), (0, True)],
    "first_is_last": [(23, True)],
    "tiny": [(2, True)],
}


def _shape_weights(model: torch.nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".alpha"):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif name.endswith("parametrizations.weight.original0"):
                p.mul_(torch.rand(p.shape, generator=gen) * 0.4 + 0.8)
        head = model.f0_predictor.classifier
        head.weight.mul_(3000)
        head.bias.fill_(100.0)


@pytest.fixture(scope="module")
def models():
    """(stock generator, its state dict as built, ours holding the same weights and noise)."""
    generator_mod = stock("causal_vocoder.generator")
    f0_mod = stock("causal_vocoder.f0_predictor")
    with torch.random.fork_rng():  # the stock modules draw from the global generator: leave it as it was
        torch.manual_seed(0)
        predictor = f0_mod.CausalConvRNNF0Predictor(num_class=1, in_channels=80, cond_channels=512)
        torch.manual_seed(NOISE_SEED)  # the stock generator's first draws are its phase and noise tables
        ref = generator_mod.CausalHiFTGenerator(**OFFICIAL, f0_predictor=predictor)
        ours = CausalHiFTGenerator(generator=torch.Generator().manual_seed(NOISE_SEED))
    _shape_weights(ref, torch.Generator().manual_seed(1))
    ref.eval()
    # Stock inference turns its F0 predictor into float64 for good: keep the weights as built.
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    ours.load_state_dict(state, strict=True)
    return ref, state, ours.eval()


def _mel(frames: int, seed: int) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(seed))


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item() if a.numel() else 0.0


def test_keys_shapes_and_tables_match_stock(models):
    ref, state, ours = models
    own = ours.state_dict()
    assert list(own) == list(state)  # the same order too
    assert {k: tuple(v.shape) for k, v in own.items()} == {k: tuple(v.shape) for k, v in state.items()}
    assert all(v.dtype == torch.float32 for v in own.values())
    assert "conv_pre.parametrizations.weight.original0" in own  # weight norm kept as its (g, v) parts
    assert torch.equal(ours.m_source.noise, ref.m_source.l_sin_gen.sine_waves[0])
    assert torch.equal(ours.stft_window, ref.stft_window)
    stock_sizes = stock("causal_vocoder.bounded_vocoder").context_sizes(ref)
    g = stream_geometry(ours)
    assert (g.f0_history, g.f0_lookahead, g.history) == stock_sizes == (8, 3, 31)


def test_whole_signal_matches_stock(models):
    ref, _, ours = models
    mel = _mel(60, seed=2)
    want, want_source = ref.inference(mel)
    with torch.inference_mode():
        f0 = ours.predict_f0(mel)
        source = ours.m_source(f0)
        got = ours(mel)
    assert 0 < (f0 > 10).sum() < f0.numel()  # both the voiced and the unvoiced paths are exercised
    assert got.shape == want.shape == (1, 60 * 480)
    assert want.abs().max() < 0.99  # nothing clipped: a difference could not hide under the clamp
    torch.testing.assert_close(source, want_source, **WHOLE_TOL)
    torch.testing.assert_close(got, want, **WHOLE_TOL, msg=lambda m: f"max abs diff {_max_diff(got, want)}\n{m}")


def _run_schedule(stream, mel: torch.Tensor, schedule) -> list[torch.Tensor]:
    outputs, at = [], 0
    for frames, finalize in schedule:
        outputs.append(stream(mel[:, :, at:at + frames], finalize=finalize))
        at += frames
    return outputs


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_stream_matches_stock_bounded_vocoder(models, name):
    ref, _, ours = models
    schedule = SCHEDULES[name]
    mel = _mel(sum(frames for frames, _ in schedule), seed=3)
    bounded = stock("causal_vocoder.bounded_vocoder").BoundedVocoder(ref)
    want = _run_schedule(bounded.stream, mel, schedule)

    vocoder = StreamingVocoder(ours)
    buffers = {k: (v.data_ptr(), v.shape) for k, v in vocoder.state.items()}
    got = _run_schedule(vocoder.stream, mel, schedule)

    for call, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"call {call}"
        torch.testing.assert_close(g, w, **STREAM_TOL, msg=lambda m, c=call, g=g, w=w: f"call {c}: max abs diff "
                                   f"{_max_diff(g, w)}\n{m}")
    assert sum(o.shape[1] for o in got) == mel.shape[-1] * 480  # everything came out, once
    # The state stayed in the tensors it was given: same buffers, same shapes.
    assert {k: (v.data_ptr(), v.shape) for k, v in vocoder.state.items()} == buffers
    if name == "varied":
        assert mel.shape[-1] > 3 * vocoder.geometry.mel_frames  # the bounded history was exercised


def test_reset_and_placed_state_give_a_fresh_stream(models):
    _, _, ours = models
    schedule = [(20, False), (7, False), (30, False), (5, True)]
    mel = _mel(sum(frames for frames, _ in schedule), seed=4)
    fresh = _run_schedule(StreamingVocoder(ours).stream, mel, schedule)

    vocoder = StreamingVocoder(ours)
    _run_schedule(vocoder.stream, _mel(25, seed=5), [(18, False), (7, True)])
    with pytest.raises(ValueError):
        vocoder.stream(_mel(3, seed=6))  # a finalized stream takes no more mel
    vocoder.reset()
    assert all(not t.any() for t in vocoder.state.values())
    again = _run_schedule(vocoder.stream, mel, schedule)

    # State placed by the engine's store, from the declared regions.
    probe = StreamingVocoder(ours)
    store = FullStore(probe.regions("voc"))
    placed = StreamingVocoder(ours, state={k: store[f"voc.{k}"] for k in probe.state_shapes()})
    in_store = _run_schedule(placed.stream, mel, schedule)

    for a, b, c in zip(fresh, again, in_store):
        assert torch.equal(a, b) and torch.equal(a, c)
