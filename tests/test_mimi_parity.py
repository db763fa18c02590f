"""Our Mimi against the reference (moshi 0.2.13) on a small random config saved in the
official layout: streamed codes identical, decoded PCM within 1e-4 of the reference."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from moshi.models.loaders import get_mimi
from safetensors.torch import load_file

from engine.families.moshi.mimi import Mimi, MimiStream, load_mimi
from engine.families.moshi.mimi.mimi_config_json import official_config
from engine.families.moshi.mimi.mimi_loading import CHECKPOINT_NAME, CONFIG_NAME
from engine.state import FullStore
from tests.mimi_reference import (
    FRAME,
    build_reference,
    official_state,
    reference_stream_decode,
    reference_stream_encode,
    save_official,
    small_config,
    varied_audio,
)

FRAMES = 30  # 60 transformer steps: the 16-step KV rings wrap several times


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    cfg = small_config(context=16)
    ref = build_reference(cfg)
    ours = load_mimi(save_official(ref, cfg, tmp_path_factory.mktemp("mimi")))
    return ref, ours


@pytest.fixture(scope="module")
def audio():
    return varied_audio(FRAMES)


@pytest.fixture(scope="module")
def ref_codes(pair, audio):
    return reference_stream_encode(pair[0], audio)


def _stream_encode(mimi, audio, stream=None):
    stream = stream or MimiStream(mimi)
    return np.stack([stream.encode_frame(audio[i:i + FRAME]) for i in range(0, len(audio), FRAME)], 1)


def _stream_decode(mimi, codes, stream=None):
    stream = stream or MimiStream(mimi)
    return np.concatenate([stream.decode_frame(codes[:, t]) for t in range(codes.shape[1])])


def test_official_config_builds_the_official_key_layout():
    with torch.device("meta"):
        ref = get_mimi(None, device="meta")
        ours = Mimi(official_config())
    want = {k: tuple(v.shape) for k, v in official_state(ref).items()}
    got = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert got == want
    assert len(ours.quantizer.rvq_rest.vq.layers) == 31 and ours.num_codebooks == 8


def test_streamed_codes_match_reference(pair, audio, ref_codes):
    ref_codes_used = [len(np.unique(row)) for row in ref_codes]
    assert ref_codes.shape == (8, FRAMES) and min(ref_codes_used) >= 5, ref_codes_used
    codes = _stream_encode(pair[1], audio)
    assert codes.dtype == np.int64
    np.testing.assert_array_equal(codes, ref_codes)


def test_streamed_pcm_matches_reference(pair, ref_codes):
    want = reference_stream_decode(pair[0], ref_codes)
    got = _stream_decode(pair[1], ref_codes)
    assert got.dtype == np.float32 and got.shape == (FRAMES * FRAME,)
    assert _rel_err(got, want) < 1e-4


def test_whole_signal_matches_reference(pair, audio, ref_codes):
    ref, ours = pair
    with torch.no_grad():
        want_codes = ref.encode(torch.from_numpy(audio).view(1, 1, -1))[0].numpy()
        want_pcm = ref.decode(torch.from_numpy(ref_codes)[None])[0, 0].numpy()
    np.testing.assert_array_equal(ours.encode(audio), want_codes)
    assert _rel_err(ours.decode(ref_codes), want_pcm) < 1e-4


def test_streaming_equals_whole_signal_within_context(tmp_path, audio):
    # The reference's ring writes a step's entries before attending, so after a wrap a
    # streamed step sees one key fewer than a whole-signal pass; a long context avoids wraps.
    cfg = small_config(context=2 * 2 * FRAMES)
    ours = load_mimi(save_official(build_reference(cfg, seed=1), cfg, tmp_path))
    codes = _stream_encode(ours, audio)
    np.testing.assert_array_equal(ours.encode(audio), codes)
    assert _rel_err(_stream_decode(ours, codes), ours.decode(codes)) < 1e-4
    # A partial last frame is zero-padded, like a stream would have to be.
    cut = audio[:5 * FRAME + 700]
    padded = np.concatenate([cut, np.zeros(FRAME - 700, np.float32)])
    np.testing.assert_array_equal(ours.encode(cut), _stream_encode(ours, padded))


def test_encode_and_decode_sides_are_independent(pair, audio, ref_codes):
    """Interleaving encode and decode on one stream changes neither (duplex use)."""
    ours = pair[1]
    stream = MimiStream(ours)
    codes, pcm = [], []
    for t in range(FRAMES):
        pcm.append(stream.decode_frame(ref_codes[:, t]))
        codes.append(stream.encode_frame(audio[t * FRAME:(t + 1) * FRAME]))
    np.testing.assert_array_equal(np.stack(codes, 1), ref_codes)
    np.testing.assert_array_equal(np.concatenate(pcm), _stream_decode(ours, ref_codes))


def test_reset_restarts_the_stream(pair, audio, ref_codes):
    ours = pair[1]
    stream = MimiStream(ours)
    _stream_encode(ours, audio[:7 * FRAME], stream)
    _stream_decode(ours, ref_codes[:, 11:18], stream)
    stream.reset()
    np.testing.assert_array_equal(_stream_encode(ours, audio, stream), ref_codes)
    np.testing.assert_array_equal(_stream_decode(ours, ref_codes, stream), _stream_decode(ours, ref_codes))


def test_torch_steps_use_only_declared_regions(pair, audio, ref_codes):
    """encode_step/decode_step keep all their state in the store: two stores interleaved
    frame by frame give the same results as each alone."""
    ours = pair[1]
    names = [r.name for r in ours.regions()]
    assert len(names) == len(set(names)) and all(n.startswith("mimi.") for n in names)
    assert {r.clock for r in ours.regions() if r.is_ring} == {"mimi_step"}
    assert any(n.endswith(".tail") for n in names) and any(n.endswith(".partial") for n in names)
    a, b = FullStore(ours.regions()), FullStore(ours.regions())
    x = torch.from_numpy(audio).view(1, 1, -1)
    for t in range(FRAMES):
        frame = x[..., t * FRAME:(t + 1) * FRAME]
        got_a = ours.encode_step(frame, a)
        ours.encode_step(-frame, b)
        assert got_a.shape == (1, 8, 1)
        assert torch.equal(got_a[0, :, 0], torch.from_numpy(ref_codes[:, t]))
    y = ours.decode_step(torch.from_numpy(ref_codes[:, :1])[None], FullStore(ours.decoder_regions()))
    assert y.shape == (1, 1, FRAME)


def test_fewer_codebooks(tmp_path, audio):
    cfg = small_config()
    ref = build_reference(cfg, num_codebooks=3, seed=2)
    ours = load_mimi(save_official(ref, cfg, tmp_path), num_codebooks=3)
    want = reference_stream_encode(ref, audio[:10 * FRAME])
    assert want.shape == (3, 10)
    np.testing.assert_array_equal(_stream_encode(ours, audio[:10 * FRAME]), want)
    assert _rel_err(_stream_decode(ours, want), reference_stream_decode(ref, want)) < 1e-4


def test_bad_frames_are_rejected(pair):
    stream = MimiStream(pair[1])
    with pytest.raises(ValueError, match="1920"):
        stream.encode_frame(np.zeros(1000, np.float32))
    with pytest.raises(ValueError, match="integer"):
        stream.decode_frame(np.zeros(8, np.float32))
    with pytest.raises(ValueError, match=r"\[0, 64\)"):
        stream.decode_frame(np.full(8, 64))


DEMO_DIR = Path(__file__).resolve().parents[1] / "assets" / "demo_model"


def test_demo_asset_is_official_layout_and_reproducible():
    """The shipped demo Mimi loads strictly into the reference too, agrees with it, is
    small, and is exactly what packaging/make_demo_mimi.py builds."""
    weights = DEMO_DIR / CHECKPOINT_NAME
    assert weights.stat().st_size < 5_000_000
    cfg = json.loads((DEMO_DIR / CONFIG_NAME).read_text())
    assert cfg["quantizer"]["bins"] == 2048
    ref = get_mimi(str(weights), cfg, num_codebooks=8)
    ours = load_mimi(DEMO_DIR)
    audio = varied_audio(12, seed=5)
    codes = _stream_encode(ours, audio)
    np.testing.assert_array_equal(codes, reference_stream_encode(ref, audio))
    assert min(len(np.unique(row)) for row in codes) >= 4
    assert _rel_err(_stream_decode(ours, codes), reference_stream_decode(ref, codes)) < 1e-4

    script = DEMO_DIR.parents[1] / "packaging" / "make_demo_mimi.py"
    spec = importlib.util.spec_from_file_location("make_demo_mimi", script)
    make_demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_demo)
    rebuilt = make_demo.build_demo().state_dict()
    on_disk = load_file(str(weights))
    assert rebuilt.keys() == on_disk.keys()
    # Drawn weights come back bit for bit; the ones fitted to a synthetic signal (codebooks,
    # the last decoder conv) go through convolutions whose float reduction order depends on
    # the CPU and its thread count, so they agree to float rounding.
    for key, value in on_disk.items():
        torch.testing.assert_close(rebuilt[key], value, rtol=1e-5, atol=1e-6, msg=key)
