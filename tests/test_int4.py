"""Int4 weights on the CPU: group-wise quantization and its packing, the torch product against
the kernel's formula (and the kernel itself, under Triton's interpreter where Triton is
installed), our int4 layout written and read back, its errors, the runtime toggles, what int4
costs in quality, and the memory plan."""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from bench.int4_quality import measure_demo
from engine.errors import CheckpointError, DeviceMemoryError
from engine.kernels.operands import Int4Weight
from engine.loading.memory_plan import MemoryPlan
from engine.loading.models import load_model, plan_memory
from engine.ops.linear import matmul
from engine.options import RuntimeOptions
from engine.session import DuplexSession
from engine.weights.export import export_int4, export_q8
from engine.weights.int4 import FORMAT, LM_INT4_NAME, dequantize4, pack, quantize_groups, read_metadata
from tests.hub_fixtures import BF16, Q8, hub, q8_folder  # noqa: F401  (fixtures)
from tests.mimi_reference import varied_audio
from tests.session_checks import PLAIN, assert_identical, run
from tests.test_cli_models import cli
from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def int4_demo(tmp_path_factory):
    """The demo model written in our int4 layout by `duplexcadence quantize --weights int4`'s code."""
    out = tmp_path_factory.mktemp("int4")
    export_int4("demo", out)
    return out


def test_packing_puts_the_even_input_in_the_low_nibble():
    assert pack(torch.tensor([[-8, 7, 0, -1]])).tolist() == [[0xF0, 0x78]]


def test_each_group_is_rounded_with_its_stored_scale_and_the_extreme_at_minus_8():
    torch.manual_seed(0)
    w = torch.randn(6, 200)
    w[0, :64] = 0  # an all-zero group stays zero
    q = quantize_groups(w, shrink=(1.0,))
    assert q.q.dtype == torch.uint8 and q.q.shape == (6, 100)
    assert q.scale.dtype == torch.bfloat16 and q.scale.shape == (6, 4)  # the last group: 8 inputs
    back = dequantize4(q)
    assert (back[0, :64] == 0).all()
    for n, g in ((1, 0), (3, 2), (5, 3)):
        group = slice(64 * g, min(64 * g + 64, 200))
        extreme = w[n, group][w[n, group].abs().argmax()]
        s = q.scale[n, g].float()
        assert s == (extreme / -8).bfloat16().float()
        assert torch.equal(back[n, group], torch.round(w[n, group] / s).clamp(-8, 7) * s)
    # The scale search keeps, per group, the scale with the least squared error (1.0 among them).
    searched = quantize_groups(w)
    per_group = [((dequantize4(x) - w) ** 2).view(6, -1)[:, :192].view(6, 3, 64).sum(-1) for x in (q, searched)]
    assert (per_group[1] <= per_group[0]).all() and (per_group[1] < per_group[0]).any()


def _formula(x: torch.Tensor, w: Int4Weight) -> torch.Tensor:
    """The kernel's formula written out: nibble - 8 times its group's scale, in fp64."""
    lo, hi = (w.q & 15).double() - 8, (w.q >> 4).double() - 8
    q = torch.stack([lo, hi], -1).flatten(-2)
    scale = torch.cat([w.scale[:, k // w.group:k // w.group + 1] for k in range(q.shape[1])], 1).double()
    return x.double() @ (q * scale).T


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_product_is_the_kernel_formula(dtype):
    torch.manual_seed(1)
    w = quantize_groups(torch.randn(40, 200))
    x = torch.randn(3, 200).to(dtype)
    got, expected = matmul(x, w), _formula(x, w)
    assert got.dtype == dtype
    # Every product is exact in fp32: the sums differ from fp64 by their rounding only, then one
    # rounding to the activations' dtype.
    tol = 1e-5 if dtype == torch.float32 else 8e-3
    torch.testing.assert_close(got.double(), expected, rtol=tol, atol=tol * expected.abs().max().item())


@pytest.mark.parametrize("rows,n,k", [(1, 16, 44), (3, 48, 200), (8, 20, 128)])  # 44: not whole words
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int4_kernel_matches_the_torch_product(rows, n, k, dtype):
    device = triton_device()
    from engine.kernels import fused_linear

    torch.manual_seed(rows)
    w = Int4Weight(*(t.to(device) for t in quantize_groups(torch.randn(n, k))[:2]))
    x = torch.randn(rows, k).to(dtype).to(device)
    residual = torch.randn(rows, n).to(dtype).to(device)
    for got, expected in ((fused_linear.linear(x, w), matmul(x, w)),
                          (fused_linear.linear(x, w, residual=residual), residual + matmul(x, w))):
        # Equal up to the order of the fp32 sums: a bf16 result may round to a neighbour.
        got, expected = got.float().cpu(), expected.float().cpu()
        tol = 1e-5 if dtype == torch.float32 else 2 ** -7
        torch.testing.assert_close(got, expected, rtol=tol, atol=tol * expected.abs().max().item())


def test_int4_file_round_trip_and_quantizing_on_load(int4_demo, tmp_path):
    path = int4_demo / LM_INT4_NAME
    assert read_metadata(path) == {"format": FORMAT, "group_size": "64", "embeddings": "int8", "quantizer": "1"}
    config = json.loads((int4_demo / "config.json").read_text())
    assert config["moshi_name"] == LM_INT4_NAME and "quantize" not in config
    saved = load_model(int4_demo)  # int4 because the file is
    assert saved.weights == "int4" and saved.weights_option == "int4"
    attn = saved.lm.transformer.layers[0].self_attn
    assert attn.in_proj_weight.dtype == torch.uint8 and attn.in_proj_weight_int4_scale.dtype == torch.bfloat16
    on_load = load_model("demo", weights="int4").lm.state_dict()
    assert saved.lm.state_dict().keys() == on_load.keys()
    assert all(torch.equal(v, on_load[k]) for k, v in saved.lm.state_dict().items())
    # From the official q8 layout: each row dequantized, then quantized to int4.
    q8 = tmp_path / "q8"
    export_q8("demo", q8)
    from_q8 = load_model(q8, weights="int4").lm.state_dict()
    assert from_q8.keys() == on_load.keys() and not any(k.endswith("_scb") for k in from_q8)
    again = tmp_path / "int4_from_q8"
    export_int4(q8, again)
    assert all(torch.equal(v, from_q8[k]) for k, v in load_model(again).lm.state_dict().items())


def _broken_copy(source, folder, change, metadata=None):
    folder.mkdir(parents=True)
    for f in source.iterdir():
        if f.is_file() and f.name != LM_INT4_NAME:
            (folder / f.name).write_bytes(f.read_bytes())
    (folder / "voices").symlink_to(source / "voices")
    tensors = load_file(str(source / LM_INT4_NAME))
    change(tensors)
    save_file(tensors, str(folder / LM_INT4_NAME),
              metadata=read_metadata(source / LM_INT4_NAME) if metadata is None else metadata)
    return folder


def test_malformed_int4_files_are_named_with_their_problem(int4_demo, tmp_path):
    with pytest.raises(CheckpointError, match=r"model\.int4\.safetensors: holds int4 weights .* weights int4"):
        load_model(int4_demo, weights="int8")
    name = "text_linear.weight"
    cases = {
        "no_scale": (lambda t: t.pop(name + "_int4_scale"), None, rf"missing key {name}_int4_scale"),
        "float": (lambda t: t.__setitem__(name, t[name].float()), None,
                  rf"key {name} has dtype torch\.float32, expected a uint8 matrix"),
        "scale_dtype": (lambda t: t.__setitem__(name + "_int4_scale", t[name + "_int4_scale"].float()), None,
                        rf"key {name}_int4_scale is torch\.float32 \[200, 1\], expected bfloat16"),
        "format": (lambda t: None, {"format": "gguf", "group_size": "64"}, "metadata format is 'gguf'"),
        "group": (lambda t: None, {"format": FORMAT, "group_size": "128"}, "group size '128', this version reads 64"),
    }
    for case, (change, metadata, message) in cases.items():
        folder = _broken_copy(int4_demo, tmp_path / case, change, metadata)
        with pytest.raises(CheckpointError, match=rf"{LM_INT4_NAME}: {message}"):
            load_model(folder)
    with pytest.raises(CheckpointError, match="already in the int4 layout"):
        export_int4(int4_demo, tmp_path / "again")


def test_int4_session_toggles_bit_identical_and_weights_fixed_at_load():
    model = load_model("demo", weights="int4")
    assert model.lm.text_emb.weight.dtype == model.lm.depformer_emb[0].weight.dtype == torch.int8
    audio = varied_audio(40, seed=2).reshape(40, -1)
    baseline = run(DuplexSession(model, RuntimeOptions(seed=4, **PLAIN)), audio)
    session = DuplexSession(model, RuntimeOptions(seed=4))
    assert session.options.weights == "int4"
    assert_identical(run(session, audio, {17: RuntimeOptions(seed=4, **PLAIN), 29: RuntimeOptions(seed=4)}),
                     baseline)
    with pytest.raises(ValueError, match="loaded with int4 weights, not int8"):
        session.set_options(RuntimeOptions(weights="int8"))


def test_int4_loses_no_more_than_bitsandbytes_nf4_on_the_demo_model():
    result = measure_demo(frames=30, seed=1)
    runtimes = result["runtimes"]
    ours, int8, nf4 = runtimes["ours int4"], runtimes["ours int8"], runtimes["bnb nf4"]
    for kind in ("text", "audio"):
        assert 0 < int8[kind]["rel_err_mean"] < ours[kind]["rel_err_mean"] <= nf4[kind]["rel_err_mean"], \
            (kind, ours, nf4)
    assert "bnb fp4" in runtimes


def test_memory_plan_counts_int4_weights_and_refuses_what_does_not_fit(int4_demo):
    bf16, int8, int4 = (plan_memory("demo", w, "cpu") for w in ("bf16", "int8", "int4"))
    assert plan_memory(int4_demo, None, "cpu").weight_bytes == int4.weight_bytes
    assert int4.weights == "int4" and int4.weight_bytes < int8.weight_bytes < bf16.weight_bytes
    assert int4.state_bytes == bf16.state_bytes > 0 and int4.fits
    plan = dict(state_bytes=3 << 29, context_s=240, free_bytes=5 << 30)
    with pytest.raises(DeviceMemoryError, match=r"int8 weights: needs about 9\.5 GiB .* Choose int4 weights"):
        MemoryPlan("moshiko", "int8", "cuda:0", weight_bytes=7 << 30, **plan).check()
    with pytest.raises(DeviceMemoryError, match=r"int4 weights: needs about 6\.5 GiB .*: it does not fit\. close"):
        MemoryPlan("moshiko", "int4", "cuda:0", weight_bytes=4 << 30, **plan).check()


def test_models_offers_int4_and_says_what_it_downloads(hub, tmp_path):  # noqa: F811  (the fixture)
    result = cli(hub, tmp_path, "models", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    section = result.stdout[result.stdout.index(f"\n{BF16}  [not downloaded]"):]
    line = next(x for x in section.splitlines() if x.strip().startswith("int4: download"))
    assert (f"downloads {Q8}, the official int8 files; they are quantized to int4 once, on the first int4 load, "
            "and the int4 copy kept in ") in line
    assert "int4 weights: needs about" in line
