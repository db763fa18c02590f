"""A stable-address, demand-backed device buffer (CUDA virtual memory management).

The address range is reserved once at its full size; physical memory is mapped into
it one allocation granule at a time as the buffer grows, and unmapped when it shrinks.
The tensor over the range never moves, so CUDA graphs captured against it stay valid
while its backing changes (docs/architecture.md, "State and clocks"). Kernels must touch only the
mapped prefix: reading past it is an illegal address, not garbage. Past its own memory a buffer
may also map one granule of zeros that every buffer on the device shares, for keys a pass reads
but masks; they cost no memory, and nothing may write there. `cuda.bindings` (package
cuda-bindings) is imported on first use, so CPU-only machines never need it.
"""
from __future__ import annotations

import torch

from .memory_budget import charge


def _driver():
    from cuda.bindings import driver
    return driver


def _check(result, what: str):
    """Unpack a driver call's (CUresult, *values) tuple, raising on any error."""
    cu = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise RuntimeError(f"{what} failed: {name.decode() if name else int(err)}")
    return values[0] if len(values) == 1 else values


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _device_memory(ordinal: int):
    cu = _driver()
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = ordinal
    prop.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
    prop.win32HandleMetaData = 0  # left unset, some binding versions pass garbage
    return prop


def allocation_granularity(ordinal: int = 0) -> int:
    """The step in which device memory can be mapped (2 MiB on current NVIDIA GPUs)."""
    cu = _driver()
    _check(cu.cuInit(0), "cuInit")
    return int(_check(cu.cuMemGetAllocationGranularity(
        _device_memory(ordinal), cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity"))


_ZEROS: dict[int, object] = {}
"""Per device ordinal: the physical granule of zeros that read-ahead ranges map (made once, kept
for the process: 2 MiB a device, outside any memory budget)."""


def _zero_granule(ordinal: int, prop, access, granularity: int):
    if ordinal not in _ZEROS:
        cu = _driver()
        handle = _check(cu.cuMemCreate(granularity, prop, 0), "cuMemCreate")
        at = int(_check(cu.cuMemAddressReserve(granularity, granularity, 0, 0), "cuMemAddressReserve"))
        _check(cu.cuMemMap(at, granularity, 0, handle, 0), "cuMemMap")
        _check(cu.cuMemSetAccess(at, granularity, [access], 1), "cuMemSetAccess")
        _check(cu.cuMemsetD8(at, 0, granularity), "cuMemsetD8")
        _check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        _check(cu.cuMemUnmap(at, granularity), "cuMemUnmap")  # the memory lives as long as its handle
        _check(cu.cuMemAddressFree(at, granularity), "cuMemAddressFree")
        _ZEROS[ordinal] = handle
    return _ZEROS[ordinal]


class _Bytes:
    """Hands torch the reserved range through __cuda_array_interface__ (no copy)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3,
            "strides": None,
        }


class VmmBuffer:
    """`reserved_bytes` of address space on `device`, backed on demand.

    At least one granule stays mapped for the buffer's whole life: torch looks up the
    device of the base pointer when the tensor is made, and a later shrink to zero
    would otherwise leave the base unmapped.
    """

    def __init__(self, reserved_bytes: int, device: torch.device | str | int = "cuda"):
        cu = _driver()
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"VmmBuffer needs a CUDA device, got {self.device}")
        self.ordinal = self.device.index if self.device.index is not None else torch.cuda.current_device()
        self.device = torch.device("cuda", self.ordinal)
        torch.cuda.synchronize(self.device)  # torch's (primary) context exists from here on
        _check(cu.cuInit(0), "cuInit")
        self._cu_device = _check(cu.cuDeviceGet(self.ordinal), "cuDeviceGet")
        self._ctx = _check(cu.cuDevicePrimaryCtxRetain(self._cu_device), "cuDevicePrimaryCtxRetain")
        if int(_check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")) == 0:
            _check(cu.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")  # the context torch uses too

        self._prop = _device_memory(self.ordinal)
        self._access = cu.CUmemAccessDesc()
        self._access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        self._access.location.id = self.ordinal
        self._access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        self.granularity = allocation_granularity(self.ordinal)

        self.requested_bytes = reserved_bytes
        self.reserved_bytes = _round_up(max(reserved_bytes, 1), self.granularity)
        reserved = cu.cuMemAddressReserve(self.reserved_bytes, self.granularity, 0, 0)
        self.base = int(_check(reserved, "cuMemAddressReserve"))
        self._handles: list = []  # one physical allocation per mapped granule, in address order
        self._readable_end = 0  # granules from mapped_bytes to here map the shared zeros
        self._bytes = None
        self.ensure(1)
        self._bytes = torch.as_tensor(_Bytes(self.base, self.requested_bytes), device=self.device)
        if self._bytes.data_ptr() != self.base:
            raise RuntimeError("torch did not wrap the reserved range in place")
        self._bytes[:self.granularity].zero_()  # as every granule mapped later

    @property
    def mapped_bytes(self) -> int:
        return len(self._handles) * self.granularity

    def as_tensor(self, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        """A view of the reserved range from its base; only the mapped prefix may be touched."""
        return self._bytes.view(dtype).view(shape)

    @property
    def readable_bytes(self) -> int:
        """Bytes from the base that may be read: the mapped ones, then the shared zeros."""
        return max(self._readable_end, self.mapped_bytes)

    def ensure(self, nbytes: int, readable: int = 0) -> None:
        """Back at least the first `nbytes` bytes with memory of its own, and up to `readable` bytes
        map the shared granule of zeros past them (never moves anything)."""
        cu = _driver()
        target = _round_up(min(max(nbytes, 1), self.reserved_bytes), self.granularity)
        if target > self.mapped_bytes:
            self._grow(target)
        reads = min(_round_up(readable, self.granularity), self.reserved_bytes)
        if reads > self.readable_bytes:
            zeros = _zero_granule(self.ordinal, self._prop, self._access, self.granularity)
            for offset in range(self.readable_bytes, reads, self.granularity):
                _check(cu.cuMemMap(self.base + offset, self.granularity, 0, zeros, 0), "cuMemMap")
                self._readable_end = offset + self.granularity
                _check(cu.cuMemSetAccess(self.base + offset, self.granularity, [self._access], 1), "cuMemSetAccess")

    def _grow(self, target: int) -> None:
        cu = _driver()
        replaced = min(target, self._readable_end)
        if replaced > self.mapped_bytes:
            torch.cuda.synchronize(self.device)  # queued kernels may still read the zeros mapped there
            for offset in range(self.mapped_bytes, replaced, self.granularity):
                _check(cu.cuMemUnmap(self.base + offset, self.granularity), "cuMemUnmap")
        try:
            self._map_own(target)
        except Exception:
            for offset in range(replaced, self._readable_end, self.granularity):  # no hole before the zeros
                cu.cuMemUnmap(self.base + offset, self.granularity)
            self._readable_end = 0
            raise

    def _map_own(self, target: int) -> None:
        cu = _driver()
        while self.mapped_bytes < target:
            at = self.base + self.mapped_bytes
            charge(self.ordinal, self.granularity)  # refused here if it would exceed a memory budget
            try:
                handle = _check(cu.cuMemCreate(self.granularity, self._prop, 0), "cuMemCreate")
            except RuntimeError:
                charge(self.ordinal, -self.granularity)
                raise
            try:
                _check(cu.cuMemMap(at, self.granularity, 0, handle, 0), "cuMemMap")
            except RuntimeError:
                cu.cuMemRelease(handle)
                charge(self.ordinal, -self.granularity)
                raise
            self._handles.append(handle)
            _check(cu.cuMemSetAccess(at, self.granularity, [self._access], 1), "cuMemSetAccess")
            if self._bytes is not None:  # what lies past the live entries may be read (masked): never NaN
                self._bytes[at - self.base:at - self.base + self.granularity].zero_()

    def shrink(self, nbytes: int) -> None:
        """Unmap every granule wholly past the first `nbytes` bytes (one granule always stays)."""
        keep = max(_round_up(nbytes, self.granularity), self.granularity)
        if self.mapped_bytes <= keep:
            return
        torch.cuda.synchronize(self.device)  # queued kernels may still read what goes away
        self._unmap_zeros()
        self._unmap_down_to(keep)

    def close(self) -> None:
        """Unmap and release everything; tensors made by as_tensor must not be used after."""
        if self.base is None:
            return
        cu = _driver()
        torch.cuda.synchronize(self.device)
        self._bytes = None
        self._unmap_zeros()
        self._unmap_down_to(0)
        _check(cu.cuMemAddressFree(self.base, self.reserved_bytes), "cuMemAddressFree")
        _check(cu.cuDevicePrimaryCtxRelease(self._cu_device), "cuDevicePrimaryCtxRelease")
        self.base = None

    def _unmap_zeros(self) -> None:
        cu = _driver()
        for offset in range(self.mapped_bytes, self.readable_bytes, self.granularity):
            _check(cu.cuMemUnmap(self.base + offset, self.granularity), "cuMemUnmap")
        self._readable_end = 0

    def _unmap_down_to(self, keep: int) -> None:
        cu = _driver()
        while self.mapped_bytes > keep:
            at = self.base + self.mapped_bytes - self.granularity
            _check(cu.cuMemUnmap(at, self.granularity), "cuMemUnmap")
            _check(cu.cuMemRelease(self._handles.pop()), "cuMemRelease")
            charge(self.ordinal, -self.granularity)

    def __enter__(self) -> VmmBuffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
