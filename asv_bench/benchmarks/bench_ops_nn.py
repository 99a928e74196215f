"""Conv (im2col + BLAS GEMM) against onnxruntime's on the same inputs, single thread both;
WinogradConv, the lowering's form of a 3 x 3 stride-1 conv, against both on ResNet-18's and
DenseNet-121's 3 x 3 layer shapes (`WinogradVersusOnnxruntime`); MaxPool and AveragePool on
the CNNs' pool shapes (`PoolVersusOnnxruntime`).

rtsoa's side is the op's compute through the compiled entry (`run_op`, MODE_COMPUTE) on a
prepared operand table, so it includes the entry call but not packing numpy arrays; the
onnxruntime side is `InferenceSession.run` of a one-node model (intra- and inter-op threads 1).
The ratio is measured back to back, interleaved, in one process. OpenBLAS reads
OPENBLAS_NUM_THREADS=1 from the environment only at load time: set it in the benchmark command
(NUMBA-NOTES: leave OPENBLAS_CORETYPE alone in tests and CI).

    cd asv_bench && OPENBLAS_NUM_THREADS=1 python -m benchmarks.bench_ops_nn
"""

import statistics
import time

import numpy as np

from .common import ensure_rtsoa_importable

# name -> (X shape, W shape, attributes)
CONVS = {
    "3x3 16->32 on 32x32": ((1, 16, 32, 32), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3 64->64 on 16x16": ((1, 64, 16, 16), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    "depthwise 3x3 32 on 32x32": (
        (1, 32, 32, 32),
        (32, 1, 3, 3),
        {"pads": [1, 1, 1, 1], "group": 32},
    ),
    "1x1 64->128 on 32x32": ((1, 64, 32, 32), (128, 64, 1, 1), {}),
}
# pool layers of ResNet, DenseNet, Inception-v1 and VGG at 224 x 224:
# name -> (op, X shape, (kernel, stride, pad) of both spatial axes)
POOLS = {
    "MaxPool 3x3/2 on 64x112x112": ("MaxPool", (1, 64, 112, 112), (3, 2, 1)),
    "MaxPool 3x3/2 on 192x56x56": ("MaxPool", (1, 192, 56, 56), (3, 2, 1)),
    "MaxPool 3x3/2 on 480x28x28": ("MaxPool", (1, 480, 28, 28), (3, 2, 1)),
    "MaxPool 3x3/1 on 192x28x28": ("MaxPool", (1, 192, 28, 28), (3, 1, 1)),
    "MaxPool 3x3/1 on 832x7x7": ("MaxPool", (1, 832, 7, 7), (3, 1, 1)),
    "MaxPool 2x2/2 on 128x112x112": ("MaxPool", (1, 128, 112, 112), (2, 2, 0)),
    "AveragePool 2x2/2 on 128x56x56": ("AveragePool", (1, 128, 56, 56), (2, 2, 0)),
    "AveragePool 2x2/2 on 512x14x14": ("AveragePool", (1, 512, 14, 14), (2, 2, 0)),
}
# the 3 x 3, stride-1 layers of ResNet-18 and DenseNet-121 at 224 x 224: (C, M, H = W)
WINOGRAD = {
    "3x3 64->64 on 56x56": (64, 64, 56),
    "3x3 128->128 on 28x28": (128, 128, 28),
    "3x3 256->256 on 14x14": (256, 256, 14),
    "3x3 512->512 on 7x7": (512, 512, 7),
    "3x3 128->32 on 56x56": (128, 32, 56),
    "3x3 128->32 on 14x14": (128, 32, 14),
}


class OneOp:
    """One op on fixed inputs prepared for both runtimes (rtsoa's compiled entry, and a
    one-node onnxruntime model on one thread); `check` asserts they agree."""

    def __init__(self, op, feeds, attributes, opset=18, reference=None):
        """`reference`: (op, feeds, attributes) of onnxruntime's node where it is not rtsoa's
        op (an op of rtsoa's own)."""
        ensure_rtsoa_importable()
        import onnxruntime
        from onnx import TensorProto, helper

        from rtsoa.ops.abi import COL_NBYTES, COL_OFFSET, MODE_COMPUTE, MODE_INFER
        from rtsoa.ops.host import _aligned, _prepare
        from rtsoa.ops.library import run_op
        from rtsoa.ops.registry import op_code

        self.feeds = feeds
        inputs = list(self.feeds.values())
        self.n_in = n_in = len(inputs)
        _, self.attrs, self.table, arena = _prepare(op, inputs, attributes, 1)
        self.code = op_code(op)
        self.run_op = run_op
        self.mode = MODE_COMPUTE
        assert run_op(MODE_INFER, self.code, arena, self.table, self.attrs, n_in, 1) == 0
        out_rank = int(self.table[n_in, 3])
        self.out_shape = tuple(int(d) for d in self.table[n_in, 4 : 4 + out_rank])
        out_bytes = int(np.prod(self.out_shape)) * 4
        self.out_offset = _aligned(len(arena))
        self.arena = np.zeros(self.out_offset + out_bytes, dtype=np.uint8)
        self.arena[: len(arena)] = arena
        self.table[n_in, COL_OFFSET] = self.out_offset
        self.table[n_in, COL_NBYTES] = out_bytes

        op, self.feeds, attributes = reference or (op, feeds, attributes)
        node = helper.make_node(op, list(self.feeds), ["y"], **attributes)
        graph = helper.make_graph(
            [node],
            op.lower(),
            [
                helper.make_tensor_value_info(
                    key, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape
                )
                for key, value in self.feeds.items()
            ],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )

    def rtsoa(self):
        status = self.run_op(self.mode, self.code, self.arena, self.table, self.attrs, self.n_in, 1)
        assert status == 0

    def onnxruntime(self):
        return self.session.run(None, self.feeds)[0]

    def check(self):
        self.rtsoa()
        out = self.arena[self.out_offset :].view(np.float32).reshape(self.out_shape)
        np.testing.assert_allclose(out, self.onnxruntime(), rtol=1e-3, atol=1e-3)


def _conv(name):
    """Conv `name` of CONVS as a OneOp (float32 inputs of a fixed seed)."""
    x_shape, w_shape, attributes = CONVS[name]
    rng = np.random.default_rng(7)
    feeds = {
        "x": rng.standard_normal(x_shape).astype(np.float32),
        "w": rng.standard_normal(w_shape).astype(np.float32),
        "b": rng.standard_normal(w_shape[0]).astype(np.float32),
    }
    return OneOp("Conv", feeds, attributes)


def _winograd(name):
    """(WinogradConv, the direct Conv) of WINOGRAD shape `name` as OneOps, pads 1, with a bias;
    onnxruntime runs the Conv for both."""
    from rtsoa.ops.winograd import transform_weights

    c, m, size = WINOGRAD[name]
    rng = np.random.default_rng(7)
    feeds = {
        "x": rng.standard_normal((1, c, size, size)).astype(np.float32),
        "w": (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32),
        "b": rng.standard_normal(m).astype(np.float32),
    }
    conv = ("Conv", feeds, {"pads": [1, 1, 1, 1]})
    transformed = {"x": feeds["x"], "u": transform_weights(feeds["w"]), "b": feeds["b"]}
    winograd = OneOp("WinogradConv", transformed, {"pads": [1, 1, 1, 1]}, reference=conv)
    return winograd, OneOp(*conv)


def ratio(conv, rounds=15, repeats=20, baseline=None):
    """Median rtsoa time over onnxruntime time (or over `baseline`, a function, when given),
    rounds interleaved; and both medians (s)."""
    other = baseline or conv.onnxruntime
    ours, theirs = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            conv.rtsoa()
        ours.append((time.perf_counter() - start) / repeats)
        start = time.perf_counter()
        for _ in range(repeats):
            other()
        theirs.append((time.perf_counter() - start) / repeats)
    mine, reference = statistics.median(ours), statistics.median(theirs)
    return mine / reference, mine, reference


class ConvVersusOnnxruntime:
    """Conv compute time, rtsoa over onnxruntime (single thread both)."""

    params = list(CONVS)
    param_names = ["conv"]
    timeout = 300

    def setup(self, name):
        self.conv = _conv(name)
        self.conv.check()

    def time_rtsoa(self, name):
        self.conv.rtsoa()

    def time_onnxruntime(self, name):
        self.conv.onnxruntime()

    def track_ratio(self, name):
        return ratio(self.conv)[0]

    track_ratio.unit = "ratio"


class PoolVersusOnnxruntime:
    """Pool compute time (no Indices), rtsoa over onnxruntime, single thread both, on the
    model layers of POOLS (`rtsoa.ops.pool_loops`: `_max_pool_3x3`'s separable maxima for the
    3 x 3 ones, `_pool_2x2`'s row pairs for the 2 x 2 ones)."""

    params = list(POOLS)
    param_names = ["pool"]
    timeout = 300

    def setup(self, name):
        op, shape, (kernel, stride, pad) = POOLS[name]
        x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
        attributes = {"kernel_shape": [kernel] * 2, "strides": [stride] * 2, "pads": [pad] * 4}
        self.pool = OneOp(op, {"x": x}, attributes)
        self.pool.check()

    def track_ratio(self, name):
        return ratio(self.pool)[0]

    track_ratio.unit = "ratio"


class WinogradVersusOnnxruntime:
    """WinogradConv compute time over onnxruntime's Conv (`track_ratio`) and over rtsoa's own
    direct Conv (`track_over_direct`, im2col + GEMM) on the same layer, single thread all
    (rtsoa's BLAS limited to one thread by threadpoolctl)."""

    params = list(WINOGRAD)
    param_names = ["conv"]
    timeout = 300

    def setup(self, name):
        self.winograd, self.direct = _winograd(name)
        self.winograd.check()
        self.direct.check()

    def track_ratio(self, name):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):  # rtsoa's BLAS on one thread, whatever the environment
            return ratio(self.winograd, rounds=9, repeats=5)[0]

    def track_over_direct(self, name):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            return ratio(self.winograd, rounds=9, repeats=5, baseline=self.direct.rtsoa)[0]

    track_ratio.unit = "ratio"
    track_over_direct.unit = "ratio"


def main():
    """Print each Conv's times and ratio, then WinogradConv's."""
    for name in CONVS:
        conv = _conv(name)
        conv.check()
        value, mine, reference = ratio(conv)
        print(
            f"Conv {name:28} rtsoa {mine * 1e6:7.0f} us  onnxruntime {reference * 1e6:7.0f} us"
            f"  ratio {value:.2f}"
        )
    for name in WINOGRAD:
        winograd, direct = _winograd(name)
        winograd.check()
        value, mine, reference = ratio(winograd, rounds=9, repeats=5)
        over, _, plain = ratio(winograd, rounds=9, repeats=5, baseline=direct.rtsoa)
        print(
            f"Winograd {name:24} rtsoa {mine * 1e6:7.0f} us  onnxruntime {reference * 1e6:7.0f}"
            f" us  ratio {value:.2f}  direct Conv {plain * 1e6:7.0f} us  over it {over:.2f}"
        )


if __name__ == "__main__":
    main()
