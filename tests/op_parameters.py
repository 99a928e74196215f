"""Helpers of the op parameter tests (`test_op_parameters_*.py`): a one-node model judged by
onnxruntime or onnx.reference (over `one_node.py`), and the operand table, arena and
attribute slots rtsoa's op gets.

Those tests call an op's parameter functions (window geometry, Slice's clamping, the Reduce*
axes and folds) directly from Python, so each compiles alone (seconds, where an op entry takes
tens of seconds): they are the commands of the ops' mutation configs (`mutation/ops-*.toml`),
where every mutant compiles again. Their cases are drawn from seeded generators (a mutant's
verdict is reproducible), and each random test states how many of its cases reached each
branch it is there for, so a change that makes the draws miss a branch fails rather than
passing on fewer cases.
"""

import numpy as np
from one_node import one_node_model
from onnx.reference import ReferenceEvaluator

from rtsoa.ops.host import _prepare
from rtsoa.ops.window import CONV, CONV_TRANSPOSE, POOL
from rtsoa.testing.models import run_onnxruntime

OPSET = 19  # AveragePool's dilations, Slice / Reduce* axes as inputs
KINDS = {"MaxPool": POOL, "AveragePool": POOL, "Conv": CONV, "ConvTranspose": CONV_TRANSPOSE}
SAME = ("SAME_UPPER", "SAME_LOWER")


def judged(op, inputs, attributes, opset=OPSET, reference=False):
    """[output] of a one-node model of `op` on `inputs` (a list, None for an absent input), by
    onnxruntime or, with `reference`, onnx.reference; None where the judge refuses the node."""
    model, feeds = one_node_model(op, inputs, attributes, opset)
    try:
        if reference:
            return ReferenceEvaluator(model).run(None, feeds)
        return [run_onnxruntime(model, feeds)["y"]]
    except Exception:  # noqa: BLE001 - the judges refuse with several exception types
        return None


def slots(op, arrays, attributes):
    """The operand table, arena and attribute slots rtsoa's op `op` gets for `arrays`."""
    _, attrs, table, arena = _prepare(op, arrays, attributes, 1)
    return table, arena, np.asarray(attrs, dtype=np.int64)
