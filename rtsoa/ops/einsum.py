"""Einsum (opsets 12 and 28): Einstein summation over any number of operands.

`parse_equation(equation, ranks)` (Python) turns the equation into labels: each distinct
letter (upper and lower case are distinct) and each dimension an ellipsis stands for gets a
number, output labels first. The implicit output is the letters that appear once, sorted by
ASCII, after the ellipsis dimensions. A letter repeated within an operand takes its diagonal;
a letter missing from the output is summed over. An ellipsis stands for the same number of
dims in every operand (as ONNX requires), where a dim of 1 broadcasts; letters must have one
size everywhere.

attrs: [label count L, input count, output rank, output labels..., then for each input its
rank and labels..., then L flags (1: an ellipsis label, which may broadcast)]. The compute
walks every combination of the L labels' values (output labels outermost), multiplying the
operands' elements and adding into the output element, in float64 for float operands (int64
for integers), then stores in the operands' type. float32 / float64, int32 / int64.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    I32,
    I64,
    NUMBERS,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_TOO_LARGE,
    dim,
    dtype,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import MAX_ELEMENTS, element_count

LABELS_KEY = "__einsum_labels"  # the converter's parse, when it knew the operands' ranks


def _terms(equation):
    equation = equation.replace(" ", "")
    left, arrow, right = equation.partition("->")
    return left.split(","), (right if arrow else None)


def parse_equation(equation, ranks):
    """(label count, [labels of each input], output labels, ellipsis flags) of `equation` for
    operands of `ranks`; ValueError naming what is wrong."""
    if isinstance(equation, bytes):
        equation = equation.decode()
    terms, output = _terms(equation)
    if len(terms) != len(ranks):
        raise ValueError(
            f"equation {equation!r} has {len(terms)} operand(s), the node {len(ranks)}"
        )
    letters, ellipsis = [], 0
    parsed, counts = [], []
    for term, operand_rank in zip(terms, ranks, strict=True):
        head, dots, tail = term.partition("...")
        named = head + tail
        if "." in named or not all(c.isascii() and c.isalpha() for c in named):
            raise ValueError(f"equation {equation!r}: term {term!r} is not letters and '...'")
        if not dots and operand_rank != len(named):
            raise ValueError(
                f"equation {equation!r}: term {term!r} for an operand of rank {operand_rank}"
            )
        count = operand_rank - len(named) if dots else 0
        if count < 0:
            raise ValueError(
                f"equation {equation!r}: term {term!r} for an operand of rank {operand_rank}"
            )
        if dots and counts and count != counts[0]:
            raise ValueError(
                f"equation {equation!r}: the ellipsis stands for {counts[0]} and {count} dims "
                "in different operands (ONNX needs one number)"
            )
        if dots:
            counts.append(count)
        ellipsis = max(ellipsis, count)
        parsed.append((head, count if dots else None, tail))
        letters += list(named)
    if output is None:
        once = sorted(c for c in set(letters) if letters.count(c) == 1)
        output_terms = ("", ellipsis if ellipsis else None, "".join(once))
    else:
        head, dots, tail = output.partition("...")
        if "." in head + tail or not all(c.isascii() and c.isalpha() for c in head + tail):
            raise ValueError(f"equation {equation!r}: output {output!r} is not letters and '...'")
        if len(set(head + tail)) != len(head + tail):
            raise ValueError(f"equation {equation!r}: output {output!r} repeats a letter")
        if any(c not in letters for c in head + tail):
            raise ValueError(f"equation {equation!r}: output {output!r} has a letter no input has")
        if ellipsis and not dots:
            raise ValueError(f"equation {equation!r}: the output leaves out the ellipsis")
        output_terms = (head, ellipsis if dots else None, tail)
    ids = {}

    def labels(head, count, tail):
        dots = [f"...{k}" for k in range(ellipsis - (count or 0), ellipsis)] if count else []
        return [ids.setdefault(name, len(ids)) for name in [*head, *dots, *tail]]

    output_labels = labels(*output_terms)
    for k in range(ellipsis):
        ids.setdefault(f"...{k}", len(ids))
    input_labels = [labels(*term) for term in parsed]
    flags = [1 if str(name).startswith("...") else 0 for name in ids]
    return len(ids), input_labels, output_labels, flags


def encode_einsum(attributes, inputs):
    """Einsum slots (see the module docstring); the converter's parse if it gave one, else
    the equation parsed with the ranks of `inputs` (TensorInfos)."""
    spec = attributes.get(LABELS_KEY)
    if spec is None:
        ranks = [len(info.dims) if info is not None else 0 for info in inputs]
        spec = parse_equation(attributes.get("equation", ""), ranks)
    count, input_labels, output_labels, flags = spec
    slots = [count, len(input_labels), len(output_labels), *output_labels]
    for labels in input_labels:
        slots += [len(labels), *labels]
    return slots + list(flags)


@jit_with_nrt
def _layout(table, n_in, attrs):
    """(status, label sizes, output labels, each input's label of each axis (-1 padded),
    label count, flags)."""
    count, inputs, out_rank = attrs[0], attrs[1], attrs[2]
    sizes = np.full(max(count, 0), -1, dtype=np.int64)
    axes = np.full((max(n_in, 0), 8), -1, dtype=np.int64)
    outputs = np.zeros(max(out_rank, 0), dtype=np.int64)
    bad = np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if count < 0 or count > 64 or inputs != n_in or out_rank < 0 or out_rank > 8:
        return bad, sizes, outputs, axes, count
    slot = 3
    for k in range(out_rank):
        outputs[k] = attrs[slot + k]
    slot += out_rank
    for i in range(n_in):
        if slot >= attrs.shape[0] or attrs[slot] != rank(table, i):
            return np.int32(STATUS_OP_BAD_SHAPE), sizes, outputs, axes, count
        for a in range(attrs[slot]):
            axes[i, a] = attrs[slot + 1 + a]
        slot += 1 + attrs[slot]
    if slot + count != attrs.shape[0]:
        return bad, sizes, outputs, axes, count
    for k in range(out_rank):
        if outputs[k] < 0 or outputs[k] >= count:
            return bad, sizes, outputs, axes, count
    for i in range(n_in):  # a label's size: equal everywhere, or 1 broadcasting (ellipsis)
        for a in range(rank(table, i)):
            label = axes[i, a]
            if label < 0 or label >= count:
                return bad, sizes, outputs, axes, count
            size = dim(table, i, a)
            if sizes[label] < 0 or sizes[label] == 1 and attrs[slot + label] == 1:
                sizes[label] = size
            elif size != sizes[label] and not (size == 1 and attrs[slot + label] == 1):
                return np.int32(STATUS_OP_BAD_SHAPE), sizes, outputs, axes, count
    for label in range(count):
        if sizes[label] < 0:
            sizes[label] = 1
    return OK, sizes, outputs, axes, count


@jit_with_nrt
def einsum_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = dtype(table, 0)
    if kind != F32 and kind != F64 and kind != I32 and kind != I64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    for i in range(n_in):
        if dtype(table, i) != kind:
            return np.int32(STATUS_OP_BAD_DTYPE)
        if rank(table, i) > 8 or element_count(table, i) < 0:
            return np.int32(STATUS_OP_BAD_SHAPE)
    status, sizes, outputs, _, _ = _layout(table, n_in, attrs)
    if status != 0:
        return status
    set_output(table, n_in, kind, outputs.shape[0])
    for k in range(outputs.shape[0]):
        set_dim(table, n_in, k, sizes[outputs[k]])
    if element_count(table, n_in) < 0:
        return np.int32(STATUS_OP_TOO_LARGE)
    work = np.int64(1)
    for label in range(sizes.shape[0]):
        if sizes[label] > 0 and work > MAX_ELEMENTS // sizes[label]:
            return np.int32(STATUS_OP_TOO_LARGE)
        work *= sizes[label]
    return OK


@jit_with_nrt
def _strides(table, n_in, sizes, outputs, axes, count):
    """[n_in + 1, count] element strides of each label in each input (a broadcast axis of
    size 1: 0) and, last row, in the output (summed labels: 0); and the walk order."""
    strides = np.zeros((n_in + 1, count), dtype=np.int64)
    for i in range(n_in):
        step = np.int64(1)
        for a in range(rank(table, i) - 1, -1, -1):
            if dim(table, i, a) != 1 or sizes[axes[i, a]] == 1:
                strides[i, axes[i, a]] += step
            step *= dim(table, i, a)
    step = np.int64(1)
    for k in range(outputs.shape[0] - 1, -1, -1):
        strides[n_in, outputs[k]] = step
        step *= sizes[outputs[k]]
    order = np.empty(count, dtype=np.int64)  # output labels outermost, summed ones innermost
    taken = np.zeros(count, dtype=np.bool_)
    for k in range(outputs.shape[0]):
        order[k] = outputs[k]
        taken[outputs[k]] = True
    position = outputs.shape[0]
    for label in range(count):
        if not taken[label]:
            order[position] = label
            position += 1
    return strides, order


@jit_with_nrt
def _contract(operands, out, sizes, strides, order, accumulator):
    """out[...] = sum over every label combination of the operands' product."""
    count = order.shape[0]
    n_in = len(operands)
    for k in range(out.shape[0]):
        out[k] = 0
    total = np.int64(1)
    for label in range(count):
        total *= sizes[label]
    if total == 0:
        return
    index = np.zeros(count, dtype=np.int64)
    offsets = np.zeros(n_in + 1, dtype=np.int64)
    sums = np.zeros(out.shape[0], dtype=accumulator.dtype)
    for _ in range(total):
        product = accumulator[0] * 0 + 1
        for i in range(n_in):
            product *= operands[i][offsets[i]]
        sums[offsets[n_in]] += product
        for p in range(count - 1, -1, -1):  # the next combination, innermost label first
            label = order[p]
            index[label] += 1
            for i in range(n_in + 1):
                offsets[i] += strides[i, label]
            if index[label] < sizes[label]:
                break
            for i in range(n_in + 1):
                offsets[i] -= strides[i, label] * sizes[label]
            index[label] = 0
    for k in range(out.shape[0]):
        out[k] = sums[k]


@jit_inline_ir
def _run_as(arena, table, n_in, attrs, kind, wide):
    _, sizes, outputs, axes, count = _layout(table, n_in, attrs)
    strides, order = _strides(table, n_in, sizes, outputs, axes, count)
    operands = [view(arena, table, i, kind) for i in range(n_in)]
    accumulator = np.zeros(1, dtype=wide)
    _contract(operands, view(arena, table, n_in, kind), sizes, strides, order, accumulator)


@jit_with_nrt.keeping_literals("kind")
def einsum_compute(arena, table, n_in, n_out, attrs, fattrs, kind):
    status = einsum_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in range(n_in + 1):
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    if kind == F32:
        _run_as(arena, table, n_in, attrs, np.float32, np.float64)
    elif kind == F64:
        _run_as(arena, table, n_in, attrs, np.float64, np.float64)
    elif kind == I32:
        _run_as(arena, table, n_in, attrs, np.int32, np.int64)
    elif kind == I64:
        _run_as(arena, table, n_in, attrs, np.int64, np.int64)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return OK


register_op(
    "Einsum",
    einsum_infer,
    einsum_compute,
    encode=encode_einsum,
    inputs=(1, None),
    dtypes={0: NUMBERS},
    variants=True,
)
