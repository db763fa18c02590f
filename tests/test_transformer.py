"""Our streaming transformer against the reference's, streaming and whole-signal."""
import pytest
import torch
from moshi.modules.transformer import StreamingTransformer as RefTransformer

from engine.loading.safetensors_files import official_layout
from engine.state import FullStore
from engine.transformer import StreamingTransformer, TransformerConfig

MIMI_LIKE = dict(d_model=32, num_heads=4, num_layers=2, dim_feedforward=64, context=6,
                 norm="layer_norm", gating="none", layer_scale=0.1)
LM_LIKE = dict(d_model=32, num_heads=4, num_layers=2, dim_feedforward=4 * 32, context=5,
               norm="rms_norm_f32", gating="silu", layer_scale=None)


def _pair(kwargs, seed=0):
    torch.manual_seed(seed)
    ref = RefTransformer(causal=True, positional_embedding="rope", max_period=10000, **kwargs)
    for p in ref.parameters():  # norms/scales start at constants: make every weight matter
        p.data.normal_(0, 0.3)
    ours = StreamingTransformer(TransformerConfig(**kwargs), "t")
    ours.load_state_dict(official_layout(ref.state_dict()))
    return ref.eval(), ours.eval()


@pytest.mark.parametrize("kwargs", [MIMI_LIKE, LM_LIKE], ids=["mimi", "lm"])
@pytest.mark.parametrize("chunk", [1, 2])
def test_streaming_matches_reference_across_ring_wrap(kwargs, chunk):
    ref, ours = _pair(kwargs)
    x = torch.randn(1, 20, 32)  # 20 steps: the ring of 5-6 wraps several times
    store = FullStore(ours.regions())
    with torch.no_grad(), ref.streaming(1):
        for t in range(0, 20, chunk):
            expected = ref(x[:, t:t + chunk])
            got = ours(x[:, t:t + chunk], store)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs", [MIMI_LIKE, LM_LIKE], ids=["mimi", "lm"])
def test_whole_signal_matches_reference(kwargs):
    ref, ours = _pair(kwargs, seed=1)
    x = torch.randn(1, 15, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)


def test_per_step_weights_match_reference():
    kwargs = dict(LM_LIKE, context=4, weights_per_step=4)
    ref, ours = _pair(kwargs, seed=2)
    x = torch.randn(1, 4, 32)
    store = FullStore(ours.regions())
    with torch.no_grad(), ref.streaming(1):
        for k in range(4):
            torch.testing.assert_close(ours(x[:, k:k + 1], store, step=k), ref(x[:, k:k + 1]),
                                       rtol=1e-5, atol=1e-5)


def test_wrong_step_weights_are_detected():
    """Guard for the test above: the per-step weight sets really differ."""
    kwargs = dict(LM_LIKE, context=4, weights_per_step=4)
    ref, ours = _pair(kwargs, seed=2)
    x = torch.randn(1, 1, 32)
    with torch.no_grad():
        assert not torch.allclose(ours(x, FullStore(ours.regions()), step=1),
                                  ours(x, FullStore(ours.regions()), step=0))
