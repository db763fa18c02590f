"""On CUDA, quantizing by blocks of rows gives the whole's bits (int4's error sums included) and holds
little more than the result: a head-sized weight quantized from the host never sits on the device in
float, nor do its search's temporaries."""
import pytest
import torch

from engine.weights.int4 import quantize_groups, quantize_table
from engine.weights.int8 import quantize_rows
from engine.weights.row_blocks import BLOCK_ELEMENTS, in_row_blocks

pytestmark = pytest.mark.gpu

DEVICE = torch.device("cuda")


@pytest.mark.parametrize("quantize", [quantize_rows, quantize_groups, quantize_table])
def test_blocks_on_the_device(quantize):
    w = (torch.randn(16384, 4096, generator=torch.Generator().manual_seed(0)) * 0.02).to(torch.bfloat16)
    whole = quantize(w.to(DEVICE).float())
    before = torch.cuda.memory_allocated(DEVICE)
    torch.cuda.reset_peak_memory_stats(DEVICE)
    blocked = in_row_blocks(quantize, w, DEVICE, torch.bfloat16)
    for a, b in zip(blocked, whole, strict=True):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
    result = sum(t.numel() * t.element_size() for t in blocked if isinstance(t, torch.Tensor))
    # The float source is 128 MB; a block's temporaries (eight float32 copies for int4) are about 256 MB.
    assert torch.cuda.max_memory_allocated(DEVICE) - before <= result + 12 * 4 * BLOCK_ELEMENTS


def test_a_weight_keeps_no_segment_of_its_temporaries():
    """The outputs are made before the blocks' temporaries: once those are freed and the cache
    emptied, the weight holds what the same tensors made alone on an empty cache hold (made after
    them, it was carved from their cached segment, which then stayed reserved with it)."""
    w = (torch.randn(16384, 4096, generator=torch.Generator().manual_seed(1)) * 0.02).to(torch.bfloat16)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved(DEVICE)
    kept = in_row_blocks(quantize_groups, w, DEVICE, torch.bfloat16)
    torch.cuda.empty_cache()
    held = torch.cuda.memory_reserved(DEVICE) - before
    kinds = [(t.shape, t.dtype) for t in kept if isinstance(t, torch.Tensor)]
    del kept
    torch.cuda.empty_cache()
    alone = [torch.empty(shape, dtype=dtype, device=DEVICE) for shape, dtype in kinds]
    own = torch.cuda.memory_reserved(DEVICE) - before
    assert held <= own + 2 * 2**20, (held, own)
    del alone
