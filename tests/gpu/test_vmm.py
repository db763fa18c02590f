"""VmmBuffer on a real GPU: stable base, growth by granules, data kept, memory returned."""
import pytest
import torch

from engine.state.vmm import VmmBuffer

pytestmark = pytest.mark.gpu
MiB = 1 << 20


def test_growth_keeps_address_and_data(record):
    buf = VmmBuffer(10 * MiB + 123, "cuda")
    gran = buf.granularity
    record("granularity_bytes", gran)
    t = buf.as_tensor(torch.uint8, (10 * MiB + 123,))
    assert t.data_ptr() == buf.base and buf.mapped_bytes == gran
    first = torch.randint(0, 256, (gran,), dtype=torch.uint8, device="cuda")
    t[:gran] = first
    buf.ensure(3 * gran - 5)
    assert buf.mapped_bytes == 3 * gran and t.data_ptr() == buf.base
    more = torch.randint(0, 256, (2 * gran,), dtype=torch.uint8, device="cuda")
    t[gran:3 * gran] = more
    assert torch.equal(t[:gran], first) and torch.equal(t[gran:3 * gran], more)
    buf.ensure(10 * MiB + 123)
    assert buf.mapped_bytes == buf.reserved_bytes
    t[-7:] = 9  # the last, partial granule is backed too
    assert (t[-7:] == 9).all()
    buf.shrink(gran + 1)
    assert buf.mapped_bytes == 2 * gran and torch.equal(t[:gran], first)
    buf.shrink(0)
    assert buf.mapped_bytes == gran  # the base granule stays
    buf.close()
    assert buf.base is None


def test_typed_views_share_the_range():
    with VmmBuffer(3 * 4 * 1000 * 2, "cuda") as buf:
        buf.ensure(buf.reserved_bytes)
        bf16 = buf.as_tensor(torch.bfloat16, (1000, 3, 4))
        bf16.fill_(1.5)
        assert bf16.data_ptr() == buf.base and bf16.is_contiguous()
        assert (buf.as_tensor(torch.bfloat16, (12000,)) == 1.5).all()


def test_mapped_memory_is_device_memory_and_is_returned(record):
    size = 512 * MiB
    torch.cuda.synchronize()
    free0, _ = torch.cuda.mem_get_info()
    buf = VmmBuffer(size, "cuda")
    free_reserved, _ = torch.cuda.mem_get_info()
    buf.ensure(size)
    free_mapped, _ = torch.cuda.mem_get_info()
    buf.close()
    free_closed, _ = torch.cuda.mem_get_info()
    record("reserve_only_MiB", (free0 - free_reserved) / MiB)
    record("mapped_MiB", (free0 - free_mapped) / MiB)
    record("after_close_MiB", (free0 - free_closed) / MiB)
    assert free0 - free_reserved < 64 * MiB  # reserving address space costs no memory
    assert abs((free0 - free_mapped) - size) < 64 * MiB
    assert free0 - free_closed < 64 * MiB


def test_memory_budget_counts_mappings_and_torch_together():
    from engine.errors import DeviceMemoryError
    from engine.state.memory_budget import memory_budget

    torch.cuda.empty_cache()
    limit = torch.cuda.memory_reserved() + 64 * MiB
    with memory_budget(limit) as budget, VmmBuffer(256 * MiB, "cuda") as buf:
        buf.ensure(32 * MiB)
        assert budget.mapped == buf.mapped_bytes == 32 * MiB
        with pytest.raises(DeviceMemoryError, match="memory budget"):
            buf.ensure(128 * MiB)  # 32 MiB mapped + 96 more > 64
        assert buf.mapped_bytes == budget.mapped  # a refused granule is not counted
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(48 * MiB, dtype=torch.uint8, device="cuda")  # torch has only what is not mapped
        buf.shrink(0)
        torch.empty(48 * MiB, dtype=torch.uint8, device="cuda")  # unmapped state gives room back
    assert budget.mapped == 0
    torch.empty(128 * MiB, dtype=torch.uint8, device="cuda")  # the cap is gone with the block


def test_room_is_what_a_budget_leaves():
    """The spare-time preparations ask `room`: under a smaller card's budget it is that card's room,
    not the larger device's free memory."""
    from engine.state.memory_budget import memory_budget, room

    torch.cuda.empty_cache()
    assert room() == torch.cuda.mem_get_info()[0]
    limit = torch.cuda.memory_reserved() + 256 * MiB
    with memory_budget(limit), VmmBuffer(256 * MiB, "cuda") as buf:
        buf.ensure(64 * MiB)
        assert room() == limit - torch.cuda.memory_reserved() - 64 * MiB
    assert room() == torch.cuda.mem_get_info()[0]


def test_reads_ahead_map_shared_zeros_that_hold_no_memory():
    """Past its own memory a buffer reads one shared granule of zeros: no memory per buffer, the
    reads zero; growing over them gives own memory (zeroed) at the same address, and a graph
    captured over the whole span replays the same after growth."""
    torch.cuda.synchronize()
    with VmmBuffer(64 * MiB, "cuda") as a, VmmBuffer(64 * MiB, "cuda") as b:
        gran = a.granularity
        free0, _ = torch.cuda.mem_get_info()
        a.ensure(gran, 40 * MiB)
        b.ensure(gran, 64 * MiB)
        torch.cuda.synchronize()
        free1, _ = torch.cuda.mem_get_info()
        assert a.mapped_bytes == b.mapped_bytes == gran and a.readable_bytes == 40 * MiB
        assert free0 - free1 < 8 * MiB  # 100 MiB readable, at most the one shared granule made
        ta, tb = a.as_tensor(torch.float32, (16 * MiB,)), b.as_tensor(torch.float32, (16 * MiB,))
        ta[: gran // 4] = 1.0
        assert ta[: 40 * MiB // 4].sum().item() == gran // 4  # reading past its own memory: zeros
        assert tb.abs().sum().item() == 0
        out = torch.zeros((), device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out.copy_(ta[: 40 * MiB // 4].sum())
        graph.replay()
        assert out.item() == gran // 4
        a.ensure(5 * gran - 3, 40 * MiB)  # own memory over the zeros: zeroed, then written
        assert a.mapped_bytes == 5 * gran and a.readable_bytes == 40 * MiB and ta.data_ptr() == a.base
        assert (ta[gran // 4: 5 * gran // 4] == 0).all() and (ta[: gran // 4] == 1).all()
        ta[: 5 * gran // 4] = 2.0
        assert tb.abs().sum().item() == 0  # the shared zeros were not written
        graph.replay()
        assert out.item() == 2.0 * 5 * gran // 4
        a.shrink(gran)
        assert a.mapped_bytes == gran and a.readable_bytes == gran
        a.ensure(gran, 8 * MiB)
        assert ta[gran // 4: 8 * MiB // 4].abs().sum().item() == 0
