"""The caching-allocator replay against schedules worked by hand, one rule of CUDACachingAllocator.cpp each.

Every expected number is derived in the comment above it from the C++ rules (sizes in MiB unless said)."""
import random
import time

import pytest

from symvram.allocator import AllocatorConfig, replay

MiB = 2**20
EXPANDABLE = AllocatorConfig(expandable_segments=True)


def alloc(i, mib, stream=0):
    return ("alloc", i, int(mib * MiB), stream)


def free(i):
    return ("free", i, 0)


def test_rounding_to_512_bytes_and_the_small_segment():
    # round_size: 1 B -> 512 B (allocated counts the block); get_allocation_size: <= 1 MiB -> a 2 MiB segment
    r = replay([("alloc", 1, 1), ("alloc", 2, 513)])
    assert (r.peak_allocated, r.peak_reserved) == (512 + 1024, 2 * MiB)


def test_small_pool_packs_2_mib_segments():
    # 600 KiB blocks: three fit one 2 MiB segment (1800 KiB, 248 KiB left >= 512 B is split off), the fourth
    # needs a second segment
    r = replay([("alloc", i, 600 * 1024) for i in range(4)])
    assert r.peak_reserved == 4 * MiB and r.peak_allocated == 4 * 600 * 1024


def test_large_requests_under_10_mib_share_a_20_mib_segment():
    # 8 + 8 fit one 20 MiB segment (12 left > 1 MiB: split); the third 8 finds only 4 free: a second segment
    r = replay([alloc(1, 8), alloc(2, 8), alloc(3, 8)])
    assert r.peak_reserved == 40 * MiB and r.peak_allocated == 24 * MiB


def test_requests_of_10_mib_and_more_get_their_size_rounded_to_2_mib():
    # 11 MiB + 1 B -> 11 MiB + 512 B -> a 12 MiB segment; the 1 MiB - 512 B left is not > 1 MiB: not split,
    # so the whole 12 MiB counts as allocated
    r = replay([("alloc", 1, 11 * MiB + 1)])
    assert r.peak_reserved == 12 * MiB and r.peak_allocated == 12 * MiB


def test_best_fit_takes_the_smallest_free_block_that_fits():
    # segments of 30 and 14 cached; 12 goes to the 14 (2 left: split), 28 to the 30: no new segment (44)
    r = replay([alloc(1, 30), alloc(2, 14), free(1), free(2), alloc(3, 12), alloc(4, 28)])
    assert r.peak_reserved == 44 * MiB and r.peak_allocated == 44 * MiB
    # had 12 gone to the 30 (first fit), 28 would have needed a new segment
    assert replay([alloc(1, 30), alloc(2, 14), free(1), free(2), alloc(3, 12), alloc(4, 28)],
                  capacity=44 * MiB).fits


def test_merging_free_neighbours():
    # 6 + 6 + 6 in one 20 MiB segment (2 left); freeing the first two merges them into 12: an 11 fits (20)
    r = replay([alloc(1, 6), alloc(2, 6), alloc(3, 6), free(1), free(2), alloc(4, 11)])
    assert r.peak_reserved == 20 * MiB
    # freeing the first and the third leaves 6 and 6 + 2 = 8 apart: the 11 needs a segment of its own (12)
    r = replay([alloc(1, 6), alloc(2, 6), alloc(3, 6), free(1), free(3), alloc(4, 11)])
    assert r.peak_reserved == 32 * MiB


def test_max_split_size_keeps_oversize_blocks_whole():
    cfg = AllocatorConfig.parse("max_split_size_mb:20")
    # a cached 40 MiB block (>= 20) may not serve a 12 MiB request: a new 12 MiB segment (52)
    assert replay([alloc(1, 40), free(1), alloc(2, 12)], cfg).peak_reserved == 52 * MiB
    # without the setting the 40 is split: 40 reserved
    assert replay([alloc(1, 40), free(1), alloc(2, 12)]).peak_reserved == 40 * MiB
    # an oversize request may take it within max_non_split_rounding (20 MiB): 30 + 20 > 40, whole, unsplit
    r = replay([alloc(1, 40), free(1), alloc(2, 30)], cfg)
    assert (r.peak_reserved, r.reserved) == (40 * MiB, 40 * MiB)
    # ... but not a block of 30 + 20 or more: a 52 MiB cached block, a 30 request -> new 30 segment
    assert replay([alloc(1, 52), free(1), alloc(2, 30)], cfg).peak_reserved == 82 * MiB


def test_release_available_cached_blocks_frees_oversize_blocks_first():
    cfg = AllocatorConfig.parse("max_split_size_mb:20")
    # 52 cached as one oversize block, 12 live; 30 requested: 52 >= 30 + 20 so not reused; 64 + 30 > 80:
    # release_available_cached_blocks frees the 52 (the smallest oversize block >= max(30, 20)); 12 + 30 fits
    r = replay([alloc(1, 52), alloc(2, 12), free(1), alloc(3, 30)], cfg, capacity=80 * MiB)
    assert r.fits and r.reserved == 42 * MiB and r.peak_reserved == 64 * MiB


def test_cached_segments_are_freed_and_the_request_retried_before_an_oom():
    # 14 cached, 30 requested on a 40 MiB card: 14 + 30 > 40, release_cached_blocks frees the 14, 30 fits
    r = replay([alloc(1, 14), free(1), alloc(2, 30)], capacity=40 * MiB)
    assert r.fits and r.reserved == 30 * MiB and r.peak_reserved == 30 * MiB
    # 30 live and 12 more: 42 > 40 and nothing cached to free: OOM at the second event
    assert replay([alloc(1, 30), alloc(2, 12)], capacity=40 * MiB).oom_at == 1


def test_fragmentation_a_split_segment_cannot_be_released():
    # 8 + 8 in one 20 MiB segment, the first freed: 8 and 4 free but split, so not releasable; 14 more on a
    # 30 MiB card needs 20 + 14 = 34: OOM although only 8 + 14 = 22 would be live
    r = replay([alloc(1, 8), alloc(2, 8), free(1), alloc(3, 14)], capacity=30 * MiB)
    assert r.oom_at == 3


def test_pools_are_per_stream():
    # a block freed on stream 0 does not serve stream 1: two 20 MiB segments
    assert replay([alloc(1, 8, 0), free(1), alloc(2, 8, 1)]).peak_reserved == 40 * MiB
    assert replay([alloc(1, 8, 0), free(1), alloc(2, 8, 0)]).peak_reserved == 20 * MiB


def test_expandable_segments_grow_into_the_freed_end():
    events = [alloc(1, 100), alloc(2, 100), free(2), alloc(3, 160)]
    # default: segments of 100 and 100; the freed 100 is too small for 160: a third segment (360)
    assert replay(events).peak_reserved == 360 * MiB
    # expandable: one segment of 20 MiB pages, 100 + 100 mapped; the freed 100 at the end is extended by
    # 60 more (3 pages): 260
    r = replay(events, EXPANDABLE)
    assert r.peak_reserved == 260 * MiB and r.peak_allocated == 260 * MiB


def test_expandable_pages_round_small_segments_up_to_20_mib():
    # 8 MiB maps one 20 MiB page; the rest is split off (>= 512 B under expandable segments)
    r = replay([alloc(1, 8), alloc(2, 8)], EXPANDABLE)
    assert r.peak_reserved == 20 * MiB and r.peak_allocated == 16 * MiB


def test_expandable_release_unmaps_whole_free_pages_before_an_oom():
    # physical 260 MiB card: 100 + 100 mapped, the second freed; 200 requested: 200 + 200 > 260, so the free
    # pages at the end are unmapped (100) and the 200 mapped anew: 300 > 260 -> OOM; 100 + 140 fits
    events = [alloc(1, 100), alloc(2, 100), free(2), alloc(3, 200)]
    assert replay(events, EXPANDABLE, capacity=260 * MiB).oom_at == 3
    events[-1] = alloc(3, 140)
    r = replay(events, EXPANDABLE, capacity=260 * MiB)
    assert r.fits and r.peak_reserved == 240 * MiB


def test_set_fraction_checks_the_whole_segment_size_first():
    # under set_per_process_memory_fraction alloc_block compares reserved + the segment size (160) with the
    # limit before mapping: 200 + 160 > 300 although only 60 more pages are needed; the cached pages are
    # unmapped (100) and 100 + 160 <= 300 maps: it fits, reserving 260 at the end
    events = [alloc(1, 100), alloc(2, 100), free(2), alloc(3, 160)]
    r = replay(events, EXPANDABLE, capacity=300 * MiB, fraction=True)
    assert r.fits and r.reserved == 260 * MiB


def test_roundup_power2_divisions():
    # 1200 KiB lies in 1..2 MiB; 4 divisions of it are 1024, 1280, 1536, 1792 KiB: 1280 KiB, in a 20 MiB
    # segment, split (18.75 MiB left); without the setting, 1200 KiB (a multiple of 512 B)
    cfg = AllocatorConfig.parse("roundup_power2_divisions:4")
    r = replay([("alloc", 1, 1200 * 1024)], cfg)
    assert (r.peak_allocated, r.peak_reserved) == (1280 * 1024, 20 * MiB)
    assert replay([("alloc", 1, 1200 * 1024)]).peak_allocated == 1200 * 1024
    # the interval list: [1:4, >:1] sets 4 divisions for 1..2 MiB only
    cfg = AllocatorConfig.parse("roundup_power2_divisions:[1:4,>:1]")
    assert (cfg.divisions(1200 * 1024), cfg.divisions(300 * MiB)) == (4, 1)


def test_malformed_settings_name_the_value():
    with pytest.raises(ValueError, match="max_split_size_mb:lots"):
        AllocatorConfig.parse("max_split_size_mb:lots")
    with pytest.raises(ValueError, match="expandable_segments:yes"):
        AllocatorConfig.parse("expandable_segments:yes")


def test_replay_is_fast_over_thousands_of_events():
    rng = random.Random(0)
    events, live = [], []
    for i in range(5000):
        if live and rng.random() < 0.45:
            events.append(free(live.pop(rng.randrange(len(live)))))
        else:
            events.append(("alloc", i, rng.choice((4096, 600 * 1024, 3 * MiB, 17 * MiB, 90 * MiB))))
            live.append(i)
    start = time.perf_counter()
    for cfg in (AllocatorConfig(), EXPANDABLE):
        r = replay(events, cfg)
        assert r.peak_reserved >= r.peak_allocated > 0
    assert time.perf_counter() - start < 1.0
