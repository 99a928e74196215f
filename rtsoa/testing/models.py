"""Small ONNX models built with onnx.helper for the model tests (the oracle is onnxruntime)."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
FLOAT = TensorProto.FLOAT


def model(nodes, inputs, outputs, initializers=(), opset=OPSET, name="model"):
    """A ModelProto from helper pieces; `inputs` / `outputs` are (name, elem type, dims)."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, t, d) for n, t, d in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def mlp(seed=0, features=16, hidden=32, classes=4, layers=2):
    """MatMul + Add + Relu layers, then Gemm; input x: [batch, features]."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    width, current = features, "x"
    for layer in range(layers):
        w = (rng.standard_normal((width, hidden)) / np.sqrt(width)).astype(np.float32)
        b = rng.standard_normal(hidden).astype(np.float32)
        inits += [(f"W{layer}", w), (f"b{layer}", b)]
        nodes += [
            helper.make_node("MatMul", [current, f"W{layer}"], [f"m{layer}"]),
            helper.make_node("Add", [f"m{layer}", f"b{layer}"], [f"a{layer}"]),
            helper.make_node("Relu", [f"a{layer}"], [f"h{layer}"]),
        ]
        width, current = hidden, f"h{layer}"
    w = rng.standard_normal((classes, width)).astype(np.float32)
    b = rng.standard_normal(classes).astype(np.float32)
    inits += [("Wout", w), ("bout", b)]
    nodes.append(helper.make_node("Gemm", [current, "Wout", "bout"], ["y"], transB=1))
    return model(
        nodes, [("x", FLOAT, ["batch", features])], [("y", FLOAT, ["batch", classes])], inits
    )


def run_onnxruntime(proto, inputs):
    """onnxruntime's outputs (single thread) as {name: array}."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, inputs), strict=True))
