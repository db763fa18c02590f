"""The stock Step-Audio2 token2wav (`minicpmo-utils` 1.0.7 from PyPI, module `stepaudio2`,
installed --no-deps by packaging/test.sh) for parity tests: entered without its speech front
end by bench.stock_token2wav (the benchmark drives it the same way), plus the random
weights the module tests give it."""
from __future__ import annotations

import math

import torch

from bench.stock_token2wav import stock, stock_token2wav

__all__ = ["randomize", "stock", "stock_token2wav"]


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
