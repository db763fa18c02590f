"""Fidelity on CUDA, teacher-forced (bench.fidelity): our bf16 LM stays as close to the
stock runtime in fp32 as the stock runtime's own bf16 does, and our int8 LM as close to our
bf16 as the stock q8 runtime (bitsandbytes) to the stock bf16, on the demo model. The
benchmark reports the same figures at full size."""
import pytest

from bench.fidelity import measure
from engine.files.paths import DEMO_MODEL_DIR
from engine.weights.export import export_q8

pytestmark = pytest.mark.gpu
pytest.importorskip("moshi")
pytest.importorskip("bitsandbytes")


def test_ours_is_within_the_stock_runtimes_noise_in_bf16_and_int8(record, tmp_path):
    export_q8(DEMO_MODEL_DIR, tmp_path, "cuda")
    result = measure(DEMO_MODEL_DIR, frames=96, seed=1, q8_dir=tmp_path)
    record("fidelity", result)
    runtimes = result["runtimes"]
    for ours, stock in (("ours bf16", "stock bf16"), ("ours int8", "stock q8")):
        for kind in ("text", "audio"):
            got, ref = runtimes[ours][kind], runtimes[stock][kind]
            assert got["rel_err_mean"] <= 1.25 * ref["rel_err_mean"] + 1e-3, (ours, kind)
            assert got["top1_agreement"] >= ref["top1_agreement"] - 0.02, (ours, kind)
