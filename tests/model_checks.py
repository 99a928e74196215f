"""Helpers shared by the model tests: ONNX subgraphs built with onnx.helper, and a lowered model
run against onnxruntime with its memory and hazards checked."""

import numpy as np
from onnx import helper, numpy_helper

from rtsoa.lowering import lower
from rtsoa.runtime import InferenceSession, SessionOptions
from rtsoa.testing.models import run_onnxruntime

# float32 within rtol 1e-5, atol 1e-6 of onnxruntime (the same float32 operations in the same
# order); integers exactly
RTOL, ATOL = 1e-5, 1e-6


def subgraph(nodes, name, outputs, inputs=(), initializers=()):
    """A GraphProto (an If branch, a Loop body); `inputs` / `outputs`: (name, elem type, dims)."""
    return helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(*entry) for entry in inputs],
        [helper.make_tensor_value_info(*entry) for entry in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers],
    )


def run_clean(graph, inputs):
    """Run a lowered graph once; no hazard, no leaked block. Returns the outputs."""
    with InferenceSession(graph) as executor:
        got = executor.execute_sync(inputs)
        assert executor.device.hazard_count == 0
        assert executor.main.leaked_blocks == 0
    return got


def check_fusion(proto, inputs, op, fused_ops):
    """Lower with and without fusion: the fused graph has `fused_ops` `op` ops, the unfused one
    none, both give the same bits (the sign of zero included) and onnxruntime's values.
    Returns the fused graph's op counts."""
    from rtsoa.graph.inspect import op_counts

    fused = lower(proto)
    plain = lower(proto, fuse=False)
    assert op_counts(fused).get(op, 0) == fused_ops
    assert op not in op_counts(plain)
    got = run_clean(fused, inputs)
    unfused = run_clean(plain, inputs)
    want = run_onnxruntime(proto, inputs)
    for name, expected in want.items():
        assert got[name].dtype == expected.dtype and got[name].shape == expected.shape, name
        np.testing.assert_array_equal(got[name], unfused[name])
        assert np.array_equal(np.signbit(got[name]), np.signbit(unfused[name])), name
        np.testing.assert_allclose(got[name], expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    return op_counts(fused)


def run_and_compare(proto, input_sets, executor="auto", streams=1):
    """Lower once, run every input set, compare with onnxruntime (names, shapes, dtypes and
    values); each run must leave no leaked block and the device's allocated bytes where they
    were, and the whole must have zero hazards. Returns the lowered graph."""
    graph = lower(proto, streams=streams)
    with InferenceSession(graph, SessionOptions(executor=executor)) as run:
        if executor != "auto":
            assert run.main.name == executor
        for inputs in input_sets:
            before = run.device.stats()["hbm"]["allocation.current"]
            got = run.execute_sync(inputs)
            want = run_onnxruntime(proto, inputs)
            assert sorted(got) == sorted(want)
            for name, expected in want.items():
                assert got[name].shape == expected.shape, name
                assert got[name].dtype == expected.dtype, name
                np.testing.assert_allclose(got[name], expected, rtol=RTOL, atol=ATOL)
            assert run.main.leaked_blocks == 0
            assert run.device.stats()["hbm"]["allocation.current"] == before
        assert run.device.hazard_count == 0
    return graph
