"""Every Triton kernel of ours compiles for Hopper (sm_90) with overlapped launches on, through
Triton's own ptxas: no GPU needed, only Triton (CPU machines without it skip). The interpreter
tests check what the kernels compute; this checks what only the compiler sees (types, shapes
tl.dot accepts, the launch-dependency instructions), as a GPU session would find it. Run it
without TRITON_INTERPRET (under it the kernels are the interpreter's and compile nothing)."""
import inspect
import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("the interpreter compiles nothing: run without TRITON_INTERPRET", allow_module_level=True)
triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from engine.kernels import (  # noqa: E402
    codebooks,
    delay_lines,
    fused_linear,
    grouped_attention,
    norm_rope,
    ring_attention_queries,
    ring_attention_triton,
    rows_kernels,
    stream_conv,
    stream_convtr,
    stream_embeddings,
    topk_sampling,
)

BF, F32, I64 = "*bf16", "*fp32", "*i64"
def _of(kind: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, kind)


FLOATS = {"eps", "rope_coef", "lscale", "sm_scale", "alpha", "temperature"}


def _compile(kernel, pointers: dict[str, str], constants: dict):
    """The kernel's PTX for sm_90: pointers as given, the named floats fp32, other arguments i32."""
    names = list(inspect.signature(kernel.fn).parameters)
    signature = {n: "constexpr" if n in constants else pointers.get(n, "fp32" if n in FLOATS else "i32")
                 for n in names}
    source = ASTSource(fn=kernel, signature=signature,
                       constexprs={(names.index(n),): v for n, v in constants.items()})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"launch_pdl": True}).asm["ptx"]


PRODUCT = dict(K=1024, INT8=False, INT4=False, WORDS=False, GROUP=1, NORM=1, ACT=0, EPI=2, HAS_SCALE=False,
               EMB_INT8=False, HAS_ROPE=True, HEAD_DIM=64, BN=2, BK=1024)
ROWS = dict(K=4096, INT8=False, INT4=False, GROUP=64, LORA_TILE=False, EPI=1, HAS_SCALE=False, HAS_ROPE=False,
            HEAD_DIM=128, LORA=True, LSCALE=True, RANK=16, RP=16, LSPLIT=1, PREC="tf32", UPCAST=False, BM=16, BN=32,
            BK=128, SPLIT=4, KSPAN=1024)
CONV = dict(KK=192, KSIZE=3, ELU=True, HAS_BIAS=True, HAS_RES=True, BM=32, BN=64, BK=32, SPLIT=1, KSPAN=192,
            PREC="tf32")
CONV_POINTERS = {**_of(F32, "X", "TAIL", "W", "BIAS", "RES", "OUT", "WORK"), "COUNT": "*i32"}
ROWS_POINTERS = {**_of(BF, "X", "W", "WS", "OUT", "RES", "SCALE", "KV", "LA", "LB"), "POS": I64, "T": F32, "WORK": F32,
                 "COUNT": "*i32"}
ATTENTION = {"Q": BF, "KV": BF, "POS": I64, "PACC": F32, "PM": F32, "PL": F32, "OUT": BF, "COUNT": "*i32"}
GROUPED = {"Q": BF, "K": BF, "V": BF, "POS": I64, "PACC": F32, "PM": F32, "PL": F32, "OUT": BF}
GROUPED_SHAPE = dict(HAS_WINDOW=True, SPLITS=64, ROWS=16, BLOCK_N=64, BLOCK_D=128, D=128, PREC="tf32", UPCAST=False)
EMBEDDING = {"TABLES": I64, "SCALES": I64, "TOKENS": I64, "KNOWN": "*i8", "MASKS": BF, "OUT": BF}
KERNELS = {
    "product": (fused_linear._gemv_kernel, {**_of(BF, "X", "W", "WS", "OUT", "RES", "SCALE", "KV", "EMB", "ESC",
                                                  "NW", "NB"), "POS": I64, "TOK": I64}, PRODUCT),
    "product int8": (fused_linear._gemv_kernel,
                     {**_of(BF, "X", "OUT", "RES", "SCALE", "KV", "EMB", "ESC", "NW", "NB"), "W": "*i8", "WS": F32,
                      "POS": I64, "TOK": I64}, {**PRODUCT, "INT8": True, "EPI": 1, "NORM": 0, "ACT": 1, "K": 4096,
                                                "BK": 4096, "HAS_SCALE": True}),
    "product int4": (fused_linear._gemv_kernel,
                     {**_of(BF, "X", "OUT", "RES", "SCALE", "KV", "EMB", "ESC", "NW", "NB", "WS"), "W": "*i32",
                      "POS": I64, "TOK": I64}, {**PRODUCT, "INT4": True, "WORDS": True, "GROUP": 64, "EPI": 0,
                                                "NORM": 0, "K": 4096, "BN": 8, "BK": 4096}),
    "product gate": (fused_linear._gemv_kernel, {**_of(BF, "X", "W", "WS", "OUT", "RES", "SCALE", "KV", "EMB", "ESC",
                                                       "NW", "NB"), "POS": I64, "TOK": I64},
                     {**PRODUCT, "EPI": 4, "K": 4096, "BK": 2048}),
    "prologue": (fused_linear._prologue_kernel, _of(BF, "X", "OUT", "NW", "NB"),
                 dict(K=4096, NORM=1, ACT=0, BK=1024)),
    "rows product": (rows_kernels.rows_kernel, ROWS_POINTERS, {**ROWS, "PHASE": 0}),
    "rows product, lead inline": (rows_kernels.rows_kernel, ROWS_POINTERS, {**ROWS, "LORA_TILE": True, "PHASE": 0}),
    "rows sum": (rows_kernels.rows_kernel, ROWS_POINTERS, {**ROWS, "LORA_TILE": True, "PHASE": 1}),
    "rows lead": (rows_kernels.lead_kernel, {**_of(BF, "X", "OUT", "A", "NW", "NB"), "T": F32},
                  dict(K=4096, NORM=1, ACT=0, PRO=True, LORA=True, RANK=16, RP=16, BK=512, KSPAN=1024)),
    "attention": (ring_attention_triton._split_kernel, ATTENTION,
                  dict(HAS_CONTEXT=True, SPLITS=4, SPLITS_P2=4, BLOCK_N=16, BLOCK_D=128, D=128, FUSED_MERGE=False,
                       MERGE_CHUNK=8)),
    "attention, merged by the last split": (ring_attention_triton._split_kernel, ATTENTION,
                                            dict(HAS_CONTEXT=True, SPLITS=66, SPLITS_P2=128, BLOCK_N=16, BLOCK_D=128,
                                                 D=128, FUSED_MERGE=True, MERGE_CHUNK=8)),
    "attention, a wake's queries": (ring_attention_queries.queries_kernel,
                                    {"Q": BF, "KV": BF, "POS": I64, "PACC": F32, "PM": F32, "PL": F32, "OUT": BF},
                                    dict(HAS_CONTEXT=True, SPLITS=8, TP=16, BLOCK_N=32, BLOCK_D=128, D=128,
                                         PREC="tf32", UPCAST=False)),
    "attention, grouped heads over a linear cache": (grouped_attention._grouped_kernel, GROUPED, GROUPED_SHAPE),
    "attention, grouped heads, no window, one split": (
        grouped_attention._grouped_kernel, GROUPED, {**GROUPED_SHAPE, "HAS_WINDOW": False, "SPLITS": 1}),
    "attention, grouped heads, a prefill's rows": (grouped_attention._grouped_kernel, GROUPED,
                                                   {**GROUPED_SHAPE, "ROWS": 64}),
    "attention merge": (ring_attention_triton._merge_kernel, {"PACC": F32, "PM": F32, "PL": F32, "OUT": BF},
                        dict(SPLITS=4, SPLITS_P2=4, BLOCK_D=128, D=128, MERGE_CHUNK=8)),
    "rms norm": (norm_rope._rms_norm_kernel, dict.fromkeys(("x_ptr", "alpha_ptr", "out_ptr"), BF), dict(BLOCK=1024)),
    "rope": (norm_rope._rope_kernel, {"x_ptr": BF, "cos_ptr": F32, "sin_ptr": F32, "out_ptr": BF}, dict(HALF=64)),
    "sampling": (topk_sampling._topk_race_kernel, {"LOGITS": BF, "EXPO": F32, "OUT": I64}, dict(BV=2048)),
    "nearest codes": (codebooks._nearest_kernel, {"X": F32, "RES": F32, "CENT": F32, "KEYS": I64}, dict(BB=16, BD=256)),
    "summed codes": (codebooks._sum_kernel, {"CODES": I64, "CENT": F32, "OUT": F32}, dict(BD=256)),
    "stream conv": (stream_conv._conv_kernel, CONV_POINTERS, CONV),
    "stream conv, split depth": (stream_conv._conv_kernel, CONV_POINTERS,
                                 {**CONV, "KK": 768, "BN": 16, "SPLIT": 6, "KSPAN": 128}),
    "stream conv, deep chunks": (stream_conv._conv_kernel, CONV_POINTERS,
                                 {**CONV, "KK": 8192, "KSIZE": 16, "BN": 16, "BK": 128, "SPLIT": 8, "KSPAN": 1024}),
    "transposed conv columns": (stream_convtr._columns_kernel, _of(F32, "X", "W", "WORK"),
                                dict(ELU=True, BM=64, BN=16, BK=128, KSPAN=256, PREC="tf32")),
    "transposed conv overlap-add": (stream_convtr._overlap_add_kernel,
                                    _of(F32, "WORK", "BIAS", "PARTIAL", "OUT", "PENDING"),
                                    dict(STRIDE=8, KSIZE=16, TAPS=2, OVERLAP=8, HAS_BIAS=True, SPLIT=2, BO=4, BT=32)),
    "conv tail": (stream_conv._tail_kernel, {"X": F32, "TAIL": F32}, dict(ELU=True, BT=8)),
    "input embedding": (stream_embeddings._sum_kernel, EMBEDDING, dict(S=17, INT8=False, MASKED=False, BD=1024)),
    "input embedding int8": (stream_embeddings._sum_kernel, EMBEDDING, dict(S=17, INT8=True, MASKED=False, BD=1024)),
    "input embedding masked": (stream_embeddings._sum_kernel, EMBEDDING, dict(S=17, INT8=False, MASKED=True, BD=1024)),
    "delay lines force": (delay_lines._force_kernel, _of(I64, "TOKENS", "O", "LANDING", "CODES") | {"FORCED": "*i1"},
                          dict(S=17, BS=32)),
    "delay lines begin": (delay_lines._begin_kernel,
                          _of(I64, "TOKENS", "O", "DELAYS", "INITIAL", "NOW", "TARGET")
                          | {"FORCED": "*i1", "TARGET_FORCED": "*i1"}, dict(S=17, BS=32)),
    "delay lines commit": (delay_lines._commit_kernel, _of(I64, "TOKENS", "O", "TRAIL", "GENERATED", "OUT")
                           | {"FORCED": "*i1"}, dict(S=17, BS=32)),
}


@pytest.mark.parametrize("name", list(KERNELS))
def test_compiles_for_hopper_with_overlapped_launches(name):
    kernel, pointers, constants = KERNELS[name]
    ptx = _compile(kernel, pointers, {**constants, "PDL": True})
    launch, wait = ptx.find("griddepcontrol.launch_dependents"), ptx.find("griddepcontrol.wait")
    assert 0 <= launch < wait, "the next kernel may launch before this one waits"
    assert "st.global" not in ptx[:wait] and "atom." not in ptx[:wait], "a write before the wait"
    if name.startswith("product") and not name.endswith("int4"):  # its first weight tile, loaded before it waits
        assert "ld.global" in ptx[launch:wait]
