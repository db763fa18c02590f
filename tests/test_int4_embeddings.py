"""The int4 variant's embedding tables in int8 (engine.weights.int4): each row rounded on its own
scale, a looked-up row as q * scale rounded once (the backbone's inputs and the depformer's),
the tables written by the int4 export and read back or quantized on load, an older int4 file
without them, the memory plan, and bf16 / int8 loads keeping their float tables."""
import logging

import pytest
import torch
from safetensors.torch import load_file
from torch.nn import functional as F

from engine.errors import CheckpointError
from engine.families.moshi.lm.lm_loading import load_lm
from engine.families.moshi.model import read_lm_checkpoint
from engine.files.paths import MIMI_NAME
from engine.kernels.operands import Int8Rows
from engine.loading.models import load_model, plan_memory
from engine.ops.linear import ZERO_TOKEN, embedding, embedding_rows, linear, linear_embed
from engine.weights.export import export_int4
from engine.weights.int4 import FORMAT, LM_INT4_NAME, ROW_SCALE, is_table, quantize_groups, quantize_table, table_of
from tests.test_int4 import _broken_copy


@pytest.fixture(scope="module")
def int4_demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("int4")
    export_int4("demo", out)
    return out


@pytest.fixture(scope="module")
def demo():
    return read_lm_checkpoint("demo")


def _rows(table: Int8Rows, dtype: torch.dtype) -> torch.Tensor:
    """Every row as the layout defines it: the fp32 product q * scale (exact in fp64, 8 x 24
    bits, then rounded to fp32 once), rounded once more to `dtype`."""
    return (table.q.double() * table.scale.double().unsqueeze(1)).float().to(dtype)


def test_each_row_is_rounded_to_nearest_on_its_own_scale():
    torch.manual_seed(0)
    w = (torch.randn(50, 96) * torch.logspace(-3, 1, 50).unsqueeze(1)).bfloat16()
    w[7] = 0  # an all-zero row stays zero
    table = quantize_table(w)
    assert table.q.dtype == torch.int8 and table.q.shape == (50, 96)
    assert table.scale.dtype == torch.float32 and table.scale.shape == (50,)
    absmax = w.float().abs().amax(1)
    assert torch.equal(table.scale, absmax / 127)
    assert (table.q[7] == 0).all() and table.scale[7] == 0
    assert (table.q.abs().amax(1) == torch.where(absmax > 0, 127, 0)).all()  # each row's extreme at 127
    err = (table.q.float() * table.scale.unsqueeze(1) - w.float()).abs().amax(1)
    assert (err <= table.scale * (0.5 + 2 ** -16)).all()  # half a level, and fp32's rounding
    with pytest.raises(ValueError, match="NaN or infinite"):
        quantize_table(torch.tensor([[1.0, float("inf")]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_looked_up_row_is_q_times_scale_rounded_once_and_the_zero_token_a_zero_row(dtype):
    torch.manual_seed(1)
    table = quantize_table(torch.randn(30, 64))
    tokens = torch.tensor([[3, ZERO_TOKEN, 29], [0, 0, ZERO_TOKEN]])
    got = embedding(table, tokens, dtype)
    expected = _rows(table, dtype)[tokens.clamp(min=0)]
    expected[tokens == ZERO_TOKEN] = 0
    assert got.dtype == dtype and torch.equal(got, expected)
    assert not got[tokens == ZERO_TOKEN].signbit().any()  # +0, as a float table's zero row
    # The depformer's input: the product plus the row, as with the float table of those rows.
    w = quantize_groups(torch.randn(64, 48))
    x = torch.randn(1, 1, 48).to(dtype)
    for token in (5, ZERO_TOKEN):
        token = torch.tensor([token])
        got = linear_embed(x, w, table, token)
        assert torch.equal(got, linear(x, w) + embedding(table, token, dtype).view(1, 1, -1))
        assert torch.equal(got, linear_embed(x, w, _rows(table, dtype), token))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_many_streams_rows_at_once_are_each_streams_rows(dtype):
    """embedding_rows (a frame's input streams in one call) against `embedding` stream by
    stream: float and int8 tables mixed, the zero token among them."""
    torch.manual_seed(3)
    tables = [torch.randn(30, 64).to(dtype), quantize_table(torch.randn(40, 64)), torch.randn(20, 64).to(dtype)]
    tokens = torch.tensor([[3, ZERO_TOKEN, 19], [ZERO_TOKEN, 39, 0], [29, 7, ZERO_TOKEN]])
    got = embedding_rows(tables, tokens, dtype)
    assert got.shape == (3, 3, 64)
    for s, table in enumerate(tables):
        assert torch.equal(got[s], embedding(table, tokens[:, s], dtype)), s
    with pytest.raises(ValueError, match="table for"):
        embedding_rows([torch.randn(30, 64)], tokens[:, :1], torch.bfloat16)


def test_the_int4_export_writes_int8_tables_and_loading_reads_them(int4_demo, demo):
    written = load_file(str(int4_demo / LM_INT4_NAME))
    tables = sorted(k for k in demo.tensors if is_table(k))
    assert len(tables) == demo.cfg.n_q + 1 + demo.cfg.dep_q  # emb.*, text_emb, depformer_text_emb, depformer_emb.*
    for key in tables:
        expected = quantize_table(demo.tensors[key])
        assert torch.equal(written[key], expected.q) and torch.equal(written[key + ROW_SCALE], expected.scale)
    model = load_model(int4_demo)
    assert model.weights == "int4" and model.lm.dtype == torch.float32
    for key in tables:
        table = table_of(model.lm.get_submodule(key.removesuffix(".weight")))
        assert isinstance(table, Int8Rows)
        assert torch.equal(table.q, written[key]) and torch.equal(table.scale, written[key + ROW_SCALE])
    # Quantized on load from the float checkpoint: the same tables.
    on_load = load_lm(demo.path, demo.cfg, weights="int4").state_dict()
    assert all(torch.equal(on_load[k], written[k]) for k in written if is_table(k.removesuffix(ROW_SCALE)))


def test_the_backbone_inputs_sum_the_rounded_rows(int4_demo):
    ckpt = read_lm_checkpoint(int4_demo)
    lm = load_lm(ckpt.path, ckpt.cfg, dtype=torch.bfloat16)
    n_q = ckpt.cfg.n_q
    torch.manual_seed(2)
    batch = torch.randint(0, 200, (3, n_q + 1))
    batch[0, 2] = batch[1, 0] = ZERO_TOKEN

    def row(module, token):
        return torch.zeros(ckpt.cfg.dim, dtype=torch.bfloat16) if token == ZERO_TOKEN else \
            _rows(table_of(module), torch.bfloat16)[token]

    for tokens in batch:
        x = row(lm.emb[0], tokens[1])
        for i in range(1, n_q):
            x = x + row(lm.emb[i], tokens[i + 1])
        assert torch.equal(lm.embed_streams(tokens), (x + row(lm.text_emb, tokens[0])).view(1, 1, -1))
    # Future positions: every stream known, the rows embed_streams gives; one unknown, its mask.
    mask = torch.randn(n_q + 1, ckpt.cfg.dim)
    known = torch.ones(3, n_q + 1, dtype=torch.bool)
    rows = lm.embed_known(batch, known, mask)[0]
    assert all(torch.equal(rows[r], lm.embed_streams(batch[r])[0, 0]) for r in range(3))
    known[1, 3] = False
    assert not torch.equal(lm.embed_known(batch, known, mask)[0, 1], rows[1])


def _older(demo):
    """An int4 file as written before the tables were int8: bf16 tables, no row scales."""
    def change(tensors):
        for key in [k for k in tensors if is_table(k)]:
            tensors[key] = demo.tensors[key]
            del tensors[key + ROW_SCALE]
    return change


def test_an_int4_file_from_before_int8_tables_is_read_as_a_new_one(int4_demo, demo, tmp_path, caplog):
    folder = _broken_copy(int4_demo, tmp_path / "older", _older(demo), {"format": FORMAT, "group_size": "64"})
    with caplog.at_level(logging.INFO, logger="engine.families.moshi.lm.lm_loading"):
        older = load_model(folder).lm.state_dict()
    assert f"{folder / LM_INT4_NAME}: float embedding tables (written before they were int8)" in caplog.text
    new = load_model(int4_demo).lm.state_dict()
    assert older.keys() == new.keys() and all(torch.equal(v, new[k]) for k, v in older.items())


def test_malformed_int8_tables_are_named_with_their_problem(int4_demo, demo, tmp_path):
    key = "text_emb.weight"
    rows = demo.tensors[key].shape[0]

    def set_(name, value):
        return lambda t: t.__setitem__(name, value(t))

    cases = {
        "no_scale": (lambda t: t.pop(key + ROW_SCALE), None, rf"missing key {key}{ROW_SCALE}"),
        "scale_dtype": (set_(key + ROW_SCALE, lambda t: t[key + ROW_SCALE].bfloat16()), None,
                        rf"key {key}{ROW_SCALE} is torch\.bfloat16 \[{rows}\], expected float32 \[{rows}\]"),
        "scale_rows": (set_(key + ROW_SCALE, lambda t: t[key + ROW_SCALE][1:]), None,
                       rf"key {key}{ROW_SCALE} is torch\.float32 \[{rows - 1}\], expected float32 \[{rows}\]"),
        "float_beside_scale": (set_(key, lambda t: demo.tensors[key]), None,
                               rf"key {key} has dtype torch\.bfloat16, expected an int8 matrix"),
        "float_in_new_file": (_older(demo), None,
                              r"key \S+ has dtype torch\.bfloat16, expected int8 \(metadata embeddings int8\)"),
        "embeddings": (lambda t: None, {"format": FORMAT, "group_size": "64", "embeddings": "int4"},
                       "embeddings 'int4', this version reads 'int8'"),
    }
    for case, (change, metadata, message) in cases.items():
        folder = _broken_copy(int4_demo, tmp_path / case, change, metadata)
        with pytest.raises(CheckpointError, match=rf"{LM_INT4_NAME}: {message}"):
            load_model(folder)


def test_the_memory_plan_counts_the_int8_tables(int4_demo, demo):
    lm = load_model(int4_demo).lm
    mimi = (int4_demo / demo.meta.get("mimi_name", MIMI_NAME)).stat().st_size
    assert plan_memory(int4_demo, None, "cpu").weight_bytes == sum(p.nbytes for p in lm.parameters()) + mimi
    assert plan_memory("demo", "int4", "cpu").weight_bytes == sum(p.nbytes for p in lm.parameters()) + mimi
    tables = {k: v for k, v in lm.state_dict().items() if is_table(k.removesuffix(ROW_SCALE))}
    assert sum(v.nbytes for v in tables.values()) == sum(t.shape[0] * (t.shape[1] + 4) for k, t in
                                                         demo.tensors.items() if is_table(k))


@pytest.mark.parametrize("weights", ["bf16", "int8"])
def test_bf16_and_int8_loads_keep_their_float_tables(demo, weights):
    lm = load_lm(demo.path, demo.cfg, weights=weights)
    state = lm.state_dict()
    assert not any(k.endswith(ROW_SCALE) for k in state)
    tables = [k for k in state if is_table(k)]
    assert len(tables) == demo.cfg.n_q + 1 + demo.cfg.dep_q
    assert all(torch.equal(state[k], demo.tensors[k].float()) for k in tables)
    tokens = torch.tensor([ZERO_TOKEN, *range(3, 3 + demo.cfg.n_q)])
    x = F.embedding(tokens[1:2], demo.tensors["emb.0.weight"].float())
    for i in range(1, demo.cfg.n_q):
        x = x + F.embedding(tokens[i + 1:i + 2], demo.tensors[f"emb.{i}.weight"].float())
    assert torch.equal(lm.embed_streams(tokens), x.view(1, 1, -1))  # the text stream's zero token adds 0
