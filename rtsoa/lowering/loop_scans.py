"""Loop scan outputs, composed at lowering from loop-carried values.

An ONNX Loop's body may return, after its condition and loop-carried values, *scan outputs*:
one tensor per iteration, which the Loop stacks along a new first axis. rtsoa's Loop region
(`rtsoa.lowering.control_flow`) carries values only, so each scan output becomes three more
loop-carried values of a rewritten body: the values so far, flattened and joined (Concat of
the accumulator and the iteration's value Reshaped to 1-D), the iteration value's shape
(Shape) and, shared by all scan outputs, the number of iterations run (Add 1). After the loop
the accumulator is Reshaped (`allowzero`) to [iterations, *shape]: the same elements in the
same order, so the result is exact. Each iteration copies the accumulator (Concat), so a scan
of n iterations moves O(n^2) elements; a Loop that runs no iteration gives a [0] tensor (the
element shape is not known without one).

Refused at lowering, naming the node: a scan output whose element type the body does not
declare.
"""

import dataclasses

import numpy as np

from rtsoa.abi.dtypes import DTYPE_OF_NUMPY
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.compute_graph import Node, Tensor
from rtsoa.lowering.subgraphs import fresh_tensor_name
from rtsoa.ops.abi import NUMPY_DTYPES


def _fresh(graph, base):
    """A new tensor of `graph` named after `base`."""
    name = fresh_tensor_name(graph, base)
    graph.tensor(name)
    return name


def _constant(graph, base, array):
    name = _fresh(graph, base)
    kind = DType(DTYPE_OF_NUMPY[array.dtype])
    graph.tensors[name] = Tensor(name, kind, tuple(array.shape), array)
    return name


def carry_scans(ctx, where, body, carried):
    """(body', initial values, finish): `body` with its scan outputs made loop-carried (see the
    module docstring), the outer tensors they start from (constants of `ctx`'s graph), and
    finish(final values) emitting the calls that turn the loop's final extra values into the
    node's scan outputs."""
    scans = body.outputs[1 + carried :]
    dtypes = []
    for name in scans:
        kind = body.tensors[name].dtype if name in body.tensors else DType.UNDEFINED
        if kind == DType.UNDEFINED:
            raise LoweringError(
                f"{where}: the element type of scan output {name!r} is not declared by the body"
            )
        dtypes.append(DType(kind))
    body = dataclasses.replace(body, nodes=list(body.nodes), tensors=dict(body.tensors))
    flat = _constant(body, "scan/flat", np.array([-1], np.int64))
    one = _constant(body, "scan/one", np.array(1, np.int64))
    inputs, outputs, nodes = [], [], []
    for k, (name, kind) in enumerate(zip(scans, dtypes, strict=True)):
        so_far, shape_in = _fresh(body, f"scan{k}/so_far"), _fresh(body, f"scan{k}/shape")
        part, joined = _fresh(body, f"scan{k}/part"), _fresh(body, f"scan{k}/joined")
        shape_out = _fresh(body, f"scan{k}/shape_out")
        nodes += [
            Node("Reshape", [name, flat], [part]),
            Node("Concat", [so_far, part], [joined], {"axis": 0}),
            Node("Shape", [name], [shape_out]),
        ]
        body.tensors[so_far].dtype = kind
        inputs += [so_far, shape_in]
        outputs += [joined, shape_out]
    count_in, count_out = _fresh(body, "scan/count"), _fresh(body, "scan/count_out")
    nodes.append(Node("Add", [count_in, one], [count_out]))
    body.nodes += nodes
    body.inputs = list(body.inputs) + inputs + [count_in]
    body.outputs = list(body.outputs[: 1 + carried]) + outputs + [count_out]
    initial = []
    for k, kind in enumerate(dtypes):
        initial.append(ctx.fresh_name(f"scan{k}_start"))
        ctx.set_constant(initial[-1], np.zeros(0, NUMPY_DTYPES[kind]))
        initial.append(ctx.fresh_name(f"scan{k}_shape_start"))
        ctx.set_constant(initial[-1], np.zeros(0, np.int64))
    initial.append(ctx.fresh_name("scan_count_start"))
    ctx.set_constant(initial[-1], np.array(0, np.int64))

    def finish(finals, targets):
        """Reshape each accumulator (finals: [so far, shape] per scan, then the count) to
        [count, *shape] into `targets`, the node's scan outputs ("" unused)."""
        count = ctx.fresh_name("scan_count")
        ctx.emit("Unsqueeze", [finals[-1]], [count], {"axes": [0]})
        for k, target in enumerate(targets):
            if not target:
                continue
            shape = ctx.fresh_name(f"scan{k}_full_shape")
            ctx.emit("Concat", [count, finals[2 * k + 1]], [shape], {"axis": 0})
            ctx.emit("Reshape", [finals[2 * k], shape], [target], {"allowzero": 1})

    return body, initial, finish
