"""Quantizing a block of rows at a time gives the bits of quantizing the whole (every quantizer works
on rows alone), from a float source of another dtype moved block by block, the last block short."""
import torch

from engine.weights.int4 import quantize_groups, quantize_table
from engine.weights.int8 import quantize_rows
from engine.weights.row_blocks import in_row_blocks


def _same(a, b) -> None:
    assert type(a) is type(b) and len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
        else:
            assert x == y


def test_blocks_of_rows_quantize_as_the_whole():
    w = (torch.randn(203, 192, generator=torch.Generator().manual_seed(0)) * 0.05).to(torch.bfloat16)
    w[7] = 0  # an all-zero row keeps its zero scale
    for quantize in (quantize_rows, quantize_groups, quantize_table):
        whole = quantize(w.float())
        _same(in_row_blocks(quantize, w, torch.device("cpu"), torch.float32, block=192 * 16), whole)
        _same(in_row_blocks(quantize, w.float(), block=1), whole)  # a row a block

