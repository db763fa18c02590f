"""Counter-based sampling: exact hash, determinism, and the distributions it draws from."""
import torch

from engine.runtime.sampling import SamplingConfig, advance_rng, rng_region, sample, seed_rng, uniforms

# Chi-square critical values at p = 0.001: a correct sampler fails one run in a thousand.
CHI2_CRIT = {2: 13.816, 5: 20.515, 19: 43.820}


def _rng(seed=1234):
    rng = torch.zeros(rng_region("s.rng").shape, dtype=torch.int64)
    seed_rng(rng, seed)
    return rng


def _lowbias32(x: int) -> int:
    """Independent reference on Python integers."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_hash_is_exact_32_bit_arithmetic():
    seed, step, stream, vocab = (1 << 40) + 77, (1 << 33) + 5, 3, 6
    rng = torch.tensor([seed, step])
    h = _lowbias32(seed & 0xFFFFFFFF)
    h = _lowbias32(h ^ (seed >> 32))
    h = _lowbias32(h ^ (step & 0xFFFFFFFF))
    h = _lowbias32(h ^ (step >> 32))
    h = _lowbias32(h ^ stream)
    expected = [(_lowbias32(h ^ _lowbias32(i + 1)) + 0.5) / 2 ** 32 for i in range(vocab)]
    assert uniforms(rng, torch.tensor([stream]), vocab)[0].tolist() == expected


def test_uniforms_are_uniform_and_uncorrelated():
    rng = _rng()
    u = uniforms(rng, torch.arange(2), 20000)
    counts = torch.histc(u[0].float(), bins=20, min=0, max=1)
    assert _chi2(counts, torch.full((20,), 0.05)) < CHI2_CRIT[19]
    advance_rng(rng)
    later = uniforms(rng, torch.arange(1), 20000)[0]
    for other in (u[1], later):  # another stream, the next step
        assert abs(torch.corrcoef(torch.stack([u[0], other]))[0, 1]) < 0.05


def test_draws_follow_softmax_of_scaled_logits():
    logits = torch.tensor([1.0, 0.2, -0.5, 2.0, 0.0, -1.5])
    cfg = SamplingConfig(temperature=0.8)
    rng, draws = _rng(7), []
    for _ in range(12):  # 500 streams per step, 12 steps
        draws.append(sample(logits.expand(500, -1), cfg, rng, stream=0))
        advance_rng(rng)
    tokens = torch.cat(draws)
    counts = torch.bincount(tokens, minlength=6).double()
    assert _chi2(counts, torch.softmax(logits.double() / 0.8, -1)) < CHI2_CRIT[5]


def test_top_k_keeps_only_the_k_most_likely():
    logits = torch.tensor([0.1, 1.5, -0.3, 1.2, 0.9, -2.0, 0.4, 1.0])
    tokens = sample(logits.expand(6000, -1), SamplingConfig(1.0, top_k=3), _rng(9), stream=0)
    top = torch.topk(logits, 3).indices
    assert torch.isin(tokens, top).all()
    counts = torch.bincount(tokens, minlength=8)[top].double()
    assert _chi2(counts, torch.softmax(logits[top].double(), -1)) < CHI2_CRIT[2]


def test_greedy_is_argmax():
    logits = torch.randn(5, 50)
    assert torch.equal(sample(logits, SamplingConfig(0.0), _rng(), 0), logits.argmax(-1))


def test_same_counters_same_tokens_without_generator_state():
    logits = torch.randn(17, 2048)
    cfg = SamplingConfig(0.8, top_k=250)
    rng = _rng(42)
    torch.manual_seed(0)
    first = sample(logits, cfg, rng, stream=1)
    torch.manual_seed(1)  # global generator state must not matter
    assert torch.equal(sample(logits, cfg, rng.clone(), stream=1), first)
    assert sample(logits[3], cfg, rng, stream=4) == first[3]  # row r is stream + r
    advance_rng(rng)
    assert not torch.equal(sample(logits, cfg, rng, stream=1), first)
    seed_rng(rng, 43)
    assert not torch.equal(sample(logits, cfg, rng, stream=1), first)


def test_tokens_are_int64_with_the_logits_leading_shape():
    tokens = sample(torch.randn(2, 3, 11), SamplingConfig(0.7, 5), _rng(), 0)
    assert tokens.shape == (2, 3) and tokens.dtype == torch.int64
