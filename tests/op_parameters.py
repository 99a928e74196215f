"""Helpers of the op parameter tests (`test_op_parameters_*.py`): a one-node onnxruntime
session, and the operand table, arena and attribute slots rtsoa's op gets.

Those tests call an op's parameter functions (window geometry, Slice's clamping, the Reduce*
axes and folds) directly from Python, so each compiles alone (seconds, where an op entry takes
tens of seconds): they are the commands of the ops' mutation configs (`mutation/ops-*.toml`),
where every mutant compiles again. Their cases are drawn from seeded generators (a mutant's
verdict is reproducible), and each random test states how many of its cases reached each
branch it is there for, so a change that makes the draws miss a branch fails rather than
passing on fewer cases.
"""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from rtsoa.ops.host import _prepare

OPSET = 19  # AveragePool's dilations, Slice / Reduce* axes as inputs


def session(op, inputs, attributes, n_out=1, opset=OPSET):
    """An onnxruntime session of one `op` node on float32 / int64 `inputs` (name -> array), or
    None where onnxruntime refuses the node (at load or at its first run)."""
    values = [
        helper.make_tensor_value_info(
            name,
            TensorProto.INT64 if array.dtype == np.int64 else TensorProto.FLOAT,
            array.shape,
        )
        for name, array in inputs.items()
    ]
    outputs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, list(inputs), outputs, **attributes)
    graph = helper.make_graph(
        [node],
        "one",
        values,
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(model.SerializeToString(), options)
        return session.run(None, inputs)
    except Exception:  # noqa: BLE001 - onnxruntime's refusals come as several exception types
        return None


def slots(op, arrays, attributes):
    """The operand table, arena and attribute slots rtsoa's op `op` gets for `arrays`."""
    _, attrs, table, arena = _prepare(op, arrays, attributes, 1)
    return table, arena, np.asarray(attrs, dtype=np.int64)
