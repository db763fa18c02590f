"""The benchmark's report on the CPU: summaries, the int8 ratios and the tables, from records
shaped like a run's (the runs themselves need a CUDA GPU)."""
from bench.report import format_table, int8_ratios, summarize
from engine.frame import STAGES

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
