"""The token2wav stream on CUDA: bit-identical audio with graph replay and demand-sized state on
or off, in fp32 and fp16; with replay, the graphs captured at creation (the first chunks, the
steady one, the prompt and the ends after them) replay from the first chunk, the state never
moves; and the stream equals the stock one (minicpmo-utils 1.0.7) within the CPU parity tests'
tolerance in fp32.

The model is the CPU parity tests' (small conformer and vocoder, full-size DiT, random weights,
written as an official directory). Six pushes: five one-second chunks (the caches are trimmed
from the third on) and a last chunk of 9 tokens. Each push's audio is copied to the host before
the next push, as a caller must (a replayed graph rewrites its output).
"""
import itertools
import statistics
import time

import numpy as np
import pytest
import torch

from bench.stock_token2wav import start_stock_stream, stock_token2wav_runtime
from engine.options import RuntimeOptions
from engine.token2wav.chunk_plan import chunk_bounds
from engine.token2wav.token2wav_loading import load_token2wav
from engine.token2wav.token2wav_stream import Token2wavStream
from tests.test_token2wav_parity import STEPS, VOCAB, _prompt, models  # noqa: F401 (a fixture)

pytestmark = pytest.mark.gpu
TOKENS = 25 * 5 + 9


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, VOCAB, (1, TOKENS), generator=torch.Generator().manual_seed(4), dtype=torch.int32)


def count_replays(stream: Token2wavStream) -> list[int]:
    """The stream's graph replays from now on, as a one-item list the stream updates: its
    Graphs' `run` (which replays one captured graph) is wrapped on the instance."""
    count = [0]
    if stream.graphs is not None:
        run = stream.graphs.run

        def counted(*args, **kwargs):
            count[0] += 1
            return run(*args, **kwargs)

        stream.graphs.run = counted
    return count


def _captured_at_creation(stream: Token2wavStream) -> set:
    """What a stream captures as it is made: the first three chunks' keys and the steady one, and the last
    push of the lookahead alone after each chunk key. Not the prompt's pass: it runs once, then is copied."""
    captured = pushes = set(stream.captured)
    assert "prompt" not in captured and len({k for k in pushes if not k.flow.last}) == 4
    ends = {k for k in pushes if k.flow.last}
    assert 1 <= len(ends) <= 4 and all(k.flow.tokens == stream.lookahead for k in ends)
    return captured


def _run(stream: Token2wavStream, tokens: torch.Tensor) -> tuple[list[np.ndarray], list[float], list[int]]:
    """Each push's audio (on the host), wall time, and the stream's replays after it."""
    audio, seconds, replays, count = [], [], [], count_replays(stream)
    for start, stop, last in chunk_bounds(tokens.shape[1], 3, 25):
        torch.cuda.synchronize()
        began = time.perf_counter()
        audio.append(stream.push(tokens[:, start:stop], last).cpu().numpy())
        seconds.append(time.perf_counter() - began)
        replays.append(count[0])
    return audio, seconds, replays


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_toggle_combinations_bit_identical(models, tokens, fp16, record):
    model = load_token2wav(models[0], device="cuda", fp16=fp16)
    runs = {}
    for replay, demand in itertools.product([False, True], repeat=2):
        stream = Token2wavStream(model, _prompt(), steps=STEPS,
                                 options=RuntimeOptions(graph_replay=replay, demand_sized_state=demand))
        att = stream.store["t2w.estimator.att"].data_ptr()
        captured = _captured_at_creation(stream) if replay else set(stream.captured)
        runs[replay, demand] = audio, seconds, replays = _run(stream, tokens)
        assert stream.store["t2w.estimator.att"].data_ptr() == att, "state moved"
        if replay:
            # Every one-second chunk replays, the first included; the last chunk, of 9 tokens, runs eagerly.
            assert stream.captured == captured
            assert replays == [1, 2, 3, 4, 5, 5]
            name = f"{'fp16' if fp16 else 'fp32'} demand={demand}"
            record(f"{name} first_ms", 1000 * seconds[0])
            record(f"{name} steady_ms", 1000 * statistics.median(seconds[3:5]))
        else:
            assert captured == set() and replays == [0] * 6
        stream.close()
    expected = runs[False, False][0]
    for toggles, (audio, _, _) in runs.items():
        for call, (got, want) in enumerate(zip(audio, expected, strict=True)):
            np.testing.assert_array_equal(got, want, err_msg=f"graph_replay, demand_sized_state = {toggles}, "
                                                             f"call {call}")


@pytest.fixture
def no_tf32():
    """TF32 would round ours and the stock differently (different kernels): parity in true fp32."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@torch.inference_mode()
def test_equal_to_the_stock_stream_on_cuda_fp32(models, tokens, no_tf32):
    folder, flow, hift = models
    flow, hift = flow.cuda(), hift.cuda()
    model = load_token2wav(folder, device="cuda")
    # Tables both runtimes draw when built, not stored in a checkpoint: the stock's are copied.
    model.vocoder.m_source.noise.copy_(hift.m_source.l_sin_gen.sine_waves[0])
    ours = Token2wavStream(model, _prompt(), steps=STEPS, noise=flow.decoder.rand_noise)
    _captured_at_creation(ours)
    replays = count_replays(ours)
    with torch.compiler.set_stance("force_eager"):  # the stock encoder's torch.compile, without its tracing
        ref = stock_token2wav_runtime(flow, hift, STEPS)
        start_stock_stream(ref, _prompt())
        for call, (start, stop, last) in enumerate(chunk_bounds(tokens.shape[1], 3, 25)):
            chunk = tokens[:, start:stop]
            expected = ref.stream(chunk[0].tolist(), "voice", last_chunk=last, return_waveform=True)
            got = ours.push(chunk, last).cpu().numpy()
            assert got.shape == expected.shape, (call, got.shape, expected.shape)
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-5, err_msg=f"call {call}")
    assert replays == [5]
    ours.close()


def test_spare_keys_prepared_between_turns_replay_short_pushes(models, tokens):
    """With the spare keys prepared between turns (as a conversation does while it listens), turns of
    short pushes — one short unit, and a long turn whose last unit is short — replay every push, with
    the audio of a stream that runs them eagerly, bit for bit."""
    model = load_token2wav(models[0], device="cuda")
    prepared = Token2wavStream(model, _prompt(), steps=STEPS, options=RuntimeOptions(graph_replay=True))
    eager = Token2wavStream(model, _prompt(), steps=STEPS, options=RuntimeOptions(graph_replay=False))
    prepared.plan_spare(range(8, 29), range(3, 8))
    while prepared.spare_left:
        prepared.prepare_spare()
    before = prepared.runner.eager_runs
    turns = [[(0, 16, False), (13, 16, True)],  # one unit of 13 speech tokens
             [(0, 28, False), (25, 53, False), (50, 78, False), (75, 103, False), (100, 113, False),
              (110, 115, True)]]
    for turn in turns:
        for start, stop, last in turn:
            ours, theirs = (s.push(tokens[:, start:stop], last).cpu() for s in (prepared, eager))
            assert torch.equal(ours, theirs)
        prepared.restart()
        eager.restart()
    assert prepared.runner.eager_runs == before
