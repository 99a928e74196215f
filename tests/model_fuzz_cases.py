"""Random small ONNX models for the random-model fuzzer (`test_model_fuzz.py`): a few graph
inputs of one drawn dtype and drawn shapes (zero-size dimensions and scalars included), then a
chain of one to seven drawn ops over the tensors made so far, with broadcasting operands,
initializers, dtype changes, reductions, MatMul -> Add -> Relu chains (what the lowering
fuses), shape ops and a Split whose second part may go unread. Every tensor no op reads is an
output, and now and then one that an op reads too.

Each model's shapes and dtypes are tracked here (numpy's broadcasting rules), so every model is
valid ONNX that onnxruntime and onnx.reference both run; `features` records what a model holds
(ops, dtype, zero-size, broadcasting), the branch mix the fuzzer reports.
"""

from typing import NamedTuple

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from op_differential_cases import values

OPSET = 17
FEEDS = 2  # feeds per model: one lowering and one oracle session serve them
FLOATS = (np.float32, np.float64)
INTS = (np.int32, np.int64)
DTYPES = (np.float32, np.float32, np.float64, np.int32, np.int64)
ARITHMETIC = ("Add", "Sub", "Mul", "Max", "Min")
FLOAT_UNARY = ("Exp", "Tanh", "Sigmoid", "Sqrt", "Softplus")
ANY_UNARY = ("Relu", "Neg", "Abs", "Identity")
COMPARISONS = ("Less", "Greater", "Equal")
# onnxruntime's float ReduceMax / ReduceMin skip a NaN or not by its position; the reference
# (numpy) propagates it, as rtsoa does: such models are judged by the reference alone
NAN_ORDERED = "float ReduceMax / ReduceMin (the reference alone judges)"


class ModelCase(NamedTuple):
    """A random model and its feeds, in the shape `test_op_differential.run_cases` takes."""

    label: str
    model: bytes
    feeds: list  # [{input name: array}]
    oracle: str  # "onnxruntime" or "reference"
    rtol: float
    atol: float
    signed_zero: bool
    options: dict  # the lowering's streams, the model's executor
    features: frozenset  # what the model holds, for the branch mix


class Tensor(NamedTuple):
    name: str
    dtype: type
    shape: tuple


class _Builder:
    """The model drawn so far: nodes, inputs, initializers, the tensors ops may read."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.inputs = []  # Tensor
        self.initializers = []  # TensorProto
        self.tensors = []  # Tensor, every value an op may read
        self.read = set()  # names some node reads
        self.features = set()
        self.count = 0

    def name(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    def input(self, dtype, shape):
        tensor = Tensor(self.name("x"), dtype, tuple(shape))
        self.inputs.append(tensor)
        self.tensors.append(tensor)
        if 0 in tensor.shape:
            self.features.add("zero-size")
        return tensor

    def constant(self, array):
        name = self.name("c")
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return Tensor(name, np.asarray(array).dtype.type, np.asarray(array).shape)

    def node(self, op, inputs, dtype, shape, outputs=1, **attributes):
        names = [self.name("t") for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, [t.name for t in inputs], names, **attributes))
        self.read.update(t.name for t in inputs)
        self.features.add(op)
        made = [Tensor(name, dtype, tuple(shape)) for name in names]
        self.tensors.extend(made)
        return made[0] if outputs == 1 else made

    def pick(self, accept):
        pool = [t for t in self.tensors if accept(t)]
        return pool[self.rng.integers(len(pool))] if pool else None


def _draw_shape(rng, rank=None):
    rank = int(rng.integers(0, 4)) if rank is None else rank
    dims = rng.choice([0, 1, 2, 3, 4], size=rank, p=[0.08, 0.22, 0.3, 0.25, 0.15])
    return tuple(int(d) for d in dims)


def _broadcast_partner(rng, shape):
    """A shape that broadcasts with `shape`: a suffix of it with some dimensions 1, or
    `shape` with leading dimensions added."""
    if rng.random() < 0.25:
        return _draw_shape(rng, rank=int(rng.integers(0, 2))) + shape if len(shape) < 3 else shape
    suffix = shape[int(rng.integers(0, len(shape) + 1)) :]
    return tuple(1 if rng.random() < 0.35 else d for d in suffix)


def _operand(builder, first):
    """A second operand of `first`'s dtype that broadcasts with it: a tensor made so far, a
    new graph input or an initializer."""
    rng = builder.rng
    choice = rng.random()
    if choice < 0.4:
        other = builder.pick(lambda t: t.dtype == first.dtype and _broadcasts(t.shape, first.shape))
        if other is not None:
            return other
    shape = _broadcast_partner(rng, first.shape)
    if choice < 0.7:
        return builder.input(first.dtype, shape)
    return builder.constant(values(rng, first.dtype, shape, edges=0.0))


def _broadcasts(a, b):
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return True


def _binary(builder, op, first, second, dtype=None):
    shape = np.broadcast_shapes(first.shape, second.shape)
    if first.shape != second.shape:
        builder.features.add("broadcast")
    return builder.node(op, [first, second], dtype or first.dtype, shape)


def _step(builder):
    """Add one drawn op (or a short chain) reading the tensors made so far."""
    rng = builder.rng
    numeric = builder.pick(lambda t: t.dtype in FLOATS + INTS)
    if numeric is None:
        return
    floats = builder.pick(lambda t: t.dtype in FLOATS)
    ranked = builder.pick(lambda t: t.dtype in FLOATS + INTS and len(t.shape) >= 1)
    kind = rng.choice(
        ["arithmetic", "unary", "where", "cast", "reduce", "matmul", "shape", "concat", "split"]
        + ["index"],
        p=[0.2, 0.14, 0.07, 0.07, 0.1, 0.11, 0.1, 0.07, 0.06, 0.08],
    )
    if kind == "arithmetic":
        ops = ARITHMETIC + (("Div",) if numeric.dtype in FLOATS else ())
        _binary(builder, ops[rng.integers(len(ops))], numeric, _operand(builder, numeric))
    elif kind == "unary":
        ops = ANY_UNARY + (FLOAT_UNARY if numeric.dtype in FLOATS else ())
        builder.node(ops[rng.integers(len(ops))], [numeric], numeric.dtype, numeric.shape)
        if numeric.dtype in FLOATS and numeric.shape and rng.random() < 0.3:
            builder.node("Softmax", [numeric], numeric.dtype, numeric.shape, axis=-1)
    elif kind == "where":
        other = _operand(builder, numeric)
        op = COMPARISONS[rng.integers(len(COMPARISONS))]
        condition = _binary(builder, op, numeric, other, dtype=np.bool_)
        shape = np.broadcast_shapes(condition.shape, numeric.shape, other.shape)
        builder.node("Where", [condition, numeric, other], numeric.dtype, shape)
    elif kind == "cast":
        targets = {
            np.float32: (np.float64,),
            np.float64: (np.float32,),
            np.int32: (np.int64, np.float32, np.float64),
            np.int64: (np.int32, np.float64),
        }[numeric.dtype]
        target = targets[rng.integers(len(targets))]
        to = helper.np_dtype_to_tensor_dtype(np.dtype(target))
        builder.node("Cast", [numeric], target, numeric.shape, to=to)
    elif kind == "reduce" and ranked is not None:
        _reduce(builder, ranked)
    elif kind == "matmul" and floats is not None and len(floats.shape) >= 1:
        _matmul(builder, floats)
    elif kind == "shape" and ranked is not None:
        _shape_op(builder, ranked)
    elif kind == "concat" and ranked is not None:
        axis = int(rng.integers(-len(ranked.shape), len(ranked.shape)))
        shape = list(ranked.shape)
        shape[axis] *= 2
        builder.node("Concat", [ranked, ranked], ranked.dtype, shape, axis=axis)
    elif kind == "index" and ranked is not None:
        _index(builder, ranked)
    elif kind == "split" and ranked is not None and ranked.shape[0] % 2 == 0:
        half = (ranked.shape[0] // 2, *ranked.shape[1:])
        first, second = builder.node("Split", [ranked], ranked.dtype, half, outputs=2, axis=0)
        if rng.random() < 0.5:  # the second part unread: not an output either (dead output)
            builder.read.add(second.name)
            builder.tensors.remove(second)
            builder.features.add("unread Split output")


def _reduce(builder, tensor):
    rng = builder.rng
    rank = len(tensor.shape)
    axis = int(rng.integers(0, rank))
    keep = int(rng.integers(0, 2))
    shape = [1 if k == axis else d for k, d in enumerate(tensor.shape) if keep or k != axis]
    if tensor.shape[axis] == 0 or rng.random() < 0.5:  # a sum of nothing is 0; a max is not
        axes = builder.constant(np.array([axis], dtype=np.int64))
        builder.node("ReduceSum", [tensor, axes], tensor.dtype, shape, keepdims=keep)
    else:
        op = ("ReduceMax", "ReduceMin", "ReduceMean")[rng.integers(3)]
        if op == "ReduceMean" and tensor.dtype not in FLOATS:
            op = "ReduceMax"
        if op != "ReduceMean" and tensor.dtype in FLOATS:
            builder.features.add(NAN_ORDERED)
        builder.node(op, [tensor], tensor.dtype, shape, axes=[axis], keepdims=keep)


def _matmul(builder, tensor):
    """MatMul by an initializer, then (often) a bias Add and a Relu: the fused chain."""
    rng = builder.rng
    inner = tensor.shape[-1]
    columns = int(rng.integers(1, 5))
    weights = builder.constant(rng.standard_normal((inner, columns)).astype(tensor.dtype))
    shape = (*tensor.shape[:-1], columns)
    product = builder.node("MatMul", [tensor, weights], tensor.dtype, shape)
    if rng.random() < 0.6:
        # a bias along the last axis (fused), or one of another shape (not fused)
        shapes = [(columns,), (columns,), (1, columns), (1,), (), (*shape[:-1], 1)]
        bias_shape = shapes[rng.integers(len(shapes))]
        bias = builder.constant(rng.standard_normal(bias_shape).astype(tensor.dtype))
        if rng.random() < 0.3:
            builder.features.add("bias first")
            operands = [bias, product]
        else:
            operands = [product, bias]
        shape = np.broadcast_shapes(shape, bias_shape)
        product = builder.node("Add", operands, tensor.dtype, shape)
        if rng.random() < 0.6:
            builder.node("Relu", [product], tensor.dtype, shape)


def _index(builder, tensor):
    """Slice (any step, starts and ends anywhere but a negative step's start before the axis:
    a known difference, pinned by a strict xfail), Gather of constant indices, Expand, or a
    Reshape to the tensor's own Shape (a shape the lowering folds)."""
    rng = builder.rng
    shape = tensor.shape
    axis = int(rng.integers(0, len(shape)))
    size = shape[axis]
    choice = rng.integers(4)
    if choice == 0:
        step = int(rng.choice([-2, -1, 1, 2, 3]))
        low = 0 if step > 0 else -size
        start = int(rng.integers(low, size + 1)) if size or step > 0 else 0
        end = int(rng.integers(-size - 3, size + 4))
        kept = len(range(*slice(start, end, step).indices(size)))
        arrays = [np.array([v], dtype=np.int64) for v in (start, end, axis, step)]
        out = (*shape[:axis], kept, *shape[axis + 1 :])
        inputs = [tensor, *(builder.constant(a) for a in arrays)]
        builder.node("Slice", inputs, tensor.dtype, out)
    elif choice == 1 and size > 0:
        picks = rng.integers(-size, size, size=int(rng.integers(0, 4)))
        indices = builder.constant(picks.astype(np.int64))
        out = (*shape[:axis], picks.shape[0], *shape[axis + 1 :])
        builder.node("Gather", [tensor, indices], tensor.dtype, out, axis=axis)
    elif choice == 2:
        target = tuple(int(d) for d in rng.integers(1, 3, size=int(rng.integers(0, 2))))
        target += tuple(d if d != 1 or rng.random() < 0.5 else 3 for d in shape)
        out = np.broadcast_shapes(shape, target)
        builder.node(
            "Expand", [tensor, builder.constant(np.array(target, np.int64))], tensor.dtype, out
        )
    elif 0 not in shape:  # a 0 in a Reshape's shape copies the input's dimension
        flat = builder.node("Flatten", [tensor], tensor.dtype, (1, int(np.prod(shape))), axis=0)
        dims = builder.node("Shape", [tensor], np.int64, (len(shape),))
        builder.node("Reshape", [flat, dims], tensor.dtype, shape)


def _shape_op(builder, tensor):
    rng = builder.rng
    shape = tensor.shape
    choice = rng.integers(3)
    if choice == 0 and len(shape) >= 2:
        perm = [int(k) for k in rng.permutation(len(shape))]
        builder.node("Transpose", [tensor], tensor.dtype, [shape[k] for k in perm], perm=perm)
    elif choice == 1 and 0 not in shape:  # onnx.reference cannot flatten an empty tensor
        axis = int(rng.integers(0, len(shape) + 1))
        flat = (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:])))
        builder.node("Flatten", [tensor], tensor.dtype, flat, axis=axis)
    else:
        axes = builder.constant(np.array([0], dtype=np.int64))
        builder.node("Unsqueeze", [tensor, axes], tensor.dtype, (1, *shape))


def _feed_values(rng, tensor):
    data = values(rng, tensor.dtype, tensor.shape, edges=0.05)
    if tensor.dtype in INTS:  # small integers: products of a few stay far from overflow
        data = np.clip(data, -20, 20)
    return np.asarray(data, dtype=tensor.dtype)


def random_model(seed):
    """The ModelCase of seed `seed` (onnxruntime as the oracle; the driver asks the
    reference too)."""
    rng = np.random.default_rng(seed)
    builder = _Builder(rng)
    dtype = DTYPES[rng.integers(len(DTYPES))]
    builder.features.add(np.dtype(dtype).name)
    for _ in range(int(rng.integers(1, 3))):
        builder.input(dtype, _draw_shape(rng))
    for _ in range(int(rng.integers(1, 8))):
        _step(builder)
    if not builder.nodes:
        builder.node("Identity", [builder.inputs[0]], dtype, builder.inputs[0].shape)
    made = [t for t in builder.tensors if t not in builder.inputs]
    outputs = [t for t in made if t.name not in builder.read]
    kept = [t for t in made if t.name in builder.read]
    if kept and rng.random() < 0.3:
        outputs.append(kept[rng.integers(len(kept))])  # an output that an op reads too
        builder.features.add("output read by an op")

    def info(tensor):
        code = helper.np_dtype_to_tensor_dtype(np.dtype(tensor.dtype))
        return helper.make_tensor_value_info(tensor.name, code, list(tensor.shape))

    graph = helper.make_graph(
        builder.nodes,
        f"random{seed}",
        [info(t) for t in builder.inputs],
        [info(t) for t in outputs],
        builder.initializers,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    proto.ir_version = 8
    feeds = [{t.name: _feed_values(rng, t) for t in builder.inputs} for _ in range(FEEDS)]
    float32 = any(
        t.type.tensor_type.elem_type == TensorProto.FLOAT for t in (*graph.input, *graph.output)
    )
    options = {"streams": int(rng.choice([1, 1, 2])), "executor": "auto"}
    if options["streams"] == 2:
        builder.features.add("2 streams")
    ops = " ".join(node.op_type for node in builder.nodes)
    return ModelCase(
        label=f"random model {seed} [{np.dtype(dtype).name}: {ops}]",
        model=proto.SerializeToString(),
        feeds=feeds,
        oracle="onnxruntime",
        rtol=1e-4 if float32 else 1e-9,
        atol=1e-4 if float32 else 1e-9,
        signed_zero=False,
        options=options,
        features=frozenset(builder.features),
    )
