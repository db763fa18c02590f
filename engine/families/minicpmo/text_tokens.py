"""MiniCPM-o's text tokenizer (Qwen2's byte-level BPE plus the model's added tokens), read
from the checkpoint folder: `tokenizer.json` when the folder has one, else built from
`vocab.json` and `merges.txt` the way transformers converts a slow Qwen2 tokenizer, so both
give the ids the reference's tokenizer gives. The unit protocol needs it for the character
limit, the text a unit says and the system prompt; the forbidden ids come from
`tokenizer_config.json`'s `bad_token_ids`."""
from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from ...errors import CheckpointError

# transformers 4.51's Qwen2Converter (convert_slow_tokenizer.py): the pre-tokenizer's split.
_QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
TOKENIZER_FILES = ("tokenizer_config.json", "vocab.json", "merges.txt")


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: not a readable JSON file ({error})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return value


def _added_tokens(config: dict, path: Path) -> list[dict]:
    entries = config.get("added_tokens_decoder", {})
    if not isinstance(entries, dict):
        raise CheckpointError(f"{path}: added_tokens_decoder is not an object")
    added = []
    for key, entry in sorted(entries.items(), key=lambda item: int(item[0]) if str(item[0]).isdigit() else -1):
        if not str(key).isdigit() or not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise CheckpointError(f"{path}: added token {key!r} is not an id with a content")
        added.append({"id": int(key), "content": entry["content"], "single_word": bool(entry.get("single_word")),
                      "lstrip": bool(entry.get("lstrip")), "rstrip": bool(entry.get("rstrip")),
                      "normalized": bool(entry.get("normalized")), "special": bool(entry.get("special"))})
    return added


def _from_vocab_and_merges(folder: Path, config: dict) -> Tokenizer:
    vocab = _read_json(folder / "vocab.json")
    try:
        lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{folder / 'merges.txt'}: not readable ({error})") from None
    merges = [line for line in lines if line and not line.startswith("#version")]
    spec = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": _added_tokens(config, folder / "tokenizer_config.json"),
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": _QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    try:
        return Tokenizer.from_str(json.dumps(spec))
    except Exception as error:  # the tokenizers library raises its own exception type
        raise CheckpointError(f"{folder}: vocab.json and merges.txt do not make a tokenizer ({error})") from None


class TextTokens:
    """Text to ids and back, and the ids of the protocol's tokens by name."""

    def __init__(self, folder: Path):
        config = _read_json(folder / "tokenizer_config.json")
        if (folder / "tokenizer.json").is_file():
            try:
                self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
            except Exception as error:  # the tokenizers library raises its own exception type
                raise CheckpointError(f"{folder / 'tokenizer.json'}: not a tokenizer ({error})") from None
        else:
            self._tokenizer = _from_vocab_and_merges(folder, config)
        bad = config.get("bad_token_ids", [])
        if not isinstance(bad, list) or not all(isinstance(i, int) and i >= 0 for i in bad):
            raise CheckpointError(f"{folder / 'tokenizer_config.json'}: bad_token_ids is not a list of ids")
        self.bad_token_ids = list(bad)
        self.eos_id = self.id(config.get("eos_token", "<|im_end|>"))

    def id(self, token: str) -> int:
        found = self._tokenizer.token_to_id(token)
        if found is None:
            raise CheckpointError(f"the tokenizer has no token {token!r}")
        return found

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        """The text of `ids`, special tokens left out (what the reference shows and counts)."""
        return self._tokenizer.decode(ids, skip_special_tokens=True)
