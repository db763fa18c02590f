"""The benchmark's report on the CPU: summaries, the int8 ratios and the tables, from records
shaped like a run's (the runs themselves need a CUDA GPU)."""
import json

import pytest

from bench.diffuplex import format_table as diffuplex_table
from bench.report import format_table, int8_ratios, summarize
from engine.families.moshi.frame import FRAME_KEYS as STAGES

GIB = 1 << 30


def _run(name, ms, peak_gib, failure=None):
    records = [{**dict.fromkeys(STAGES, ms / 4000), "total": ms / 1000} for _ in range(50)]
    result = summarize(name, records, {f"{s}s": 1 << 20 for s in (10, 30, 120)}, int(peak_gib * GIB))
    result.peak_at = {"10s": int(peak_gib * GIB) // 2, "240s": int(peak_gib * GIB)}
    result.failure = failure
    return result


def test_int8_ratios_and_tables():
    stock, ours, plain = _run("stock", 17.0, 16.0), _run("ours", 8.0, 15.0), _run("plain", 80.0, 15.0)
    stock_q8, int8 = _run("stock q8", 20.0, 12.0), _run("ours int8", 4.0, 9.0)
    small = _run("ours int8, 120 s", 4.0, 8.0, failure="DeviceMemoryError: over budget")
    small.budget = {"limit_bytes": 9 * GIB, "frames": 1500, "passed": False}
    q = int8_ratios(stock, ours, stock_q8, int8, small)
    assert q["int8_speedup_p50_vs_stock_bf16"] == 17.0 / 4.0 and q["int8_speedup_p50_vs_ours_bf16"] == 2.0
    assert q["int8_peak_240s_fraction_of_stock_q8"] == 0.75
    assert q["int8_budget_full_context_passed"] and not q["int8_budget_120s_passed"]
    runs = [stock, ours, plain, stock_q8, int8, small]
    report = {"shape": "moshiko", "gpu": "test", "frames": 50, "torch": "x", "runs": [r.as_dict() for r in runs],
              "floor": {"ms_per_frame": 3.0, "lm_bytes": 15e9, "copy_bandwidth_bytes_per_s": 4e12},
              "ratios": {"speedup_p50_vs_stock": 2.125}, "int8_ratios": q}
    table = format_table(report)
    assert "| ours int8, 120 s | failed: DeviceMemoryError: over budget |" in table
    assert "- ours int8: 4.50/-/-/9.00" in table
    assert "budget 9.0 GiB over 1500 frames: FAILED" in table


def test_each_run_records_how_it_starts():
    """Getting ready (ours: prepare(); stock: its server's warm-up), the prompts (ours, the
    personaplex shape) and the first frame after them, in the JSON and the table."""
    stock, ours, small = _run("stock", 17.0, 16.0), _run("ours", 8.0, 15.0), _run("ours int8, 120 s", 4.0, 8.0)
    stock.prepare_s, stock.first_frame_ms = 0.41, 25.5
    ours.prepare_s, ours.prompt_s, ours.first_frame_ms = 6.25, 3.5, 9.75
    small.failure = "DeviceMemoryError: over budget"
    runs = [json.loads(json.dumps(r.as_dict())) for r in (stock, ours, small)]
    assert {k: runs[1][k] for k in ("prepare_s", "prompt_s", "first_frame_ms")} == \
        {"prepare_s": 6.25, "prompt_s": 3.5, "first_frame_ms": 9.75}
    assert runs[0]["prompt_s"] is None and "first_frame_s" not in runs[0]
    report = {"shape": "personaplex", "gpu": "test", "frames": 50, "torch": "x", "runs": runs,
              "floor": {"ms_per_frame": 3.0, "lm_bytes": 15e9, "copy_bandwidth_bytes_per_s": 4e12},
              "ratios": {"speedup_p50_vs_stock": 2.125}}
    table = format_table(report)
    assert "- stock: ready in 0.41 s, first frame 25.50 ms" in table
    assert "- ours: ready in 6.25 s, prompts 3.50 s, first frame 9.75 ms" in table
    assert "ours int8" not in table.split("start-up")[1]  # failed before it started


def test_the_diffuplex_table_shows_prepare_prompts_and_first_frames():
    def run(accepted, wake_ms):
        return {"accepted": accepted, "frames": 100, "wakes": 50, "prompt_s": 3.25, "first_frame_ms": wake_ms,
                "core_ms": 5.0, "lm_ms": 7.0, "total_mean_ms": 9.0, "total_p50_ms": 9.0,
                "wake_frame_p99_ms": 12.0, "wake_frame_max_ms": 13.0}

    ratios = {"at_published_acceptance": {"accepted": 0.61, "core": 1.2, "lm": 1.1, "total": 1.1},
              "published": {"core": 1.61, "wall": 1.46}}
    report = {"shape": "personaplex", "gpu": "test", "block": 1, "rank": 16, "frames": 100, "torch": "x",
              "prepare_s": 7.5, "runs": {"ar": run(None, 9.5), "listen": [run(0, 11.0), run(1, 11.5)],
                                         "speak": [run(0, 11.0), run(1, 11.5)]},
              "ratios": {"listen": ratios, "speak": ratios}}
    table = diffuplex_table(report)
    assert "prepare() at load (the plain frame and the wakes of K = 1): 7.50 s" in table
    assert "| 1.00 | 1.00 | 3.25 | 9.50 |" in table  # AR's row: ratios over itself, prompts, first frame
    assert table.count("| 3.25 | 11.50 |") == 2
    assert "ratios over AR, whose frame takes 9.00 ms p50, 9.00 ms mean" in table


def test_the_diffuplex_bound_follows_from_c_b_and_r():
    """The issue's arithmetic: at a = 0.61 a wake of c = 1 gives the Core LM (1 + a) / c = 1.61x; with
    B = 4.00 and R = 1.92 ms the wall clock is bounded at 5.92 / (4.00 / 1.61 + 1.92) = 1.34x."""
    from bench.diffuplex import wake_bound

    ar = {"core_ms": 4.0, "total_mean_ms": 5.92}
    bound = wake_bound(ar, core_ratio=1.61, accepted=0.61)
    assert abs(bound["c"] - 1.0) < 1e-9 and abs(bound["rest_ms"] - 1.92) < 1e-9
    assert abs(bound["wall_bound"] - 5.92 / (4.0 / 1.61 + 1.92)) < 1e-9
    slower = wake_bound(ar, core_ratio=1.36, accepted=0.61)  # the measured LISTEN figure: c = 1.18
    assert abs(slower["c"] - 1.61 / 1.36) < 1e-9 and slower["wall_bound"] < bound["wall_bound"]


def test_the_profile_names_where_each_stage_spends_its_time():
    """bench.kernels.attribute on a chrome trace shaped like torch.profiler's: each kernel goes
    to the stage whose marker follows it, and each stage names its heaviest kernels; the
    table prints them for the first of ours."""
    from bench.kernels import HEAVIEST, attribute

    def marker(ts, stage):
        return {"ph": "X", "name": f"duplexcadence.stage:{stage}", "ts": ts, "dur": 1}

    def kernel(ts, dur, name, cat="kernel"):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}

    events = []
    for frame in range(2):  # a frame: two convs and a copy (encode), a gemv twice (backbone)
        t = frame * 1000
        events += [kernel(t, 30, "conv"), kernel(t + 40, 10, "conv"), kernel(t + 60, 5, "copy", "gpu_memcpy"),
                   marker(t + 100, "encode"), kernel(t + 110, 200, "gemv"), kernel(t + 320, 200, "gemv"),
                   marker(t + 600, "backbone")]
    stages = attribute(events, frames=2)
    assert stages["encode"]["kernels"] == 2 and stages["backbone"]["kernels"] == 2
    assert stages["encode"]["heaviest"] == [["conv", 2.0, 0.04], ["copy", 1.0, 0.005]]
    assert stages["backbone"]["heaviest"] == [["gemv", 2.0, 0.4]]
    assert stages["encode"]["busy_ms"] == 0.045 and stages["frame"]["kernels"] == 4
    # Launched overlapped, a kernel starts before the one it waits for has ended: it is counted
    # from that end, so the names add up to the busy time.
    overlapped = [kernel(0, 50, "conv"), kernel(10, 60, "tail"), kernel(65, 5, "conv"), marker(100, "encode")]
    encode = attribute(overlapped, frames=1)["encode"]
    assert encode["heaviest"] == [["conv", 2.0, 0.05], ["tail", 1.0, 0.02]] and encode["busy_ms"] == 0.07
    many = [kernel(i * 10, i + 1, f"k{i}") for i in range(HEAVIEST + 3)] + [marker(10_000, "decode")]
    assert [n for n, _, _ in attribute(many, frames=1)["decode"]["heaviest"]] == \
        [f"k{i}" for i in range(HEAVIEST + 2, 2, -1)]
    # The host's share: from the mark before a stage to its first device work (the second frame's
    # encode from the first frame's last mark; the trace's first stage has none before it), and
    # the CUDA calls made in it.
    assert stages["backbone"]["lead_ms"] == 0.01 and stages["encode"]["lead_ms"] == 0.2
    launched = [marker(0, "encode"), kernel(250, 100, "gemv"), marker(400, "backbone"),
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 20, "dur": 180}]
    backbone = attribute(launched, frames=1)["backbone"]
    assert backbone["lead_ms"] == 0.25 and backbone["host"] == [["cudaGraphLaunch", 1.0, 0.18]]

    ours = _run("ours", 8.0, 15.0)
    ours.kernels = stages
    report = {"shape": "moshiko", "gpu": "test", "frames": 50, "torch": "x", "runs": [ours.as_dict()],
              "floor": {"ms_per_frame": 3.0, "lm_bytes": 15e9, "copy_bandwidth_bytes_per_s": 4e12},
              "ratios": {"speedup_p50_vs_stock": 2.125}}
    table = format_table(report)
    assert "heaviest kernels of ours, per stage" in table
    assert "- backbone: gemv 2 / 0.400" in table and "- encode: conv 2 / 0.040; copy 1 / 0.005" in table
    assert "- backbone: 0.010 ms" in table


def test_each_stage_shows_how_it_grows_over_the_run():
    """The p50 of each tenth of a run, in order: a stage that grows with the context (the
    attention over it) shows as a rising list, not only as a p99 above the p50."""
    records = [{**dict.fromkeys(STAGES, 0.001), "backbone": 0.003 + i * 1e-5, "total": 0.01} for i in range(100)]
    stages = summarize("ours", records, {}, 0).stages
    tenths = stages["backbone"]["p50_by_tenth_ms"]
    assert len(tenths) == 10 and tenths == sorted(tenths) and round(tenths[-1] - tenths[0], 4) == 0.9
    assert stages["encode"]["p50_by_tenth_ms"] == [1.0] * 10


def test_a_replayed_profile_prints_its_figures_and_heaviest_kernels(capsys):
    from bench.kernels import print_profile

    print_profile("backbone", {"replayed_ms": 4.2666, "kernels_per_frame": 164.0, "busy_us": 4347.2,
                          "kernels": [["_gemv_kernel", 129.0, 3674.85], ["_split_kernel", 32.0, 441.1],
                                      ["_merge_kernel", 32.0, 140.0]]}, top=2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "backbone: 4.267 ms replayed, 164 kernels, 4347 µs busy"
    assert [line.split()[-1] for line in lines[1:]] == ["_gemv_kernel", "_split_kernel"]


def test_the_last_replays_launches_are_listed_in_order_with_their_grids(capsys):
    """Two replays of a kernel, a copy and a kernel launched overlapped (it starts 2 µs before the
    copy ends): the last replay's three, each counted from where the work before it ended."""
    from bench.kernels import last_launches, print_profile

    def event(ts, dur, cat, name, grid=None):
        return {"ph": "X", "ts": ts, "dur": dur, "cat": cat, "name": name, "args": {"grid": grid} if grid else {}}
    events = [e for t0 in (0, 100) for e in (event(t0, 10, "kernel", "_conv_kernel", [4, 8, 2]),
                                             event(t0 + 12, 5, "gpu_memcpy", "Memcpy DtoD"),
                                             event(t0 + 15, 20, "kernel", "_gemv_kernel", [512, 1, 1]))]
    events.append({"ph": "X", "ts": 50, "dur": 1, "cat": "cpu_op", "name": "aten::add"})
    launches = last_launches(events, 2)
    assert launches == [["_conv_kernel", [4, 8, 2], 10], ["Memcpy DtoD", None, 5], ["_gemv_kernel", [512, 1, 1], 18]]
    print_profile("encode", {"replayed_ms": 0.1, "kernels_per_frame": 2.0, "busy_us": 33.0, "kernels": [],
                             "launches": launches}, top=0, launches=True)
    assert capsys.readouterr().out.splitlines()[1:] == [
        "     10.00 µs  [4, 8, 2]         _conv_kernel", "      5.00 µs  None              Memcpy DtoD",
        "     18.00 µs  [512, 1, 1]       _gemv_kernel"]


def test_the_mimi_tiles_bench_measures_the_engines_rules_as_now():
    """bench.mimi_tiles' "now" is the rules engine.kernels keeps: the sweep's baseline cannot drift
    from what a session runs."""
    pytest.importorskip("triton")
    import torch

    from bench.mimi_tiles import RULES
    from engine.kernels import fused_linear, stream_conv

    chunks, busy, max_split, (rows, warps) = RULES["now"]
    assert chunks == ((stream_conv.DEEP, stream_conv.DEEP_BK),)
    assert (busy, max_split) == (stream_conv._BUSY, stream_conv.MAX_SPLIT)
    for k in (512, 2048):
        config = fused_linear._config(1536, k, torch.float32)
        assert (config.bn, config.num_warps) == (rows, warps)


def test_the_lm_steps_bench_refuses_a_machine_without_cuda(tmp_path):
    import subprocess
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the bench would run")
    done = subprocess.run([sys.executable, "-m", "bench.lm_steps", str(tmp_path / "out.json")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip() == "bench.lm_steps: needs a CUDA GPU"
    assert not (tmp_path / "out.json").exists()
