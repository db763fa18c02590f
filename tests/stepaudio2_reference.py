"""The stock Step-Audio2 token2wav (`minicpmo-utils` 1.0.7 from PyPI, module `stepaudio2`,
installed --no-deps by packaging/test.sh) for parity tests.

Its package `__init__` imports the whole speech front end (ONNX tokenizers, torchaudio,
hyperpyyaml) only to export `Token2wav`; the parity tests need the flow and vocoder modules
alone, so the package is entered without running that `__init__`: its submodules are the
stock code, imported from the installed files unchanged.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import sys
import types

import torch


def stock(module: str):
    """`stepaudio2.<module>` from the installed minicpmo-utils, e.g. stock("causal_vocoder.generator")."""
    if "stepaudio2" not in sys.modules:
        spec = importlib.util.find_spec("stepaudio2")
        if spec is None:
            raise ModuleNotFoundError("stepaudio2 (pip install --no-deps minicpmo-utils==1.0.7)")
        package = types.ModuleType("stepaudio2")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["stepaudio2"] = package
    return importlib.import_module(f"stepaudio2.{module}")


_FRONT_END = ("s3tokenizer", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi", "hyperpyyaml",
              "librosa", "librosa.filters")


def stock_token2wav():
    """The stock `stepaudio2.token2wav` module, for its streaming logic (`Token2wav.stream`,
    `set_stream_cache`, the cache trimming and the vocoder's first-chunk silence).

    Its module imports the speech front end: the speech tokenizer (s3tokenizer), torchaudio's
    fbank and resampling, hyperpyyaml and librosa's mel filters, used only to prepare a voice
    prompt from a WAV file and to read the YAML. The tests hand it a prepared prompt and built
    modules, so where those packages are not installed, empty placeholder modules stand in for
    them at import (also where a package is present but cannot import); calling anything from
    one raises."""
    missing = {name for name in _FRONT_END if not _importable(name.split(".")[0])}
    for name in sorted(missing):
        placeholder = types.ModuleType(name)
        placeholder.__path__ = []
        placeholder.__getattr__ = functools.partial(_unavailable, name)  # `from name import x` gets a stand-in
        sys.modules[name] = placeholder
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, placeholder)
    stock("causal_vocoder.generator")  # the package entry first (its __init__ skipped)
    return importlib.import_module("stepaudio2.token2wav")


def _importable(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        importlib.import_module(name)
    except ImportError:  # absent, or present without its own needs (minicpmo-utils' s3tokenizer wants onnx)
        return False
    return True


def _unavailable(module: str, attribute: str):
    if attribute.startswith("__"):
        raise AttributeError(attribute)

    def refuse(*args, **kwargs):
        raise RuntimeError(f"{module}.{attribute} is not installed here; the parity tests do not use it")
    return refuse


def randomize(model: torch.nn.Module) -> None:
    """Weights of a typical scale in every linear, conv and affine norm: the stock
    initialisation zeroes some layers, which would hide differences in what follows them."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Conv1d)):
                module.weight.copy_(torch.randn_like(module.weight) / math.sqrt(module.weight[0].numel()))
                if module.bias is not None:
                    module.bias.copy_(0.1 * torch.randn_like(module.bias))
            elif isinstance(module, torch.nn.LayerNorm) and module.weight is not None:
                module.weight.copy_(1 + 0.1 * torch.randn_like(module.weight))
                module.bias.copy_(0.1 * torch.randn_like(module.bias))
