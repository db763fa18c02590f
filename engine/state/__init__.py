"""Declared streaming state and where it lives: regions and their clocks (`regions`), the
full-retention store (`full`), demand-sized state at stable addresses (`demand`, over CUDA
virtual memory in `vmm`), which of them a conversation gets (`placement`), and one memory
ceiling for torch and the mapped state (`memory_budget`).

The names most modules need are here; the placements are imported from their modules."""
from .full import FullStore
from .regions import FIXED, Region, SavedState, Store, copy_state, declare, restore_state, save_state

__all__ = ["FIXED", "FullStore", "Region", "SavedState", "Store", "copy_state", "declare", "restore_state",
           "save_state"]
