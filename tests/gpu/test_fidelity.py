"""Fidelity on CUDA, teacher-forced (engine.bench.fidelity): our bf16 LM stays as close to the
stock runtime in fp32 as the stock runtime's own bf16 does, on the demo model. The benchmark
reports the same figures at full size."""
import pytest

from engine.bench.fidelity import measure
from engine.paths import DEMO_MODEL_DIR

pytestmark = pytest.mark.gpu
pytest.importorskip("moshi")


def test_ours_in_bf16_is_within_stock_bf16_noise(record):
    result = measure(DEMO_MODEL_DIR, frames=96, seed=1)
    record("fidelity", result)
    ours, stock = result["runtimes"]["ours bf16"], result["runtimes"]["stock bf16"]
    for kind in ("text", "audio"):
        assert ours[kind]["rel_err_mean"] <= 1.25 * stock[kind]["rel_err_mean"] + 1e-3, kind
        assert ours[kind]["top1_agreement"] >= stock[kind]["top1_agreement"] - 0.02, kind
