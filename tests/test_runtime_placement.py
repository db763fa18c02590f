"""Demand-sized placement (CPU emulation): interface, accounting, poisoning, reset."""
import inspect

import pytest
import torch

from engine.state import FullStore, Region, Store, restore_state, save_state
from engine.state.demand import DemandStore

FRAME_KV = Region("lm.kv", (2, 2, 2, 4), torch.float32, "frame", retain=3000)  # 3000 frames = 240 s
MIMI_KV = Region("mimi.kv", (2, 2, 2, 4), torch.float32, "mimi_step", retain=250)
DEP_KV = Region("dep.kv", (8, 2, 2, 2, 4), torch.float32)  # restarted every frame: fixed
POS = Region("lm.pos", (1,), torch.int64)
DELAY = Region("lm.delay", (3,), torch.int64, "frame", retain=2, per_tick=2)
REGIONS = [FRAME_KV, MIMI_KV, DEP_KV, POS, DELAY]
WHOLE_BYTES = DEP_KV.bytes_full() + POS.bytes_full()


def _poisoned(t: torch.Tensor) -> bool:
    if t.dtype.is_floating_point:
        return bool(torch.isnan(t).all())
    return bool((t == torch.iinfo(t.dtype).min).all())


def test_both_placements_implement_the_store_protocol():
    members = [name for name in vars(Store) if not name.startswith("_") or name in ("__getitem__", "__contains__")]
    members = [m for m in members if callable(getattr(Store, m))]
    assert {"advance", "ensure", "ticks", "reset", "nbytes", "region_bytes", "mapped_bytes", "close"} <= set(members)
    for placement in (FullStore, DemandStore):
        for name in members:
            ours, declared = inspect.signature(getattr(placement, name)), inspect.signature(getattr(Store, name))
            assert list(ours.parameters) == list(declared.parameters), (placement.__name__, name)
        store = placement(REGIONS)
        assert set(store.regions) == {r.name for r in REGIONS} and store.device.type == "cpu"
        assert store.nbytes("lm.pos") == POS.bytes_full()


def test_same_interface_and_shapes_as_state_store():
    stock, demand = FullStore(REGIONS), DemandStore(REGIONS)
    for r in REGIONS:
        assert r.name in demand
        assert demand[r.name].shape == stock[r.name].shape
        assert demand[r.name].dtype == stock[r.name].dtype
    assert demand.reserved_bytes() == stock.nbytes()
    assert "nothing" not in demand


def test_memory_tracks_the_conversation_not_the_retention():
    store = DemandStore(REGIONS)
    assert store.nbytes() == WHOLE_BYTES  # nothing of the rings before the first tick
    for _ in range(375):  # 30 s of conversation at 12.5 Hz
        store.advance("frame")
        store.advance("mimi_step", 2)
    assert store.ticks("lm.kv") == 375 and store.ticks("mimi.kv") == 750
    expected = (WHOLE_BYTES + 375 * FRAME_KV.entry_bytes() + 250 * MIMI_KV.entry_bytes()
                + 2 * DELAY.entry_bytes())
    assert store.nbytes() == expected
    assert store.nbytes("mimi.") == 250 * MIMI_KV.entry_bytes()
    assert store.nbytes() < store.reserved_bytes() / 4  # 30 s must not hold 240 s of KV
    held = store.region_bytes()
    assert sum(held.values()) == store.nbytes() and held["mimi.kv"] == 250 * MIMI_KV.entry_bytes()
    assert held["lm.kv"] == FRAME_KV.bytes_at(store.ticks("lm.kv")) and held["dep.kv"] == DEP_KV.bytes_full()
    full = FullStore(REGIONS).region_bytes()
    assert full == {r.name: r.bytes_full() for r in REGIONS}


def test_backs_exactly_the_entries_the_clock_has_written():
    store = DemandStore(REGIONS)
    kv = store["lm.kv"]
    assert _poisoned(kv) and _poisoned(store["lm.delay"])
    store.advance("frame", 5)
    assert (kv[:5] == 0).all() and _poisoned(kv[5:])
    kv[:5] = 1.0
    store.advance("frame")  # growth keeps what was written
    assert (kv[:5] == 1).all() and (kv[5] == 0).all() and _poisoned(kv[6:])
    assert (store["lm.delay"] == 0).all()  # 2 entries per tick, retain 2: full at once
    assert _poisoned(store["mimi.kv"])  # another clock: untouched


def test_ensure_sets_an_absolute_floor():
    store = DemandStore(REGIONS)
    store.ensure({"frame": 10, "mimi_step": 300})
    assert store.ticks("lm.kv") == 10 and store.ticks("mimi.kv") == 300
    assert _poisoned(store["lm.kv"][10:]) and not _poisoned(store["lm.kv"][9:10])
    assert not _poisoned(store["mimi.kv"])  # 300 ticks fill the 250-entry ring
    store.ensure({"frame": 4})  # never shrinks
    assert store.ticks("lm.kv") == 10


def test_whole_regions_are_zeroed_and_never_resized():
    store = DemandStore(REGIONS)
    assert (store["dep.kv"] == 0).all() and (store["lm.pos"] == 0).all()
    before = store.nbytes()
    store.advance("frame", 100)
    assert store.nbytes("dep.") + store.nbytes("lm.pos") == before


def test_reset_returns_every_ring_to_empty():
    store = DemandStore(REGIONS)
    store.advance("frame", 40)
    store.advance("mimi_step", 80)
    store["lm.pos"].fill_(40)
    store.reset()
    assert store.ticks("mimi.kv") == 0 and _poisoned(store["mimi.kv"])
    assert store.nbytes() == WHOLE_BYTES
    assert _poisoned(store["lm.kv"]) and (store["lm.pos"] == 0).all()


def test_memory_outside_the_allocator_is_reported_only_for_device_rings():
    # CPU rings are torch tensors (counted by torch); only CUDA rings are mapped through VMM.
    regions = [Region("r", (4,), torch.float32, "frame", 8)]
    assert FullStore(regions).mapped_bytes() == 0
    store = DemandStore(regions)
    store.advance("frame", 3)
    assert store.mapped_bytes() == 0 and store.nbytes() == 3 * 16


@pytest.mark.parametrize("placement", [FullStore, DemandStore])
def test_a_saved_state_comes_back_at_the_same_addresses(placement):
    """save_state then more ticks and writes, then restore_state: the clocks, the entries and what lies
    past them (zeros in a full store, nothing backed in a demand-sized one) are as when saved."""
    store = placement(REGIONS)
    store.advance("frame", 6)
    store["lm.kv"][:6] = torch.arange(6.0).view(6, 1, 1, 1, 1)
    store["dep.kv"].fill_(2.0)
    saved, before = save_state(store), {name: store[name].clone() for name in store.regions}
    addresses = {name: store[name].data_ptr() for name in store.regions}
    assert saved.nbytes() == 6 * FRAME_KV.entry_bytes() + 2 * DELAY.entry_bytes() + WHOLE_BYTES
    for _ in range(3):
        store.advance("frame", 20)
        store.advance("mimi_step", 9)
        store["lm.kv"][:26].fill_(7.0)
        store["dep.kv"].zero_()
        store["mimi.kv"][:9].fill_(3.0)
        restore_state(store, saved)
        assert {name: store[name].data_ptr() for name in store.regions} == addresses
        assert store.ticks("lm.kv") == 6 and store.ticks("mimi.kv") == 0
        if placement is DemandStore:  # what the clocks require again, no more
            assert store.nbytes() == saved.nbytes()
        for name in store.regions:
            torch.testing.assert_close(store[name], before[name], rtol=0, atol=0, equal_nan=True, msg=name)
    store.advance("frame")  # growing again backs zeros after the kept entries
    assert (store["lm.kv"][6] == 0).all() and (store["lm.kv"][:6] == before["lm.kv"][:6]).all()
