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


def _init(rng, name, *shape, scale=None):
    data = rng.standard_normal(shape)
    if scale is not None:
        data = data * scale
    return (name, data.astype(np.float32))


def _projection_weights(rng, d_model):
    """Wq, Wk, Wv, Wo of an attention layer, scaled by 1 / sqrt(d_model)."""
    s = 1 / np.sqrt(d_model)
    return [_init(rng, name, d_model, d_model, scale=s) for name in ("Wq", "Wk", "Wv", "Wo")]


def _heads(source, key, key_perm):
    """Nodes: q, k, v projections of `source` split into heads (`heads_shape`): qh and vh
    [batch, heads, seq, head], the keys as `key` transposed by `key_perm`."""
    n = helper.make_node
    nodes = [n("MatMul", [source, f"W{part}"], [part]) for part in "qkv"]
    nodes += [n("Reshape", [part, "heads_shape"], [f"{part}4"]) for part in "qkv"]
    return nodes + [
        n("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k4"], [key], perm=key_perm),
        n("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
    ]


def transformer_block(seed=0, d_model=32, heads=2, ff=64):
    """A transformer encoder block (self-attention + feed-forward, each with LayerNorm and a
    residual); input x: [batch, "seq", d_model] with a symbolic sequence length."""
    rng = np.random.default_rng(seed)
    head = d_model // heads
    s = 1 / np.sqrt(d_model)
    inits = _projection_weights(rng, d_model) + [
        _init(rng, "W1", d_model, ff, scale=s),
        _init(rng, "b1", ff),
        _init(rng, "W2", ff, d_model, scale=1 / np.sqrt(ff)),
        _init(rng, "b2", d_model),
        ("g1", np.ones(d_model, np.float32)),
        ("be1", np.zeros(d_model, np.float32)),
        _init(rng, "g2", d_model),
        _init(rng, "be2", d_model),
        ("heads_shape", np.array([0, -1, heads, head], np.int64)),
        ("merge_shape", np.array([0, -1, d_model], np.int64)),
        ("scale", np.array(np.sqrt(head), np.float32)),
    ]
    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "g1", "be1"], ["ln1"], axis=-1, epsilon=1e-5),
        *_heads("ln1", "kt", [0, 2, 3, 1]),
        n("MatMul", ["qh", "kt"], ["scores"]),
        n("Div", ["scores", "scale"], ["scaled"]),
        n("Softmax", ["scaled"], ["attn"], axis=-1),
        n("MatMul", ["attn", "vh"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merge_shape"], ["merged"]),
        n("MatMul", ["merged", "Wo"], ["proj"]),
        n("Add", ["x", "proj"], ["res1"]),
        n("LayerNormalization", ["res1", "g2", "be2"], ["ln2"], axis=-1, epsilon=1e-5),
        n("MatMul", ["ln2", "W1"], ["f1"]),
        n("Add", ["f1", "b1"], ["f1b"]),
        n("Relu", ["f1b"], ["f1r"]),
        n("MatMul", ["f1r", "W2"], ["f2"]),
        n("Add", ["f2", "b2"], ["f2b"]),
        n("Add", ["res1", "f2b"], ["y"]),
    ]
    return model(
        nodes,
        [("x", FLOAT, ["batch", "seq", d_model])],
        [("y", FLOAT, ["batch", "seq", d_model])],
        inits,
    )


def small_cnn(seed=0, channels=8, classes=10, size=16):
    """Conv -> BatchNorm -> Relu, a residual block of two convs, MaxPool, GlobalAveragePool,
    Flatten, Gemm, Softmax; input x: [batch, 3, size, size]."""
    rng = np.random.default_rng(seed)
    c = channels
    inits = [
        _init(rng, "w0", c, 3, 3, 3, scale=0.3),
        _init(rng, "bias0", c),
        ("bn_scale", (1 + 0.1 * rng.standard_normal(c)).astype(np.float32)),
        _init(rng, "bn_bias", c),
        _init(rng, "bn_mean", c, scale=0.1),
        ("bn_var", (1 + 0.1 * np.abs(rng.standard_normal(c))).astype(np.float32)),
        _init(rng, "w1", c, c, 3, 3, scale=0.2),
        _init(rng, "w2", c, c, 3, 3, scale=0.2),
        _init(rng, "bias2", c),
        _init(rng, "fc", classes, c, scale=0.3),
        _init(rng, "fc_bias", classes),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w0", "bias0"], ["c0"], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c0", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["b0"]),
        n("Relu", ["b0"], ["r0"]),
        n("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2", "bias2"], ["c2"], pads=[1, 1, 1, 1]),
        n("Add", ["c2", "r0"], ["skip"]),
        n("Relu", ["skip"], ["r2"]),
        n("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        n("GlobalAveragePool", ["p"], ["g"]),
        n("Flatten", ["g"], ["f"], axis=1),
        n("Gemm", ["f", "fc", "fc_bias"], ["logits"], transB=1),
        n("Softmax", ["logits"], ["y"], axis=-1),
    ]
    return model(
        nodes,
        [("x", FLOAT, ["batch", 3, size, size])],
        [("y", FLOAT, ["batch", classes])],
        inits,
    )


def decoder_step(seed=0, d_model=32, heads=2, ff=64):
    """One step of a transformer decoder with a KV cache: the new token x [batch, 1, d_model]
    attends to the cached keys and values of the tokens before it (past_key, past_value:
    [batch, heads, "past", head], "past" symbolic, 0 on the first step) and to itself; the
    outputs are y [batch, 1, d_model] and the cache with the new token appended (present_key,
    present_value: [batch, heads, "past + 1", head]), fed back as the next step's past."""
    rng = np.random.default_rng(seed)
    head = d_model // heads
    s = 1 / np.sqrt(d_model)
    inits = _projection_weights(rng, d_model) + [
        _init(rng, "W1", d_model, ff, scale=s),
        _init(rng, "W2", ff, d_model, scale=1 / np.sqrt(ff)),
        ("g", np.ones(d_model, np.float32)),
        ("b", np.zeros(d_model, np.float32)),
        ("heads_shape", np.array([0, 1, heads, head], np.int64)),
        ("merge_shape", np.array([0, 1, d_model], np.int64)),
        ("scale", np.array(np.sqrt(head), np.float32)),
    ]
    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
        *_heads("ln", "kh", [0, 2, 1, 3]),
        n("Concat", ["past_key", "kh"], ["present_key"], axis=2),
        n("Concat", ["past_value", "vh"], ["present_value"], axis=2),
        n("Transpose", ["present_key"], ["kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["qh", "kt"], ["scores"]),
        n("Div", ["scores", "scale"], ["scaled"]),
        n("Softmax", ["scaled"], ["attn"], axis=-1),
        n("MatMul", ["attn", "present_value"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merge_shape"], ["merged"]),
        n("MatMul", ["merged", "Wo"], ["proj"]),
        n("Add", ["x", "proj"], ["res"]),
        n("MatMul", ["res", "W1"], ["f1"]),
        n("Relu", ["f1"], ["f1g"]),
        n("MatMul", ["f1g", "W2"], ["f2"]),
        n("Add", ["res", "f2"], ["y"]),
    ]
    cache = ["batch", heads, "past", head]
    grown = ["batch", heads, "past_plus_one", head]
    return model(
        nodes,
        [
            ("x", FLOAT, ["batch", 1, d_model]),
            ("past_key", FLOAT, cache),
            ("past_value", FLOAT, cache),
        ],
        [
            ("y", FLOAT, ["batch", 1, d_model]),
            ("present_key", FLOAT, grown),
            ("present_value", FLOAT, grown),
        ],
        inits,
    )


def float16_model(proto):
    """A copy of `proto` with its float32 initializers, inputs and outputs in float16 (how a
    model converted to half precision with its I/O types changed holds them)."""
    from onnx import ModelProto

    half = ModelProto()
    half.CopyFrom(proto)
    for init in half.graph.initializer:
        if init.data_type == FLOAT:
            data = numpy_helper.to_array(init).astype(np.float16)
            init.CopyFrom(numpy_helper.from_array(data, init.name))
    for value in list(half.graph.input) + list(half.graph.output):
        if value.type.tensor_type.elem_type == FLOAT:
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    return half
