"""Record a small golden of MiniCPM-o 4.5's LLM path from the reference's own code, for
tests/test_minicpmo_llm.py: transformers 4.51's Qwen3ForCausalLM (a tiny random config) driven through
MiniCPMO45/utils.py's StreamDecoder as DuplexCapability drives it — system prompt, then units of
<unit>, audio rows, greedy decode steps, terminator + </unit> — with the "basic" sliding window on and
small water marks, so StreamDecoder.enforce_window drops units and re-rotates the kept keys.
Runs: fp32; fp32 with config sliding_window = 10 (4.51's mask clips every layer to it); bf16 the way
the demo gets there (fp32 model, then .bfloat16(), which rounds the rotary inv_freq too).
Recorded per run: every feed call's embeds, the last-row logits and all hidden rows it returned, and
each cache drop (calls fed before it, preserve, length). Nothing in the reference is changed.

    /work/ref/refvenv/bin/python packaging/make_minicpmo_llm_golden.py PATH/TO/MiniCPM-o-Demo
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "golden" / "minicpmo_llm.safetensors"
CONFIG = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=512,
              tie_word_embeddings=False, sliding_window=None)
SPECIAL = {"<unit>": 60, "</unit>": 61, "<|chunk_eos|>": 62, "<|turn_eos|>": 63}
SYSTEM = [1, 5, 9, 14, 20, 27]
UNITS = [(3, 2), (3, 0), (3, 4), (3, 1), (3, 3), (3, 2), (3, 0), (3, 2)]  # (audio rows, decode steps)
HIGH, LOW = 40, 30  # basic_window_high_tokens / low_tokens, small enough to drop units here


class Tokenizer:
    """What StreamDecoder.__init__ reads from a tokenizer, nothing more."""
    eos_token_id = 59
    unk_token_id = None
    all_special_ids: list = []
    all_special_tokens: list = []

    def convert_tokens_to_ids(self, token):
        return SPECIAL.get(token, 58)


def model(seed: int, window):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(**{**CONFIG, "sliding_window": window})
    config._attn_implementation = "sdpa"
    llm = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in llm.named_parameters():
            p.normal_(1.0, 0.2) if "norm" in name else p.normal_(0.0, 0.15)
    return llm, config


def run(utils, llm, record: dict, name: str, dtype: torch.dtype) -> None:
    drops, calls = [], []
    original = utils.drop_tokens_from_cache

    def drop(cache, length, preserve, position_offset, **kw):
        out = original(cache, length, preserve, position_offset, **kw)
        if out[2]:
            drops.append((len(calls), preserve, length))
        return out

    utils.drop_tokens_from_cache = drop
    decoder = utils.StreamDecoder(llm, Tokenizer())
    decoder.set_window_config(utils.DuplexWindowConfig(sliding_window_mode="basic", basic_window_high_tokens=HIGH,
                                                       basic_window_low_tokens=LOW))
    decoder.set_window_enabled(True)
    g = torch.Generator().manual_seed(7)

    def feed(embeds, logits=False):
        out = decoder.feed(embeds, return_logits=logits)
        calls.append((embeds, None if out is None else out[0], None if out is None else out[1][0]))
        return out

    feed(decoder.embed_tokens(SYSTEM))
    decoder.register_system_prompt()
    for rows, steps in UNITS:
        decoder.register_unit_start()
        feed(decoder.embed_token(SPECIAL["<unit>"]))
        logits, _ = feed(torch.randn(rows, CONFIG["hidden_size"], generator=g).to(dtype), logits=True)
        for _ in range(steps):
            logits, _ = feed(decoder.embed_token(int(logits[0].argmax())), logits=True)
        feed(decoder.embed_tokens([SPECIAL["<|chunk_eos|>"], SPECIAL["</unit>"]]))
        decoder.register_unit_end(input_type="audio")
        decoder.enforce_window()
    utils.drop_tokens_from_cache = original
    record[f"{name}/feed_embeds"] = torch.cat([c[0].float() for c in calls])
    record[f"{name}/feed_lengths"] = torch.tensor([c[0].shape[0] for c in calls])
    record[f"{name}/feed_logits_calls"] = torch.tensor([i for i, c in enumerate(calls) if c[1] is not None])
    record[f"{name}/feed_logits"] = torch.cat([c[1].float() for c in calls if c[1] is not None])
    record[f"{name}/feed_hidden"] = torch.cat([c[2].float() for c in calls if c[2] is not None])
    record[f"{name}/drops"] = torch.tensor(drops, dtype=torch.int64).view(-1, 3)
    print(f"{name}: {len(calls)} feeds, drops {drops}, final cache {decoder.get_cache_length()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path, help="the MiniCPM-o-Demo checkout (its MiniCPMO45 package)")
    args = parser.parse_args()
    sys.path.insert(0, str(args.reference))
    import MiniCPMO45.utils as utils

    record, configs = {}, {}
    with torch.no_grad():
        llm, config = model(20261205, None)
        record.update({"weights/llm." + k: v.clone() for k, v in llm.state_dict().items()})
        run(utils, llm, record, "fp32", torch.float32)
        configs["fp32"] = config.to_dict()
        windowed, config = model(20261205, 10)
        run(utils, windowed, record, "window", torch.float32)
        configs["window"] = config.to_dict()
        run(utils, llm.bfloat16(), record, "bf16", torch.bfloat16)
        configs["bf16"] = configs["fp32"]
    save_file({k: v.contiguous() for k, v in record.items()}, OUT,
              metadata={"configs": json.dumps(configs, sort_keys=True), "reference": "MiniCPM-o-Demo 28b60cf"})
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
