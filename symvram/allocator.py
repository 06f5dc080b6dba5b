"""A replay of torch's CUDA caching allocator: from a schedule of allocations and frees, the reserved peak
(``torch.cuda.max_memory_reserved()``), the allocated peak (``max_memory_allocated()``) and the event at
which a card of a given capacity runs out of memory.

Modelled, not measured: the rules are those of ``c10/cuda/CUDACachingAllocator.cpp`` (read at
pytorch/pytorch@001074d, ``DeviceCachingAllocator``; the wheel ships no C++ source), checked against the
constants and settings of torch 2.13's installed headers ``c10/core/AllocatorConfig.h`` (kMinBlockSize,
kSmallSize, kSmallBuffer, kMinLargeAlloc, kRoundLarge: lines 16-25; large_segment_size 20 MiB: line 340;
max_split_size unlimited: line 342; max_non_split_rounding_size: line 187). Each rule below names the
C++ function it follows.

Pure Python, no torch: the core path (estimate, fit) replays the ledger's schedule; ``symvram validate``
replays the traced one.

>>> MiB = 2**20
>>> r = replay([("alloc", 1, 3 * MiB), ("alloc", 2, 5 * MiB), ("free", 1, 0), ("alloc", 3, 25 * MiB)])
>>> r.peak_reserved // MiB, r.peak_allocated // MiB   # one 20 MiB segment holds 3 + 5; 25 MiB gets 26, unsplit
(46, 31)
>>> replay([("alloc", 1, 30 * MiB)], capacity=20 * MiB).oom_at
0
"""
from __future__ import annotations

import re
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from functools import cached_property

# c10/core/AllocatorConfig.h (torch 2.13), lines 16-25, and CUDACachingAllocator.cpp's kLargeBuffer
MIN_BLOCK = 512                  # kMinBlockSize: every size is rounded up to a multiple of 512 B
SMALL_SIZE = 1 << 20             # kSmallSize: requests up to 1 MiB go to the small pool
SMALL_BUFFER = 2 << 20           # kSmallBuffer: the small pool's segments (and expandable pages)
MIN_LARGE_ALLOC = 10 << 20       # kMinLargeAlloc: large requests under 10 MiB share a 20 MiB segment
ROUND_LARGE = 2 << 20            # kRoundLarge: larger requests get a segment rounded to 2 MiB
LARGE_BUFFER = 20 << 20          # kLargeBuffer / large_segment_size: the 20 MiB segment (and expandable page)
ROUNDUP_INTERVALS = 16           # kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB, one division count each
UNLIMITED = 2**64 - 1            # max_split_size's default (std::numeric_limits<size_t>::max())

Event = tuple  # ("alloc", id, size[, stream]) or ("free", id, 0)


@dataclass(frozen=True)
class AllocatorConfig:
    """The settings of ``PYTORCH_CUDA_ALLOC_CONF`` that change where blocks go.

    >>> AllocatorConfig.parse("expandable_segments:True,max_split_size_mb:200").max_split_size // 2**20
    200
    >>> AllocatorConfig.parse("roundup_power2_divisions:4").divisions(1200)
    4
    """

    expandable_segments: bool = False
    max_split_size: int = UNLIMITED
    max_non_split_rounding: int = LARGE_BUFFER
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS

    @classmethod
    def parse(cls, text: str) -> "AllocatorConfig":
        """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string; keys that do not move blocks (garbage collection,
        pinned memory, the backend) are accepted and ignored. ValueError names a malformed value."""
        out: dict = {}
        for key, value in re.findall(r"\s*([A-Za-z_0-9]+)\s*:\s*(\[[^\]]*\]|[^,]*)\s*,?", text or ""):
            try:
                if key == "expandable_segments":
                    if value.strip().lower() not in ("true", "false"):
                        raise ValueError
                    out["expandable_segments"] = value.strip().lower() == "true"
                elif key == "max_split_size_mb":
                    out["max_split_size"] = max(int(value), 1) << 20
                elif key == "max_non_split_rounding_mb":
                    out["max_non_split_rounding"] = int(value) << 20
                elif key == "roundup_power2_divisions":
                    out["roundup_power2_divisions"] = _parse_divisions(value)
            except ValueError:
                raise ValueError(f"PYTORCH_CUDA_ALLOC_CONF: {key}:{value} is not a valid value") from None
        return cls(**out)

    @cached_property
    def rounds_to_powers(self) -> bool:
        return any(self.roundup_power2_divisions)

    def divisions(self, size: int) -> int:
        """AcceleratorAllocatorConfig::roundup_power2_divisions(size): the interval of log2(size) from 1 MiB."""
        index = max(size.bit_length() - 1 - 20, 0)
        return self.roundup_power2_divisions[min(index, ROUNDUP_INTERVALS - 1)]


def _parse_divisions(value: str) -> tuple[int, ...]:
    """``4`` for every interval, or ``[256:4,512:2,>:1]``: each boundary (MiB, a power of two) sets its
    interval and those after the previous boundary; ``>`` sets the rest (AllocatorConfig's parser)."""
    value = value.strip()
    if not value.startswith("["):
        return (int(value),) * ROUNDUP_INTERVALS
    out, last = [0] * ROUNDUP_INTERVALS, -1
    for item in filter(None, (p.strip() for p in value[1:-1].split(","))):
        bound, _, div = item.partition(":")
        if bound.strip() == ">":
            out[last + 1:] = [int(div)] * (ROUNDUP_INTERVALS - last - 1)
            continue
        mb = int(bound)
        if mb <= 0 or mb & (mb - 1):
            raise ValueError
        index = min(mb.bit_length() - 1, ROUNDUP_INTERVALS - 1)
        out[last + 1:index + 1] = [int(div)] * (index - last)
        last = index
    return tuple(out)


def round_size(size: int, config: AllocatorConfig = AllocatorConfig()) -> int:
    """DeviceCachingAllocator::round_size: at least 512 B, a multiple of 512, or the next power-of-two
    division when ``roundup_power2_divisions`` asks for one (1200 KiB in 4 divisions of 1..2 MiB → 1280 KiB).

    >>> four = AllocatorConfig(roundup_power2_divisions=(4,) * 16)
    >>> round_size(1), round_size(513), round_size(1200 * 1024, four) // 1024, round_size(1200, four)
    (512, 1024, 1280, 1536)
    """
    if size < MIN_BLOCK:
        return MIN_BLOCK
    if not config.rounds_to_powers:
        return -(-size // MIN_BLOCK) * MIN_BLOCK
    divisions = config.divisions(size)
    if divisions > 1 and size > MIN_BLOCK * divisions:
        return _roundup_power2_next_division(size, divisions)
    return -(-size // MIN_BLOCK) * MIN_BLOCK


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    """DeviceCachingAllocator::roundup_power2_next_division."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def allocation_size(size: int) -> int:
    """DeviceCachingAllocator::get_allocation_size: the segment cudaMalloc'd for a rounded request.

    >>> [allocation_size(s) // 2**20 for s in (4096, 3 * 2**20, 11 * 2**20 + 1)]
    [2, 20, 12]
    """
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class _Block:
    """A Block of CUDACachingAllocator.cpp: a range of one segment, free or allocated, with its neighbours."""

    __slots__ = ("addr", "size", "pool", "prev", "next", "allocated", "mapped", "segment")

    def __init__(self, addr, size, pool, segment, mapped=True):
        self.addr, self.size, self.pool, self.segment, self.mapped = addr, size, pool, segment, mapped
        self.prev = self.next = None
        self.allocated = False

    def split_off(self, size: int, mapped: bool = True) -> "_Block":
        """Keep the first ``size`` bytes; the rest becomes the next block of the same segment (returned)."""
        rest = _Block(self.addr + size, self.size - size, self.pool, self.segment, mapped=mapped)
        rest.prev, rest.next = self, self.next
        if self.next is not None:
            self.next.prev = rest
        self.next, self.size = rest, size
        return rest

    @property
    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class _Pool:
    """A BlockPool of one stream: its free mapped blocks ordered by (size, address), BlockComparatorSize, and
    its unmapped ranges of expandable segments ordered by address, BlockComparatorAddress."""

    __slots__ = ("small", "blocks", "unmapped", "page")

    def __init__(self, small: bool):
        self.small, self.blocks, self.unmapped = small, [], []
        self.page = SMALL_BUFFER if small else LARGE_BUFFER  # the expandable segment's page (segment_size_)

    def insert(self, b: _Block):
        insort(self.blocks, (b.size, b.addr, b))

    def remove(self, b: _Block):
        del self.blocks[bisect_left(self.blocks, (b.size, b.addr))]

    def insert_unmapped(self, b: _Block):
        insort(self.unmapped, (b.addr, b))

    def remove_unmapped(self, b: _Block):
        del self.unmapped[bisect_left(self.unmapped, (b.addr,))]


class OutOfMemory(Exception):
    """Raised by ``Allocator.malloc`` where CUDACachingAllocator raises torch.OutOfMemoryError."""


@dataclass
class Allocator:
    """The state of one device's caching allocator. ``capacity``: the bytes it may reserve (a card's memory
    less what is not the allocator's); None: unbounded. ``fraction``: the capacity is
    ``set_per_process_memory_fraction``'s limit, checked against the whole segment size before any
    expandable page is mapped (alloc_block's set_fraction test); else only the pages mapped count."""

    config: AllocatorConfig = field(default_factory=AllocatorConfig)
    capacity: int | None = None
    fraction: bool = False
    reserved: int = 0
    allocated: int = 0
    peak_reserved: int = 0
    peak_allocated: int = 0
    pools: dict = field(default_factory=dict)
    _next_addr: int = 1 << 40

    def _pool(self, size: int, stream) -> _Pool:
        """get_pool: the small pool for rounded sizes up to 1 MiB, else the large; one of each per stream."""
        key = (stream, size <= SMALL_SIZE)
        if key not in self.pools:
            self.pools[key] = _Pool(key[1])
        return self.pools[key]

    def _address_range(self, size: int) -> int:
        addr, self._next_addr = self._next_addr, self._next_addr + size + (1 << 30)
        return addr

    # ---- malloc -------------------------------------------------------------------------------------
    def malloc(self, orig_size: int, stream=0) -> _Block:
        """DeviceCachingAllocator::malloc: best fit in the pool, else a new segment, else free cached
        blocks (release_available_cached_blocks, then release_cached_blocks) and retry, else OutOfMemory."""
        size = round_size(orig_size, self.config)
        pool = self._pool(size, stream)
        alloc_size = allocation_size(size)
        block = self._get_free_block(pool, size)
        if block is None:
            block = (self._alloc_block(pool, size, alloc_size)
                     or (self._release_available_cached_blocks(pool, size) and self._alloc_block(pool, size, alloc_size))
                     or (self._release_cached_blocks() and self._alloc_block(pool, size, alloc_size)))
        if not block:
            raise OutOfMemory(f"tried to allocate {alloc_size} bytes with {self.reserved} reserved")
        return self._alloc_found_block(block, pool, size)

    def _get_free_block(self, pool: _Pool, size: int):
        """get_free_block: the smallest free block of at least ``size`` (lower_bound on (size, address));
        under expandable segments a block whose free unmapped tail makes it larger is passed over for a
        later one that expands less; an oversize block (≥ max_split_size) serves only an oversize request,
        and only within max_non_split_rounding of it."""
        i = bisect_left(pool.blocks, (size, 0))
        if i == len(pool.blocks):
            return None
        block = pool.blocks[i][2]
        if block.segment is not None and self.config.expandable_segments:
            def expandable_size(b):
                return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)
            while i + 1 < len(pool.blocks) and expandable_size(pool.blocks[i + 1][2]) < expandable_size(block):
                i += 1
                block = pool.blocks[i][2]
        split_max = self.config.max_split_size
        if size < split_max and block.size >= split_max:
            return None
        if size >= split_max and block.size >= size + self.config.max_non_split_rounding:
            return None
        del pool.blocks[i]
        return block

    def _alloc_block(self, pool: _Pool, size: int, alloc_size: int):
        """alloc_block: the capacity check of set_per_process_memory_fraction (reserved + alloc_size), then
        cudaMalloc of a new segment, or under expandable segments the pages it needs mapped."""
        over = self.capacity is not None and self.reserved + alloc_size > self.capacity
        if over and (self.fraction or not self.config.expandable_segments):
            return None
        if self.config.expandable_segments:
            return self._try_allocate_expandable_block(pool, size)
        block = _Block(self._address_range(alloc_size), alloc_size, pool, None)
        self._reserve(alloc_size)
        return block

    def _alloc_found_block(self, block: _Block, pool: _Pool, size: int) -> _Block:
        """should_split then alloc_found_block: the front of the block serves the request and the rest goes
        back to the pool. The allocated statistic counts the block's size, the remainder included where it
        is not split off."""
        remaining = block.size - size
        if pool.small or self.config.expandable_segments:
            split = remaining >= MIN_BLOCK
        else:
            split = size < self.config.max_split_size and remaining > SMALL_SIZE
        if split:
            pool.insert(block.split_off(size))
        block.allocated = True
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    # ---- free ---------------------------------------------------------------------------------------
    def free(self, block: _Block):
        """free then free_block: the block merges with its free neighbours (try_merge_blocks) and is cached
        in its pool; nothing returns to the driver."""
        block.allocated = False
        self.allocated -= block.size
        pool = block.pool
        for other in (block.prev, block.next):
            self._try_merge(block, other, pool)
        pool.insert(block)

    def _try_merge(self, dst: _Block, src, pool: _Pool) -> int:
        """try_merge_blocks: absorb a free neighbour with the same mapping state."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return 0
        if src.mapped:
            pool.remove(src)
        else:
            pool.remove_unmapped(src)
        if dst.prev is src:
            dst.addr, dst.prev = src.addr, src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # ---- giving memory back before an OOM ----------------------------------------------------------------
    def _release_available_cached_blocks(self, pool: _Pool, size: int) -> bool:
        """release_available_cached_blocks: with max_split_size set, free one cached oversize block large
        enough, or oversize blocks from the largest down until enough is freed."""
        split_max = self.config.max_split_size
        if split_max == UNLIMITED:
            return False
        key = max(size, split_max)
        i = bisect_left(pool.blocks, (key, 0))
        if i < len(pool.blocks):
            self._release_block(pool.blocks[i][2])
            return True
        released = 0
        for _, _, b in reversed(pool.blocks[:]):
            if released >= key or b.size < split_max:
                break
            released += b.size
            self._release_block(b)
        return released >= key

    def _release_cached_blocks(self) -> bool:
        """release_cached_blocks → release_blocks, every pool: cudaFree each cached block that is a whole
        segment; under expandable segments unmap the whole pages inside each free block."""
        for pool in list(self.pools.values()):
            for _, _, b in list(pool.blocks):
                if b.segment is not None:
                    self._unmap_block(b)
                elif not b.is_split:
                    self._release_block(b)
        return True

    def _release_block(self, block: _Block):
        """release_block: cudaFree of a whole cached segment."""
        block.pool.remove(block)
        self.reserved -= block.size

    def _reserve(self, size: int):
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    # ---- expandable segments ----------------------------------------------------------------------------
    def _try_allocate_expandable_block(self, pool: _Pool, size: int):
        """find_expandable_block and try_allocate_expandable_block: the lowest-addressed unmapped range of
        this stream's segment (with the free block before it), mapped page by page until ``size`` fits."""
        candidate = None
        for _, c in pool.unmapped:
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            if self._free_run(c) >= size:
                candidate = c
                break
        if candidate is None:   # a new segment: address space for 1 1/8 of the card
            space = -(-(self.capacity or 1 << 46) * 9 // 8 // pool.page) * pool.page
            segment = object()
            candidate = _Block(self._address_range(space), space, pool, segment, mapped=False)
            pool.insert_unmapped(candidate)
        if not candidate.mapped:
            candidate = self._map_block(candidate, min(candidate.size, size))
            if candidate is None:
                return None
        while candidate.size < size:
            mapped = self._map_block(candidate.next, min(size - candidate.size, candidate.next.size))
            if mapped is None:
                return None
            candidate = mapped
        pool.remove(candidate)
        return candidate

    @staticmethod
    def _free_run(b) -> int:
        total = 0
        while b is not None and not b.allocated:
            total += b.size
            b = b.next
        return total

    def _map_block(self, block: _Block, size: int):
        """map_block: map whole pages from the unmapped block's start (ExpandableSegment::map), split off
        the unmapped rest, merge with the free mapped neighbours; None when the card has no pages left."""
        pool = block.pool
        mapped = min(-(-size // pool.page) * pool.page, block.size)
        if self.capacity is not None and self.reserved + mapped > self.capacity:
            return None
        pool.remove_unmapped(block)
        if mapped < block.size:
            pool.insert_unmapped(block.split_off(mapped, mapped=False))
        block.mapped = True
        self._try_merge(block, block.prev, pool)
        self._try_merge(block, block.next, pool)
        pool.insert(block)
        self._reserve(mapped)
        return block

    def _unmap_block(self, block: _Block):
        """unmap_block: give back the whole pages strictly inside a free block (ExpandableSegment::unmap),
        keeping the partial pages at its ends as free mapped blocks."""
        pool, page = block.pool, block.pool.page
        start = self._segment_start(block)   # pages are counted from the segment's start
        begin = start + -(-(block.addr - start) // page) * page
        end = start + (block.addr + block.size - start) // page * page
        if begin >= end:
            return
        pool.remove(block)
        if begin > block.addr:
            before = _Block(block.addr, begin - block.addr, pool, block.segment)
            before.prev, before.next = block.prev, block
            if block.prev is not None:
                block.prev.next = before
            block.prev = before
            pool.insert(before)
        if block.addr + block.size > end:
            after = _Block(end, block.addr + block.size - end, pool, block.segment)
            after.prev, after.next = block, block.next
            if block.next is not None:
                block.next.prev = after
            block.next = after
            pool.insert(after)
        block.addr, block.size, block.mapped = begin, end - begin, False
        self._try_merge(block, block.prev, pool)
        self._try_merge(block, block.next, pool)
        pool.insert_unmapped(block)
        self.reserved -= end - begin

    @staticmethod
    def _segment_start(block: _Block) -> int:
        while block.prev is not None:
            block = block.prev
        return block.addr


@dataclass(frozen=True)
class Replay:
    """What a replay found: the peaks, the reserved bytes at the end, and the index of the event that ran
    out of memory (None: it fitted)."""

    peak_allocated: int
    peak_reserved: int
    reserved: int
    oom_at: int | None

    @property
    def fits(self) -> bool:
        return self.oom_at is None


def replay(events, config: AllocatorConfig = AllocatorConfig(), capacity: int | None = None,
           fraction: bool = False) -> Replay:
    """Replay ``events`` in program order: ``("alloc", id, bytes[, stream])`` and ``("free", id, 0)``.
    A free of an id never allocated is ignored (a tensor allocated before the schedule began)."""
    alloc = Allocator(config, capacity, fraction)
    live: dict = {}
    for i, event in enumerate(events):
        op, key, size = event[0], event[1], event[2]
        if op == "alloc":
            if size <= 0:       # torch allocates nothing for an empty tensor
                continue
            try:
                live[key] = alloc.malloc(size, event[3] if len(event) > 3 else 0)
            except OutOfMemory:
                return Replay(alloc.peak_allocated, alloc.peak_reserved, alloc.reserved, i)
        elif key in live:
            alloc.free(live.pop(key))
    return Replay(alloc.peak_allocated, alloc.peak_reserved, alloc.reserved, None)
