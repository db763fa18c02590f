"""MiniCPM-o 4.5's audio input (engine/families/minicpmo/audio_features.py, audio_encoder.py) against the reference.

The golden trace (tests/golden/minicpmo_tiny_trace.safetensors, packaging/make_minicpmo_golden.py: the reference's
DuplexCapability on the tiny checkpoint, fp32 CPU) holds each unit's mel and LLM rows for 6 units and the rows of a
32-unit run, past unit 29 where the Whisper cache resets and the mel buffer drops its first 10 s, plus prepare's
reference-audio mel and rows. We replay the same samples and compare. The rest needs no reference: the buffer and
slide schedule, the 5 s floor switch and the slide as whole-buffer recomputations, the cache reset rule, short
units, loading errors, bf16.
"""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from engine.errors import CheckpointError
from engine.families.minicpmo.audio_encoder import StreamingAudioEncoder
from engine.families.minicpmo.audio_features import FeatureSizes, UnitFeatures, log_mel, mel_filters

GOLDEN = Path(__file__).resolve().parent / "golden"
TINY = GOLDEN / "minicpmo_tiny"
TRACE = GOLDEN / "minicpmo_tiny_trace.safetensors"
# Same torch ops: on the CPU that recorded the golden the mel is bit-identical (measured 0), but torch.stft's FFT
# rounds by the CPU's instruction set (measured up to 1.1e-4 on log-mels near 1.4 on another Xeon); the rows differ by
# float noise only (measured <= 4.8e-7 on rows up to 1.9: SDPA over the masked 1500-slot cache vs the reference's
# grown cache).
MEL_TOL = 3e-4
ROW_TOL = 1e-5


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny():
    config = json.loads((TINY / "config.json").read_text())
    weights = {}
    for shard in sorted(TINY.glob("model-*.safetensors")):
        weights.update({k: v.float() for k, v in load_file(shard).items()
                        if k.startswith(("apm.", "audio_projection_layer."))})
    return config, weights


@pytest.fixture(scope="module")
def trace():
    with safe_open(str(TRACE), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()  # noqa: SIM118 (not iterable)
                if k.startswith(("audio.", "long.", "system_prompt.ref_"))}


def unit_samples(trace: dict, i: int) -> np.ndarray:
    return (trace["audio.pcm16"][i % 8].float() / 32768).numpy()


def test_units_match_the_reference(tiny, trace):
    config, weights = tiny
    encoder = StreamingAudioEncoder(config, weights, "cpu", torch.float32)
    mels = []
    original = encoder.features.push
    encoder.features.push = lambda x: (lambda u: (mels.append(u.mel), u)[1])(original(x))
    lengths, resets = [], []
    for i in range(trace["long.embeds"].shape[0]):
        rows = encoder.encode(unit_samples(trace, i))
        lengths.append(encoder.features.length)
        resets.append(encoder.resets)
        torch.testing.assert_close(rows, trace["long.embeds"][i], atol=ROW_TOL, rtol=0)
        if f"audio.u{i}.embeds" in trace:
            torch.testing.assert_close(rows, trace[f"audio.u{i}.embeds"], atol=ROW_TOL, rtol=0)
            torch.testing.assert_close(mels[i], trace[f"audio.u{i}.mel"], atol=MEL_TOL, rtol=0)
        if f"long.u{i}.mel" in trace:
            torch.testing.assert_close(mels[i], trace[f"long.u{i}.mel"], atol=MEL_TOL, rtol=0)
    # The trace does pass both rules: at unit 29 the cache reset and the buffer slid.
    assert resets[28] == 0 and resets[29] == 1
    assert lengths[28] == 16480 + 28 * 16000 and lengths[29] == 16480 + 29 * 16000 - 160000


def test_reference_audio_matches_the_reference(tiny, trace):
    config, weights = tiny
    encoder = StreamingAudioEncoder(config, weights, "cpu", torch.float32)
    encoder.encode(unit_samples(trace, 0))  # the units' cache is neither read nor changed
    past = encoder.past
    recording = np.concatenate([unit_samples(trace, 6), unit_samples(trace, 7)])
    rows = encoder.encode_reference(recording)
    torch.testing.assert_close(rows, trace["system_prompt.ref_embeds"], atol=ROW_TOL, rtol=0)
    assert encoder.past == past


def test_buffer_and_slide_schedule():
    """streaming_prefill's buffer (1 s units, unit 0 left-padded to 1035 ms, 1030 ms consumed) and the mel
    buffer's slide: 10 s dropped each time it reaches 30 s, i.e. at unit 29, then every 10 units."""
    sizes = FeatureSizes()
    assert (sizes.first_pad_to, sizes.first_take, sizes.first_consumed, sizes.chunk_take) == (16560, 16480, 16480,
                                                                                               16000)
    features = UnitFeatures(sizes)
    rng = np.random.default_rng(0)
    length, base, slid = 0, 0, []
    for unit in range(50):
        out = features.push((0.1 * rng.standard_normal(16000)).astype(np.float32))
        length += 16480 if unit == 0 else 16000
        if length >= 480000:
            length -= 160000
            base += 1000
            slid.append(unit)
        assert (features.length, features.base_frame) == (length, base), unit
        assert out.mel.shape == (80, 102 if unit == 0 else 104) and out.prefix_frames == (0 if unit == 0 else 2)
        assert out.suffix_frames == 2 and len(features._pending) == 80  # unit 0's 80 padded samples lag along
    assert slid == [29, 39, 49]


def test_floor_switch_and_slide_are_whole_buffer_recomputations():
    """Each unit's frames are the log-mel of the whole current buffer (fixed floor under 5 s, max - 8 from 5 s
    on), 2 context frames either side; after the slide the buffer is the stream's last 20 s + 1 unit."""
    sizes = FeatureSizes()
    features = UnitFeatures(sizes)
    window = torch.hann_window(400)
    filters = torch.from_numpy(mel_filters(sizes)).float()
    rng = np.random.default_rng(1)
    stream = (0.2 * rng.standard_normal(16000 * 31)).astype(np.float32)
    stream[16000 * 4 + 1000:16000 * 4 + 8000] *= 0.0001  # in unit 4's frames, quiet enough for max - 8 to bite
    units = [stream[16000 * u:16000 * (u + 1)] for u in range(31)]
    # What the buffer holds: unit 0 left-padded by 560, its last 80 samples carried into unit 1, and so on.
    held = np.concatenate([np.zeros(560, np.float32), stream])
    outs = [features.push(u) for u in units]
    for unit, dynamic in ((3, False), (4, True), (29, True), (30, True)):
        end = 16480 + 16000 * unit
        start = 160000 if unit >= 29 else 0
        full = log_mel(torch.from_numpy(held[start:end]), window, filters, dynamic, sizes)
        first = 100 * unit - 2 - start // 160
        torch.testing.assert_close(outs[unit].mel, full[:, first:first + 104], atol=0, rtol=0)
        if unit == 4:  # the floor did bite
            fixed = log_mel(torch.from_numpy(held[:end]), window, filters, False, sizes)[:, first:first + 104]
            assert (fixed < outs[unit].mel).any()


def test_cache_reset_rule(tiny):
    """The cache is forgotten when its length + this unit's 52 conv frames would reach the 1500 positions: at
    units 29 and 58 (50 positions a unit); the unit then encodes exactly as in a fresh conversation."""
    config, weights = tiny
    encoder = StreamingAudioEncoder(config, weights, "cpu", torch.float32)
    fresh = StreamingAudioEncoder(config, weights, "cpu", torch.float32)
    gen = torch.Generator().manual_seed(0)
    for unit in range(60):
        mel = torch.randn(80, 102 if unit == 0 else 104, generator=gen) * 0.5
        rows = encoder.encode_mel(mel, 0 if unit == 0 else 2, 2)
        assert rows.shape == (10, 4)
        assert encoder.past == 50 * (unit - (29 if unit >= 29 else 0) - (29 if unit >= 58 else 0) + 1), unit
        if unit in (29, 58):
            fresh.reset()
            torch.testing.assert_close(rows, fresh.encode_mel(mel, 2, 2), atol=0, rtol=0)
    assert encoder.resets == 2
    encoder.reset(keep_encoder_cache=True)  # prepare without the server's cleanup: the cache carries over
    assert encoder.past == 100 and encoder.features.units == 0
    encoder.reset()
    assert encoder.past == 0


def test_short_units_wait_for_samples(tiny):
    """A unit of fewer than 16000 samples after unit 0 gives no rows (the reference's "audio insufficient" return)
    and stays buffered: two halves then give what one whole unit gives."""
    config, weights = tiny
    rng = np.random.default_rng(2)
    audio = (0.1 * rng.standard_normal(16000 * 3)).astype(np.float32)
    whole = StreamingAudioEncoder(config, weights, "cpu", torch.float32)
    halves = StreamingAudioEncoder(config, weights, "cpu", torch.float32)
    expected = [whole.encode(audio[:16000]), whole.encode(audio[16000:32000])]
    assert halves.encode(audio[:9000]).shape == (10, 4)  # unit 0 is padded to 1035 ms: never short
    assert halves.encode(audio[9000:16000]).shape == (0, 4)
    halves.reset()
    torch.testing.assert_close(halves.encode(audio[:16000]), expected[0], atol=0, rtol=0)
    assert halves.encode(audio[16000:24000]).shape == (0, 4)
    torch.testing.assert_close(halves.encode(audio[24000:32000]), expected[1], atol=0, rtol=0)


def test_mel_filters_are_whisper_slaney():
    filters = mel_filters(FeatureSizes())
    # transformers 4.51 WhisperFeatureExtractor().mel_filters: these values, and bit-equal throughout. The sum is
    # math.fsum's, exactly rounded: numpy's own order of adding differs between its releases.
    assert filters.shape == (201, 80) and filters.min() == 0.0
    assert math.fsum(filters.ravel().tolist()) == 1.9990241029178577 and filters.max() == 0.025880684545274913


def test_refuses_bad_weights(tiny):
    config, weights = tiny
    missing = {k: v for k, v in weights.items() if k != "apm.layers.1.fc2.bias"}
    with pytest.raises(CheckpointError, match="apm.layers.1.fc2.bias"):
        StreamingAudioEncoder(config, missing, "cpu", torch.float32)
    wrong = dict(weights, **{"audio_projection_layer.linear1.weight": torch.zeros(4, 15)})
    with pytest.raises(CheckpointError, match="linear1.weight"):
        StreamingAudioEncoder(config, wrong, "cpu", torch.float32)


def test_bf16_follows_fp32(tiny, trace):
    config, weights = tiny
    encoder = StreamingAudioEncoder(config, weights, "cpu", torch.bfloat16)
    for i in range(3):
        rows = encoder.encode(unit_samples(trace, i))
        assert rows.dtype == torch.bfloat16
        torch.testing.assert_close(rows.float(), trace[f"audio.u{i}.embeds"], atol=0.1, rtol=0.05)


def test_a_unit_through_a_stage_runner_is_the_eager_unit(tiny):
    """Through a stage runner (what replays a unit's pass from a graph on a GPU; here it runs the
    same pass, eagerly, from its static input frames and its device position) the rows are the
    eager encoder's, bit for bit, across the cache's reset at unit 29."""
    from engine.options import RuntimeOptions
    from engine.runtime.stages import StageRunner
    from engine.state.placement import new_store

    config, weights = tiny
    options = RuntimeOptions()
    regions = StreamingAudioEncoder.regions(config, torch.float32)
    runner = StageRunner(new_store(regions, torch.device("cpu"), options), torch.device("cpu"), None, options)
    staged = StreamingAudioEncoder(config, weights, "cpu", torch.float32, runner=runner)
    eager = StreamingAudioEncoder(config, weights, "cpu", torch.float32)
    gen = torch.Generator().manual_seed(1)
    for unit in range(32):
        mel = torch.randn(80, 102 if unit == 0 else 104, generator=gen) * 0.5
        context = 0 if unit == 0 else 2
        torch.testing.assert_close(staged.encode_mel(mel, context, 2), eager.encode_mel(mel, context, 2),
                                   atol=0, rtol=0)
    assert staged.resets == eager.resets == 1
    # each ran as a keyed stage, over the span its positions reached; the cache's clock restarted with it
    assert runner.prepared([("encoder", 102, 0, 2, 500)] + [("encoder", 104, 2, 2, span) for span in (500, 1000, 1500)])
    assert runner.store.ticks("encoder.kv") == staged.past == 50 * 3
