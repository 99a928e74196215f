"""Unique (opsets 11-28): the distinct elements of the input (flattened), or its distinct slices
along `axis`, with where each first occurs, where each input element or slice went, and how
often each occurs.

attrs [sorted, has axis, axis]. Outputs (the last three optional): Y, the distinct items
(ascending when sorted is 1: numeric order, slices compared element by element in C order;
else in the order of their first occurrence); indices (int64 [K]), each item's first position;
inverse_indices (int64 [items]), the position in Y of each input item; counts (int64 [K]).
Equality is numeric: -0.0 equals 0.0 (Y keeps the first one met) and every NaN equals every
NaN and sorts after the numbers (numpy's unique). Float16 is not taken. The output shapes
depend on the data, which shape inference reads.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.abi.dtypes import DType
from rtsoa.abi.views import move_elements
from rtsoa.ops.abi import (
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_NEEDS_DATA,
    U16,
    U32,
    U64,
    copy_shape,
    dim,
    dtype,
    has_data,
    numel,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds, item_size
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import element_count


@jit_with_nrt
def _geometry(table, attrs):
    """(outer, items, inner) around the axis; the flattened input without one (1, numel, 1).
    items -1: a bad axis."""
    if attrs[1] == 0:
        return np.int64(1), numel(table, 0), np.int64(1)
    r = rank(table, 0)
    axis = attrs[2] + r if attrs[2] < 0 else attrs[2]
    if axis < 0 or axis >= r:
        return np.int64(1), np.int64(-1), np.int64(1)
    outer, inner = np.int64(1), np.int64(1)
    for a in range(axis):
        outer *= dim(table, 0, a)
    for a in range(axis + 1, r):
        inner *= dim(table, 0, a)
    return outer, dim(table, 0, axis), inner


@jit_with_nrt
def _compare(a, b):
    """-1, 0 or 1: numeric order with every NaN equal to every NaN and after the numbers."""
    a_nan, b_nan = a != a, b != b
    if a_nan or b_nan:
        return 0 if (a_nan and b_nan) else (1 if a_nan else -1)
    if a < b:
        return -1
    return 1 if a > b else 0


@jit_with_nrt
def _compare_items(data, outer, items, inner, p, q):
    """Order of items p and q: their elements compared in C order (outer, then inner)."""
    for o in range(outer):
        for i in range(inner):
            c = _compare(data[(o * items + p) * inner + i], data[(o * items + q) * inner + i])
            if c != 0:
                return c
    return 0


@jit_with_nrt
def _sorted_items(data, outer, items, inner):
    """The item positions in ascending order, stable (a bottom-up merge sort)."""
    order = np.arange(items).astype(np.int64)
    spare = np.empty(items, dtype=np.int64)
    width = 1
    while width < items:
        for start in range(0, items, 2 * width):
            middle, stop = min(start + width, items), min(start + 2 * width, items)
            i, j, k = start, middle, start
            while i < middle and j < stop:
                if _compare_items(data, outer, items, inner, order[j], order[i]) < 0:
                    spare[k] = order[j]
                    j += 1
                else:
                    spare[k] = order[i]
                    i += 1
                k += 1
            while i < middle:
                spare[k] = order[i]
                i += 1
                k += 1
            while j < stop:
                spare[k] = order[j]
                j += 1
                k += 1
        order, spare = spare, order
        width *= 2
    return order


@jit_with_nrt
def _groups(data, outer, items, inner, ascending):
    """(first, counts, inverse): each distinct item's first position and count, in Y's order,
    and each item's position in Y."""
    order = _sorted_items(data, outer, items, inner)
    first = np.empty(items, dtype=np.int64)
    counts = np.zeros(items, dtype=np.int64)
    group_of = np.empty(items, dtype=np.int64)
    groups = 0
    for k in range(items):
        item = order[k]
        new = k == 0 or _compare_items(data, outer, items, inner, order[k - 1], item) != 0
        if new:
            first[groups] = item  # stable: the smallest position of its group
            groups += 1
        counts[groups - 1] += 1
        group_of[item] = groups - 1
    first, counts = first[:groups], counts[:groups]
    if not ascending:  # the groups by first occurrence
        by_first = np.argsort(first, kind="mergesort")
        rank_of = np.empty(groups, dtype=np.int64)
        for g in range(groups):
            rank_of[by_first[g]] = g
        first, counts = first[by_first], counts[by_first]
        for item in range(items):
            group_of[item] = rank_of[group_of[item]]
    return first, counts, group_of


@jit_with_nrt
def _unique(arena, table, outer, items, inner, ascending):
    """`_groups` on input 0 viewed as its dtype."""
    element = dtype(table, 0)
    if element == F32:
        return _groups(view(arena, table, 0, np.float32), outer, items, inner, ascending)
    if element == F64:
        return _groups(view(arena, table, 0, np.float64), outer, items, inner, ascending)
    if element == I8:
        return _groups(view(arena, table, 0, np.int8), outer, items, inner, ascending)
    if element == I16:
        return _groups(view(arena, table, 0, np.int16), outer, items, inner, ascending)
    if element == I32:
        return _groups(view(arena, table, 0, np.int32), outer, items, inner, ascending)
    if element == I64:
        return _groups(view(arena, table, 0, np.int64), outer, items, inner, ascending)
    if element == U16:
        return _groups(view(arena, table, 0, np.uint16), outer, items, inner, ascending)
    if element == U32:
        return _groups(view(arena, table, 0, np.uint32), outer, items, inner, ascending)
    if element == U64:
        return _groups(view(arena, table, 0, np.uint64), outer, items, inner, ascending)
    return _groups(view(arena, table, 0, np.uint8), outer, items, inner, ascending)  # u8, bool


@jit_with_nrt
def _checks(table, attrs):
    if attrs.shape[0] < 3 or (attrs[0] != 0 and attrs[0] != 1):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = dtype(table, 0)
    if kind <= 0 or kind > U64 or kind == np.int64(DType.FLOAT16):
        return np.int32(STATUS_OP_BAD_DTYPE)
    if element_count(table, 0) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    outer, items, inner = _geometry(table, attrs)
    if items < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if not has_data(table, 0):
        return np.int32(STATUS_OP_NEEDS_DATA)
    if not holds(table, 0):
        return np.int32(STATUS_OP_BAD_SHAPE)
    return OK


@jit_with_nrt
def _shapes(table, n_in, n_out, attrs, distinct, items):
    """Output rows: Y with `distinct` items, then the int64 vectors."""
    if attrs[1] == 0:
        set_output(table, n_in, dtype(table, 0), 1)
        set_dim(table, n_in, 0, distinct)
    else:
        r = rank(table, 0)
        copy_shape(table, 0, n_in)
        set_dim(table, n_in, attrs[2] + r if attrs[2] < 0 else attrs[2], distinct)
    for k in range(1, n_out):
        set_output(table, n_in + k, I64, 1)
        set_dim(table, n_in + k, 0, items if k == 2 else distinct)


@jit_with_nrt
def _run(arena, table, n_in, outputs, attrs, infer_only):
    """Unique's shape inference (`infer_only`) or compute."""
    status = _checks(table, attrs)
    if status != 0:
        return status
    outer, items, inner = _geometry(table, attrs)
    first, counts, inverse = _unique(arena, table, outer, items, inner, attrs[0] == 1)
    distinct = first.shape[0]
    if infer_only:
        _shapes(table, n_in, outputs, attrs, distinct, items)
        return OK
    if not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    size = item_size(table, 0) * inner
    src = view(arena, table, 0, np.uint8)
    dst = view(arena, table, n_in, np.uint8)
    for o in range(outer):
        for g in range(distinct):
            start = (o * items + first[g]) * size
            target = (o * distinct + g) * size
            move_elements(dst, target, src, start, size)
    for k in range(1, outputs):
        if holds(table, n_in + k):
            vector = first if k == 1 else (inverse if k == 2 else counts)
            view(arena, table, n_in + k, np.int64)[: vector.shape[0]] = vector
    return OK


@jit_with_nrt
def unique_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _run(arena, table, n_in, n_out, attrs, True)


@jit_with_nrt
def unique_compute(arena, table, n_in, n_out, attrs, fattrs):
    return _run(arena, table, n_in, n_out, attrs, False)


def encode_unique(attributes, inputs):
    """Unique slots: sorted (default 1), has axis, axis."""
    axis = attributes.get("axis")
    return [int(attributes.get("sorted", 1)), int(axis is not None), int(axis or 0)]


register_op(
    "Unique",
    unique_infer,
    unique_compute,
    encode=encode_unique,
    outputs=(1, 4),
    data_inputs=(0,),
    # not float16, nor the narrow types (bfloat16 and below: stored and cast, not compared)
    dtypes={
        0: frozenset(DType(code) for code in range(DType.FLOAT32, DType.BFLOAT16)) - {DType.FLOAT16}
    },
)
