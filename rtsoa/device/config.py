"""Allocator configuration (Python side) and its conversion to the jitted config arrays."""

from dataclasses import dataclass, fields
from typing import get_args

import numpy as np

from rtsoa.device.layout import (
    CFG_HAZARDS,
    CFG_LARGE_MIN_REMAINDER,
    CFG_LARGE_ROUND,
    CFG_LARGE_SEGMENT,
    CFG_LARGE_SEGMENT_LIMIT,
    CFG_MAX_SPLIT,
    CFG_NUM_EVENTS,
    CFG_NUM_STREAMS,
    CFG_OVERSIZE_SLACK,
    CFG_PAGE_MODE,
    CFG_PAGE_SIZE,
    CFG_QUICK_DEPTH,
    CFG_RELEASE_BEFORE_GROW,
    CFG_SEGMENT_SLACK_SHIFT,
    CFG_SMALL_MIN_REMAINDER,
    CFG_SMALL_SEGMENT,
    CFG_SMALL_SIZE,
    CFG_TRACE,
    MAX_UNIT_BYTES,
    NUM_CONFIG,
    NUM_PLACEMENT_CONFIG,
    NUM_PLACEMENTS,
    PCFG_ALIGNMENT,
    PCFG_ARENA_SIZE,
    PCFG_CAP,
    PCFG_QUICK_LIMIT,
    PCFG_TAIL_PADDING,
    PCFG_UNIT_SHIFT,
    PLACEMENT_HOST,
    QUICK_CLASSES,
)

KiB = 1 << 10
MiB = 1 << 20
NO_LIMIT = (1 << 62) - 1


@dataclass(frozen=True)
class AllocatorConfig:
    """Caching allocator knobs. Defaults are tuned for low fragmentation (docs/device.md);
    `AllocatorConfig.pytorch_like()` gives PyTorch's CUDA caching allocator profile.

    alignment_device / alignment_host: allocation unit per placement (512 B / 64 B).
    tail_padding: bytes added to every device request before rounding (the reference adds 32).
    small_size: rounded requests up to this use the small pool (1 MiB, as PyTorch).
    small_segment: small-pool segment size, shared by many blocks (2 MiB).
    large_segment / large_segment_limit: large requests below the limit get a shared segment of
      large_segment; others a dedicated segment of their size rounded up to large_round. Default:
      limit 0 and 64 KiB rounding, i.e. every large request gets a nearly exact segment
      (PyTorch: 20 MiB shared segments below 10 MiB, 2 MiB rounding above).
    max_split: blocks at least this big are never split (None: no limit).
    oversize_slack: an oversize block serves a request only if it wastes less than this.
    small_min_remainder / large_min_remainder: a block is split only if at least this much is
      left over (None: the allocation unit, i.e. always split).
    page_mode: page-granular mode like the reference (64 KiB pages; requests below 2 MiB carved
      from 2 MiB chunks, larger ones get their own page-rounded span; LIFO span choice).
    release_before_grow: before carving a new segment, return wholly free cached segments to
      the arena (where address neighbours merge), so the cache never holds idle segments while
      it grows (PyTorch only does this on the out-of-memory path).
    segment_slack_shift: a wholly free large-pool segment serves a request only if it wastes at
      most 1 / 2**shift of itself, and is then handed out unsplit (None: best fit and split, so
      a big freed segment is carved up by small large requests and pinned by them).
    quick_depth / quick_max_bytes: quick lists (deferred coalescing, as in QuickFit and glibc's
      tcache): a freed block of at most quick_max_bytes (and at most 16 allocation units) is
      parked, unmerged, in a LIFO list of its exact size holding up to quick_depth blocks, and
      a request of that size takes the list's head when it is usable on the requesting stream;
      the lists are flushed (merged and listed) before the allocator grows or releases memory,
      so they never cost a new segment. quick_depth 0 turns them off. Page mode's 64 KiB unit
      is above the default quick_max_bytes, so page mode has none unless that is raised.
    """

    alignment_device: int = 512
    alignment_host: int = 64
    tail_padding: int = 0
    small_size: int = 1 * MiB
    small_segment: int = 2 * MiB
    large_segment: int = 20 * MiB
    large_segment_limit: int = 0
    large_round: int = 64 * KiB
    max_split: int | None = None
    oversize_slack: int = 20 * MiB
    small_min_remainder: int | None = None
    large_min_remainder: int | None = None
    page_mode: bool = False
    page_size: int = 64 * KiB
    release_before_grow: bool = True
    segment_slack_shift: int | None = 3
    quick_depth: int = 32
    quick_max_bytes: int = 8 * KiB

    @classmethod
    def pytorch_like(cls, **overrides):
        """PyTorch's CUDA caching allocator profile (1 MiB small requests in 2 MiB segments,
        20 MiB shared segments below 10 MiB, 2 MiB rounding, release only when out of memory)."""
        profile = dict(
            large_segment_limit=10 * MiB,
            large_round=2 * MiB,
            release_before_grow=False,
            segment_slack_shift=None,
            quick_depth=0,
        )
        return cls(**{**profile, **overrides})

    def __post_init__(self):
        for field in fields(self):  # before any comparison: ints that fit the int64 config rows
            value = getattr(self, field.name)
            if isinstance(field.default, bool):
                if not isinstance(value, bool | np.bool_) and value not in (0, 1):
                    raise ValueError(f"{field.name} must be True or False, got {value!r}")
            elif value is not None or type(None) not in get_args(field.type):
                if isinstance(value, bool) or not isinstance(value, int | np.integer):
                    raise ValueError(f"{field.name} must be an integer, got {value!r}")
                if not 0 <= value <= NO_LIMIT:
                    raise ValueError(f"{field.name} must be in 0 .. {NO_LIMIT:,}, got {value:,}")
        for name in ("alignment_device", "alignment_host", "page_size"):
            value = getattr(self, name)
            if value <= 0 or value & (value - 1):
                raise ValueError(f"{name} must be a positive power of two, got {value}")
        for name in ("small_size", "small_segment", "large_segment", "large_round"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.segment_slack_shift is not None and not 0 <= self.segment_slack_shift < 63:
            raise ValueError("segment_slack_shift must be in 0..62 or None")
        if self.quick_depth < 0 or self.quick_max_bytes < 0:
            raise ValueError("quick_depth and quick_max_bytes must be non-negative")
        if self.tail_padding < 0:
            raise ValueError("tail_padding must be non-negative")
        for name in (
            "alignment_device",
            "alignment_host",
            "page_size",
            "tail_padding",
            "large_round",
        ):
            if getattr(self, name) > MAX_UNIT_BYTES:  # sums with a request must not overflow
                raise ValueError(f"{name} must be at most 2**48, got {getattr(self, name):,}")
        if self.max_split is not None and self.max_split <= self.large_segment:
            # as in PyTorch: the large pool's shared segments must stay splittable
            raise ValueError("max_split must exceed large_segment")

    def config_array(self, num_streams, num_events, hazards, trace=True):
        """The int64 `DeviceState.config` array."""
        config = np.zeros(NUM_CONFIG, dtype=np.int64)
        unit = min(self.alignment_device, self.alignment_host)
        if self.page_mode:
            unit = self.page_size
            config[CFG_SMALL_SIZE] = 2 * MiB - self.page_size
            config[CFG_SMALL_SEGMENT] = 2 * MiB
            config[CFG_LARGE_SEGMENT] = self.page_size
            config[CFG_LARGE_SEGMENT_LIMIT] = 0
            config[CFG_LARGE_ROUND] = self.page_size
        else:
            config[CFG_SMALL_SIZE] = self.small_size
            config[CFG_SMALL_SEGMENT] = self.small_segment
            config[CFG_LARGE_SEGMENT] = self.large_segment
            config[CFG_LARGE_SEGMENT_LIMIT] = self.large_segment_limit
            config[CFG_LARGE_ROUND] = self.large_round
        config[CFG_MAX_SPLIT] = NO_LIMIT if self.max_split is None else self.max_split
        config[CFG_OVERSIZE_SLACK] = self.oversize_slack
        small = self.small_min_remainder
        large = self.large_min_remainder
        config[CFG_SMALL_MIN_REMAINDER] = unit if small is None else small
        config[CFG_LARGE_MIN_REMAINDER] = unit if large is None else large
        config[CFG_PAGE_MODE] = int(self.page_mode)
        config[CFG_PAGE_SIZE] = self.page_size
        config[CFG_HAZARDS] = int(hazards)
        config[CFG_TRACE] = int(trace)
        config[CFG_RELEASE_BEFORE_GROW] = int(self.release_before_grow)
        shift = self.segment_slack_shift
        config[CFG_SEGMENT_SLACK_SHIFT] = 63 if shift is None else shift
        config[CFG_QUICK_DEPTH] = self.quick_depth
        config[CFG_NUM_STREAMS] = num_streams
        config[CFG_NUM_EVENTS] = num_events
        return config

    def placement_array(self, arena_sizes, caps):
        """The int64 `DeviceState.placement_config` array (alignment, padding, cap, size, quick-list
        limit, unit shift)."""
        array = np.zeros((NUM_PLACEMENTS, NUM_PLACEMENT_CONFIG), dtype=np.int64)
        for placement in range(NUM_PLACEMENTS):
            host = placement == PLACEMENT_HOST
            alignment = self.alignment_host if host else self.alignment_device
            array[placement, PCFG_ALIGNMENT] = alignment
            array[placement, PCFG_TAIL_PADDING] = 0 if host else self.tail_padding
            array[placement, PCFG_CAP] = caps[placement]
            array[placement, PCFG_ARENA_SIZE] = arena_sizes[placement]
            unit = self.page_size if self.page_mode else alignment
            array[placement, PCFG_UNIT_SHIFT] = unit.bit_length() - 1
            # whole units only, and at most QUICK_CLASSES of them (one list per size)
            limit = min(self.quick_max_bytes, QUICK_CLASSES * unit) // unit * unit
            array[placement, PCFG_QUICK_LIMIT] = limit if self.quick_depth > 0 else 0
        return array


def resolve_cap(cap, arena_size):
    """A cap given as bytes (int) or as a fraction of the arena (float in (0, 1])."""
    if cap is None:
        return int(arena_size)
    if isinstance(cap, float):
        if not 0.0 < cap <= 1.0:
            raise ValueError(f"a fractional cap must be in (0, 1], got {cap}")
        return int(arena_size * cap)
    if cap < 0:
        raise ValueError(f"a cap must be non-negative, got {cap}")
    return int(min(cap, arena_size))
