"""The token2wav stream's host plans and its device work, on the CPU (where graph replay is not
available, so the stream runs eagerly): the chunk keys of a stream settle into one steady key,
the warm-up runs exactly the keys the stream then meets and leaves the state as it found it,
and a push's device work never reads a value back to the host nor makes a tensor from host
data (what a CUDA graph capture would refuse). Then the benchmark's driver, on a tiny model.

The model is the parity tests' (small conformer and vocoder, full-size DiT, random weights).
"""
import json

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bench import token2wav as bench
from bench.stock_token2wav import storage_bytes
from engine.options import RuntimeOptions
from engine.token2wav.chunk_plan import RETAINED_FRAMES, chunk_bounds
from engine.token2wav.token2wav_loading import load_token2wav
from engine.token2wav.token2wav_stream import Token2wavStream
from tests.test_token2wav_parity import STEPS, VOCAB, _prompt, models  # noqa: F401 (a fixture)

HOST_READS = {"aten._local_scalar_dense.default", "aten.lift_fresh.default", "aten.lift_fresh_copy.default",
              "aten.nonzero.default", "aten.masked_select.default", "aten.repeat_interleave.Tensor",
              "aten.is_nonzero.default", "aten.equal.default"}
"""Ops that read a device value on the host (a sync) or make a tensor from host data."""


class _HostReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) in HOST_READS:
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def model(models):
    return load_token2wav(models[0])


def _tokens(count: int, seed: int = 4) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, count), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


def _assert_same_state(a: Token2wavStream, b: Token2wavStream) -> None:
    assert a.counters == b.counters
    assert a.store.nbytes() == b.store.nbytes()
    for name in a.store.regions:
        assert a.store.ticks(name) == b.store.ticks(name), name
        # Rows a demand-sized store has not backed hold NaN on the CPU: equal means NaN there too.
        torch.testing.assert_close(a.store[name], b.store[name], rtol=0, atol=0, equal_nan=True, msg=name)


@torch.inference_mode()
def test_keys_settle_and_the_warm_up_runs_them_first(model):
    """One-second chunks: the first three keys differ (the caches fill up to their retention,
    the first trim keeps an order of its own), then one steady key repeats; the last chunk has
    its own. The warm-up ran those first keys and left the state as a stream without one has
    it, and both stream the same audio, bit for bit, their counters following the plans.

    Once a key's device constants exist (the warm-up made the first chunks' and the steady
    one's), its push does no host read and makes no tensor from host data: the work a
    captured graph replays (a last chunk, new, builds its constants first)."""
    prompt = _prompt()
    plain = Token2wavStream(model, prompt, steps=STEPS)
    warmed = Token2wavStream(model, prompt, steps=STEPS, warm_up=True)
    assert plain.graphs is None and warmed.graphs is None  # no graph replay on the CPU
    _assert_same_state(plain, warmed)
    schedule = warmed.schedule(warmed.max_chunk, warmed.counters, 8)

    tokens, keys = _tokens(25 * 6 + 9), []
    for start, stop, last in chunk_bounds(tokens.shape[1], 3, 25):
        key, after = plain.plan(stop - start, last)
        keys.append(key)
        audio = plain.push(tokens[:, start:stop], last)
        assert plain.counters == after
        with _HostReads() as reads:
            got = warmed.push(tokens[:, start:stop], last)
        assert last or reads.seen == [], (start, reads.seen)
        assert torch.equal(got, audio)
    assert [keys.index(k) for k in keys] == [0, 1, 2, 3, 3, 3, 6]
    assert schedule == keys[:4]
    first, steady = keys[0], keys[3]
    assert first.silence and not steady.silence and first.flow.est_rows == prompt.mel.shape[1]
    assert steady.flow.est_rows == prompt.mel.shape[1] + RETAINED_FRAMES and steady.flow.enc_trim
    assert keys[2].flow.est_kept != steady.flow.est_kept  # the first trim gathers another order
    assert keys[-1].flow.last and plain.counters.finalized
    with pytest.raises(ValueError, match="stream has ended"):
        plain.push(tokens[:, :0], True)


@torch.inference_mode()
def test_the_warm_up_also_runs_the_end_after_whole_chunks(model):
    """A stream of whole one-second chunks ends with a push of its lookahead alone (a turn whose speech
    filled its units): the warm-up ran that last push after each of its chunks too, so no push of such a
    stream builds constants from host data, however many chunks it had, and the audio is the same."""
    prompt = _prompt()
    warmed = Token2wavStream(model, prompt, steps=STEPS, warm_up=True)
    for chunks in (1, 2, 5):
        plain = Token2wavStream(model, prompt, steps=STEPS)
        warmed.restart()
        tokens = _tokens(25 * chunks + 3)
        for start, stop, last in chunk_bounds(tokens.shape[1], 3, 25):
            audio = plain.push(tokens[:, start:stop], last)
            with _HostReads() as reads:
                got = warmed.push(tokens[:, start:stop], last)
            assert reads.seen == [], (chunks, start, last, reads.seen)
            assert torch.equal(got, audio)
        assert last and stop - start == 3


@pytest.mark.parametrize("demand", [True, False], ids=["demand-sized", "full"])
@torch.inference_mode()
def test_a_restarted_stream_is_a_new_stream(model, demand):
    """restart() (a conversation's next turn) leaves the state and the counters as a new stream's,
    in the same buffers, and streams the same audio bit for bit, whether the turn before it ended
    (its last chunk pushed) or was cut off mid-way (an interrupt), in either placement of its state."""
    prompt, options = _prompt(), RuntimeOptions(demand_sized_state=demand)
    stream, tokens = Token2wavStream(model, prompt, steps=STEPS, options=options), _tokens(25 * 3 + 7)
    buffers = {name: stream.store[name].data_ptr() for name in stream.store.regions}
    for cut in (None, 2):
        bounds = list(chunk_bounds(tokens.shape[1], 3, 25))
        for start, stop, last in bounds[:cut]:
            stream.push(tokens[:, start:stop], last)
        stream.restart()
        fresh = Token2wavStream(model, prompt, steps=STEPS, options=options)
        _assert_same_state(stream, fresh)
        assert {name: stream.store[name].data_ptr() for name in stream.store.regions} == buffers
        for start, stop, last in bounds[:3]:
            assert torch.equal(stream.push(tokens[:, start:stop], last), fresh.push(tokens[:, start:stop], last))
        stream.restart()


def test_graph_replay_asked_on_the_cpu_runs_eagerly_and_chunks_fit_the_state(model):
    stream = Token2wavStream(model, _prompt(), steps=STEPS, options=RuntimeOptions(graph_replay=True))
    assert stream.graphs is None and stream.captured == set()
    prompt_frames = _prompt().mel.shape[1]
    assert stream.store.ticks("t2w.estimator.att") == prompt_frames  # the prompt ran, nothing else
    # Rows for the prompt, the retained frames and the longest chunk (28 tokens, 56 frames), no more.
    assert stream.store.regions["t2w.estimator.att"].retain == prompt_frames + RETAINED_FRAMES + 2 * 28
    with pytest.raises(ValueError, match="longer than this stream's state holds"):
        stream.push(_tokens(29))


def test_bench_driver_on_the_cpu(models):
    """The benchmark's per-variant driver, stock then ours, on the tiny model (no profiler, no
    peak memory without CUDA); its report formats."""
    with torch.compiler.set_stance("force_eager"):  # the stock encoder's torch.compile, without its tracing
        variant = bench.run_variant(models[0], 1, False, seed=0, steady=1, device=torch.device("cpu"),
                                    profile=False, warm_chunks=0, prompt_tokens=10)
    stock, ours = variant["stock"], variant["ours"]
    assert stock["steady_chunks"] == ours["steady_chunks"] == 1
    assert ours["placement"] == "DemandStore" and ours["graphs"] == ours["replays"] == 0
    assert 0 < ours["state_bytes"] < stock["state_bytes"]
    assert set(variant["ratios"]) == {"steady_speedup", "p99_over_p50", "first_over_steady", "state_fraction"}
    report = {"gpu": "cpu", "torch": torch.__version__, "steady_chunks": 1, "variants": [variant]}
    table = bench.format_table(json.loads(json.dumps(report)))
    assert "| 1 steps fp32 | ours |" in table and "| 1 steps fp32 | stock |" in table
    assert "peak" in table and " - |" in table  # no peak measured on the CPU


def test_bench_pieces():
    schedule = bench.chunk_schedule(steady=30, profiled=5)
    assert len(schedule) == 1 + bench.SETTLE_CHUNKS + 30 + 5 + 1 and schedule[-1][2]
    assert all(stop - start == 28 and not last for start, stop, last in schedule[:-1])
    assert schedule[-1][1] - schedule[-1][0] == bench.LAST_TOKENS
    seconds = [0.2, 0.5, 0.4, 0.3] + [0.1] * 29 + [0.13] + [0.05]
    s = bench.summarize(seconds, steady=30)
    assert s["first_ms"] == 200 and s["last_ms"] == 50 and s["steady_chunks"] == 30
    assert s["steady_p50_ms"] == pytest.approx(100) and 100 < s["steady_p99_ms"] < 130
    q = bench.ratios({"steady_p50_ms": 400, "state_bytes": 10, "peak_bytes": 10},
                     {"steady_p50_ms": 100, "steady_p99_ms": 140, "first_ms": 90, "state_bytes": 2, "peak_bytes": 5})
    assert q == {"steady_speedup": 4, "p99_over_p50": 1.4, "first_over_steady": 0.9, "state_fraction": 0.2,
                 "peak_fraction": 0.5}
    assert bench.targets_met(q) == {"steady_speedup": True, "p99_over_p50": False, "peak_fraction": True,
                                    "first_over_steady": True}
    base = torch.zeros(10)
    assert storage_bytes([base, base[2:5], torch.zeros(3, dtype=torch.float64)]) == 40 + 24
    assert np.isclose(bench.bench_prompt(300, seed=1).mel.shape[1], 2 * bench.PROMPT_TOKENS)


def test_once_the_caches_settle_a_push_depends_on_its_length_alone(model):
    """Pushes of any length, after histories that differ (a turn whose first unit had few speech tokens,
    or a whole second), have the same keys once the caches hold the prompt and the retained frames; before
    that the history shows in them. So a conversation's settled pushes take a few dozen shapes."""
    stream = Token2wavStream(model, _prompt(tokens=20), steps=STEPS)
    firsts, settled = set(), []
    for first in (5, 13, 25):
        key, counters = stream.plan(first + 3, False)
        firsts.add(key)
        for _ in range(3):
            _, counters = stream.plan(28, False, counters)
        settled.append({(tokens, last): stream.plan(tokens, last, counters)[0] for tokens in range(3, 29)
                        for last in (False, True) if last or tokens > 3})
    assert len(firsts) == 3 and settled[0] == settled[1] == settled[2]


@torch.inference_mode()
def test_spare_keys_are_the_short_pushes_and_leave_the_stream_as_they_found_it(model):
    """plan_spare names the pushes of each length where a turn starts and once the caches settle (with
    the ends that follow); prepare_spare runs them between turns (eagerly here: the CPU captures
    nothing) and leaves the state a turn starts from, so the next turn streams the same audio."""
    prompt = _prompt(tokens=20)
    stream, plain = (Token2wavStream(model, prompt, steps=STEPS) for _ in range(2))
    stream.plan_spare(range(8, 29), range(3, 8))
    named = {key for key, _ in stream._spare}
    start = settled = stream.counters
    for _ in range(6):
        _, settled = stream.plan(28, False, settled)
    for counters in (start, settled):
        assert {stream.plan(n, False, counters)[0] for n in range(8, 29)} <= named
        assert {stream.plan(n, True, counters)[0] for n in range(3, 8)} <= named
    for n in range(8, 29):  # a turn of one short unit: its push, then its end
        assert stream.plan(3, True, stream.plan(n, False, start)[1])[0] in named
    left = stream.spare_left
    for _ in range(3):
        assert stream.at_start
        stream.prepare_spare()
    assert stream.spare_left == left - 3 and stream.at_start
    _assert_same_state(stream, plain)
    tokens = _tokens(52)
    for start_, stop, last in ((0, 13, False), (10, 38, False), (35, 49, False), (46, 52, True)):
        assert torch.equal(stream.push(tokens[:, start_:stop], last), plain.push(tokens[:, start_:stop], last))
    assert not stream.at_start
    with pytest.raises(RuntimeError, match="between turns"):
        stream.prepare_spare()
