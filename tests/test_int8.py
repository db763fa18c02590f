"""Int8 weights on the CPU: per-row quantization as Kyutai's quantizer does it, the official q8
layout read here and by the stock runtime (moshi 0.2.13 with bitsandbytes), the errors, the
runtime toggles, what int8 costs in quality next to stock q8, and the memory plan."""
import copy
import json

import pytest
import torch
from moshi.models import loaders
from moshi.utils.quantize import replace_linear_with_qlinear
from safetensors.torch import load_file, save_file

from bench.fidelity import measure_int8
from bench.stock import _stock_kwargs
from engine.errors import CheckpointError, DeviceMemoryError
from engine.families.moshi.lm.lm_config import from_lm_kwargs
from engine.families.moshi.lm.lm_loading import load_lm
from engine.files.paths import LM_Q8_NAME
from engine.kernels.operands import Int8Weight
from engine.loading import locate
from engine.loading.memory_plan import MemoryPlan
from engine.loading.models import load_model, plan_memory
from engine.loading.safetensors_files import official_layout
from engine.options import RuntimeOptions
from engine.session import DuplexSession
from engine.weights.export import export_q8
from engine.weights.int8 import dequantize, quantize_rows
from tests.lm_reference import make_reference_lm, save_official, small_lm_kwargs
from tests.mimi_reference import varied_audio
from tests.session_checks import PLAIN, assert_identical, run


@pytest.fixture(scope="module")
def q8_demo(tmp_path_factory):
    """The demo model written in the official q8 layout by `duplexcadence quantize`'s code."""
    out = tmp_path_factory.mktemp("q8")
    export_q8("demo", out)
    return out


def test_quantize_rows_rounds_each_row_to_its_absmax():
    w = torch.tensor([[1.0, -2.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0], [3.0, 1.5, -0.75, 0.01]])
    q, scb = quantize_rows(w)
    assert q.dtype == torch.int8 and scb.dtype == torch.float32
    assert q.tolist() == [[64, -127, 32, 0], [0, 0, 0, 0], [127, 64, -32, 0]]  # 63.5 rounds to even
    assert scb.tolist() == [2.0, 0.0, 3.0]
    w = torch.randn(64, 300).half().float()
    error = (dequantize(Int8Weight(*quantize_rows(w))) - w).abs()
    assert (error <= w.abs().amax(1, keepdim=True) / 254 + 1e-6).all()  # half a step at most


def test_quantize_on_load_equals_the_stock_quantizer(tmp_path):
    kwargs = small_lm_kwargs()
    reference = make_reference_lm(kwargs, seed=3)
    save_official(reference, tmp_path / "model.safetensors")
    ours = load_lm(tmp_path / "model.safetensors", from_lm_kwargs(kwargs, "test", "small"), weights="int8")
    stock = copy.deepcopy(reference)
    replace_linear_with_qlinear(stock)  # what moshi does for a q8 model: bitsandbytes per row
    expected = official_layout(stock.state_dict())
    got = ours.state_dict()
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key].dtype == value.dtype, key
        torch.testing.assert_close(got[key], value, rtol=0, atol=0, msg=key)
    assert any(v.dtype == torch.int8 for v in got.values())


def test_official_q8_file_loads_here_and_in_the_stock_runtime(q8_demo):
    assert (q8_demo / LM_Q8_NAME).is_file() and not (q8_demo / "model.safetensors").exists()
    assert locate.lm_file(q8_demo) == q8_demo / LM_Q8_NAME
    ours = load_model(q8_demo)  # int8 because the file is
    assert ours.weights == "int8"
    assert ours.lm.transformer.layers[0].self_attn.in_proj_weight_scb.dtype == torch.float32
    on_load = load_model("demo", weights="int8").lm.state_dict()
    assert all(torch.equal(v, on_load[k]) for k, v in ours.lm.state_dict().items())
    kwargs = json.loads((q8_demo / "config.json").read_text())
    assert kwargs["moshi_name"] == LM_Q8_NAME and kwargs["quantize"] is True
    stock = loaders.get_moshi_lm(q8_demo / LM_Q8_NAME, lm_kwargs=_stock_kwargs(kwargs), dtype=torch.float32)
    assert type(stock.text_linear).__name__ == "QLinear"
    expected = official_layout(stock.state_dict())
    assert expected.keys() == ours.lm.state_dict().keys()
    assert all(torch.equal(v.to(expected[k].dtype), expected[k]) for k, v in ours.lm.state_dict().items())


def test_q8_errors_name_the_file_and_the_problem(q8_demo, tmp_path):
    path = q8_demo / LM_Q8_NAME
    with pytest.raises(CheckpointError, match=r"model\.q8\.safetensors: holds int8 weights .* weights int8"):
        load_model(q8_demo, weights="bf16")
    tensors = load_file(str(path))
    broken = tmp_path / "broken"
    for name, change in (("no_scale", lambda t: t.pop("text_linear.weight_scb")),
                         ("float", lambda t: t.__setitem__("text_linear.weight", t["text_linear.weight"].float()))):
        folder = broken / name
        folder.mkdir(parents=True)
        for f in q8_demo.iterdir():
            if f.is_file() and f.name != LM_Q8_NAME:
                (folder / f.name).write_bytes(f.read_bytes())
        (folder / "voices").symlink_to(q8_demo / "voices")
        bad = dict(tensors)
        change(bad)
        save_file(bad, str(folder / LM_Q8_NAME))
        message = {"no_scale": r"missing key text_linear\.weight_scb", "float": r"text_linear\.weight .*expected int8"}
        with pytest.raises(CheckpointError, match=rf"{LM_Q8_NAME}: .*{message[name]}"):
            load_model(folder)
    with pytest.raises(CheckpointError, match="already in the q8 layout"):
        export_q8(q8_demo, tmp_path / "again")
    with pytest.raises(CheckpointError, match="must not be the source"):
        export_q8("demo", locate.resolve("demo")[0])
    with pytest.raises(ValueError, match="unknown weights 'int3'"):
        RuntimeOptions(weights="int3")


def test_int8_session_toggles_bit_identical_and_weights_fixed_at_load():
    model = load_model("demo", weights="int8")
    audio = varied_audio(40, seed=2).reshape(40, -1)
    baseline = run(DuplexSession(model, RuntimeOptions(seed=4, **PLAIN)), audio)
    session = DuplexSession(model, RuntimeOptions(seed=4))
    assert session.options.weights == "int8"
    assert_identical(run(session, audio, {17: RuntimeOptions(seed=4, **PLAIN), 29: RuntimeOptions(seed=4)}),
                     baseline)
    with pytest.raises(ValueError, match="loaded with int8 weights, not bf16"):
        session.set_options(RuntimeOptions(weights="bf16"))


def test_int8_loses_no_more_than_stock_q8():
    result = measure_int8("demo", frames=100, seed=1)
    ours, stock = result["runtimes"]["ours int8"], result["runtimes"]["stock q8"]
    for kind in ("text", "audio"):
        assert 0 < ours[kind]["rel_err_mean"] < 0.05
        assert ours[kind]["top1_agreement"] >= stock[kind]["top1_agreement"] - 0.01, (kind, ours, stock)
        assert ours[kind]["top1_agreement"] >= 0.9


def test_memory_plan_counts_int8_weights_and_refuses_what_does_not_fit(q8_demo):
    bf16, int8 = plan_memory("demo", "bf16", "cpu"), plan_memory(q8_demo, None, "cpu")
    assert int8.weights == "int8" and int8.weight_bytes < bf16.weight_bytes
    assert int8.state_bytes == bf16.state_bytes > 0 and bf16.fits  # the CPU is not checked
    small = MemoryPlan("moshiko", "bf16", "cuda:0", weight_bytes=15 << 30, state_bytes=3 << 29, context_s=240,
                       free_bytes=11 << 30)
    with pytest.raises(DeviceMemoryError, match=r"moshiko, bf16 weights: needs about 17\.5 GiB .* 11\.0 GiB free on "
                                                r"cuda:0: it does not fit\. Choose int8 or int4 weights"):
        small.check()
