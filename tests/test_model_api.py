"""The model API: load_executor, ModelExecutor's async execute and queries,
output buffers and the I/O address-reuse check, external allocators, SharedWeights, StreamExecutor.

Outputs are judged against a numpy evaluation of the MLP's ONNX initializers (float32,
tolerance rtol 1e-4 / atol 1e-5, as tests/test_models.py against onnxruntime).
"""

import re
import threading

import numpy as np
import pytest
from onnx import helper, numpy_helper

import rtsoa
from rtsoa.device.allocators import ExternalAllocator
from rtsoa.errors import ModelInputError
from rtsoa.executors import KernelError, Profiler
from rtsoa.graph.io import save_graph
from rtsoa.lowering import lower
from rtsoa.runtime import (
    IndexPool,
    ModelExecutor,
    ModelResourceError,
    ModelStateError,
    SharedWeights,
    StreamExecutor,
    load_executor,
)
from rtsoa.runtime.shared_weights import SessionStateError, model_device
from rtsoa.testing.models import FLOAT, mlp, model

RTOL, ATOL = 1e-4, 1e-5


def mlp_reference(proto, x):
    """The MLP of rtsoa.testing.models.mlp in numpy (MatMul + Add + Relu layers, then Gemm)."""
    weights = {init.name: numpy_helper.to_array(init) for init in proto.graph.initializer}
    h = x
    layer = 0
    while f"W{layer}" in weights:
        h = np.maximum(h @ weights[f"W{layer}"] + weights[f"b{layer}"], 0)
        layer += 1
    return h @ weights["Wout"].T + weights["bout"]


@pytest.fixture(scope="module")
def mlp_graph():
    proto = mlp()
    return proto, lower(proto)


def two_outputs():
    return model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])],
        [("x", FLOAT, ["n", 4])],
        [("a", FLOAT, ["n", 4]), ("b", FLOAT, ["n", 4])],
    )


# -- 1. loading ---------------------------------------------------------------------------------
def test_load_executor_from_file_bytes_proto_directory_and_graph(mlp_graph, tmp_path):
    proto, graph = mlp_graph
    onnx_path = tmp_path / "mlp.onnx"
    onnx_path.write_bytes(proto.SerializeToString())
    saved = save_graph(graph, tmp_path / "mlp.rtsoa")
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    want = mlp_reference(proto, x)
    sources = [str(onnx_path), proto.SerializeToString(), proto, saved, graph]
    for source in sources:
        with load_executor(source, executor="sequential") as executor:
            assert executor.main.name == "sequential"
            np.testing.assert_allclose(executor.execute_sync({"x": x})["y"], want, RTOL, ATOL)
    with pytest.raises(ModelInputError, match="no such file or directory"):
        load_executor(str(tmp_path / "missing.onnx"))
    with pytest.raises(ModelInputError, match="not an ONNX model: Error parsing message"):
        load_executor(b"garbage")
    with pytest.raises(ModelInputError, match="a model is an ExecuteGraph, .* got int"):
        load_executor(123)
    with pytest.raises(ValueError, match="unknown executor 'bogus'"):
        load_executor(graph, executor="bogus")
    assert rtsoa.load_executor is load_executor


def test_is_dynamic_for_models_executors_and_onnx(mlp_graph, tmp_path):
    proto, graph = mlp_graph
    static = model(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", FLOAT, [2, 3])], [("y", FLOAT, [2, 3])]
    )
    path = tmp_path / "static.onnx"
    path.write_bytes(static.SerializeToString())
    assert rtsoa.is_dynamic(proto) and rtsoa.is_dynamic(proto.SerializeToString())
    assert not rtsoa.is_dynamic(static) and not rtsoa.is_dynamic(str(path))
    assert rtsoa.is_dynamic(graph)
    with load_executor(graph, load=False) as executor:
        assert rtsoa.is_dynamic(executor) and executor.describe()["is_dynamic"]
    with pytest.raises(ModelInputError, match="bytes are not an ONNX model"):
        rtsoa.is_dynamic(b"\xff\xfe not onnx")
    with pytest.raises(ModelInputError, match="is_dynamic takes an ExecuteGraph"):
        rtsoa.is_dynamic(42)


# -- 2. ModelExecutor: async execute, queries, external allocators ---------------------------
def test_execute_is_asynchronous_on_the_device_clock(mlp_graph):
    proto, graph = mlp_graph
    x = np.ones((8, 16), np.float32)
    with load_executor(graph) as executor:
        device = executor.device
        own = executor.streams[0]
        before = device.host_time
        run = executor.execute({"x": x})
        assert device.stream_time(own) > before  # work was enqueued on the stream
        assert device.host_time == before  # the host did not wait for it
        assert not run.done()
        outputs = run.result()  # waits: host clock reaches the run's completion
        assert run.done() and device.host_time >= device.stream_time(own)
        np.testing.assert_allclose(outputs["y"], mlp_reference(proto, x), RTOL, ATOL)
        assert executor.iterations == 1


def test_execute_on_a_caller_stream_orders_after_its_work_and_joins_it(mlp_graph):
    _, graph = mlp_graph
    with load_executor(graph) as executor:
        device = executor.device
        caller = next(s for s in range(device.num_streams) if s not in executor.streams)
        device.launch(caller, bytes_moved=1 << 30)  # a long task already on the caller stream
        busy_until = device.stream_time(caller)
        run = executor.execute({"x": np.ones((2, 16), np.float32)}, stream=caller)
        own = executor.streams[0]
        assert device.stream_time(own) > busy_until  # Main started after the caller's task
        assert device.stream_time(caller) >= device.stream_time(own)  # caller waits for Main
        assert run.stream == caller
        run.wait()
        assert device.hazard_count == 0
        for bad, message in [(device.num_streams, "is not a stream of the device"), ("1", "index")]:
            with pytest.raises(ModelInputError, match=message):
                executor.execute({"x": np.ones((2, 16), np.float32)}, stream=bad)


def test_describe_iterations_and_subscribers(mlp_graph):
    _, graph = mlp_graph
    with load_executor(graph) as executor:
        description = executor.describe()
        assert (description["stream_count"], description["notify_count"]) == (1, 0)
        assert description["event_count"] == graph.meta.event_count
        assert description["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["batch", 16]}]
        assert description["outputs"] == [{"name": "y", "dtype": "float32", "shape": ["batch", 4]}]
        profiler = executor.add_subscriber(Profiler())
        assert executor.subscribers == (profiler,)
        executor.execute_sync({"x": np.ones((1, 16), np.float32)})
        assert (
            profiler.result is not None and profiler.by_kernel()["OpLaunch"][0] == 3
        )  # 2 x MatMulBias (MatMul, Add, Relu fused) + Gemm
        executor.remove_subscriber(profiler)
        executor.execute_sync({"x": np.ones((1, 16), np.float32)})
        assert executor.iterations == 2
        with pytest.raises(TypeError, match="must be an rtsoa.executors.Subscriber"):
            executor.add_subscriber(object())


class CountingPool(IndexPool):
    """An external allocator: hands out indices from the top, counts calls."""

    def __init__(self, kind, capacity):
        super().__init__(kind, capacity)
        self._free.reverse()
        self.calls = 0

    def acquire(self, count):
        self.calls += 1
        return super().acquire(count)


def test_external_allocators_all_or_none(mlp_graph):
    proto, graph = mlp_graph
    pools = {"stream_allocator": IndexPool("stream", 4), "event_allocator": IndexPool("event", 8)}
    with pytest.raises(
        ModelResourceError,
        match=re.escape(
            "external allocators are given all or none: got ['stream_allocator', "
            "'event_allocator'] but not ['notify_allocator']"
        ),
    ):
        ModelExecutor(graph, **pools)
    with pytest.raises(ModelResourceError, match="event_allocator must have acquire"):
        ModelExecutor(
            graph,
            stream_allocator=pools["stream_allocator"],
            event_allocator=1,
            notify_allocator=IndexPool("notify", 0),
        )
    streams, events = CountingPool("stream", 4), CountingPool("event", 64)
    x = np.ones((2, 16), np.float32)
    with load_executor(
        graph,
        stream_allocator=streams,
        event_allocator=events,
        notify_allocator=IndexPool("notify", 0),
    ) as executor:
        assert executor.streams == [3] and streams.calls == 1 and events.calls == 1
        np.testing.assert_allclose(
            executor.execute_sync({"x": x})["y"], mlp_reference(proto, x), RTOL, ATOL
        )
        assert executor.device.stream_time(3) > 0  # Main ran on the allocated stream
    assert streams.available() == 4  # released at unload
    bad = IndexPool("stream", 99)
    bad._free = [50]
    with pytest.raises(
        ModelResourceError, match=r"the stream allocator returned \[50\], not streams"
    ):
        load_executor(
            graph,
            stream_allocator=bad,
            event_allocator=IndexPool("event", 4),
            notify_allocator=IndexPool("notify", 0),
        )
    with pytest.raises(ModelResourceError, match="out of events: 2 wanted, 1 of 1 free"):
        load_executor(
            graph,
            stream_allocator=IndexPool("stream", 1),
            event_allocator=IndexPool("event", 1),
            notify_allocator=IndexPool("notify", 0),
        )


class HostAllocator(ExternalAllocator):
    """An external allocator whose blocks are host arrays, not device blocks."""

    def __init__(self):
        self.blocks = {}
        super().__init__(self._new, lambda handle: self.blocks.pop(handle), self.blocks.get)

    def _new(self, nbytes):
        handle = 10**9 + len(self.blocks)
        self.blocks[handle] = np.zeros(nbytes, np.uint8)
        return handle


def test_external_memory_allocator(mlp_graph):
    proto, graph = mlp_graph
    device = model_device(graph)
    calls = []

    def alloc(nbytes):
        calls.append(nbytes)
        return device.malloc(nbytes)

    counting = ExternalAllocator(alloc, device.free, device.view)
    x = np.ones((5, 16), np.float32)
    with load_executor(graph, device=device, allocator=counting) as executor:
        got = executor.execute_sync({"x": x})["y"]
    np.testing.assert_allclose(got, mlp_reference(proto, x), RTOL, ATOL)
    assert calls == [x.nbytes]
    foreign = HostAllocator()
    with load_executor(graph, allocator=foreign) as executor:
        with pytest.raises(ModelResourceError, match="not a block of this executor's device"):
            executor.execute_sync({"x": x})
        assert not foreign.blocks  # the foreign block was freed again
    with pytest.raises(ModelResourceError, match="allocator must be a rtsoa.device.allocators"):
        ModelExecutor(graph, allocator="hbm")


# -- 3. output buffers and the I/O address-reuse check ---------------------------------------
def test_output_buffers_are_written_in_place(mlp_graph):
    proto, graph = mlp_graph
    x = np.random.default_rng(2).standard_normal((6, 16)).astype(np.float32)
    y = np.full((6, 4), np.nan, np.float32)
    with load_executor(graph) as executor:
        got = executor.execute_sync({"x": x}, outputs={"y": y})
        assert got["y"] is y
        np.testing.assert_allclose(y, mlp_reference(proto, x), RTOL, ATOL)
        strided = np.zeros((6, 8), np.float32)[:, ::2]  # a non-contiguous view is fine
        executor.execute_sync({"x": x}, outputs={"y": strided})
        np.testing.assert_allclose(strided, y, RTOL, ATOL)


def test_output_buffer_errors_name_the_output(mlp_graph):
    _, graph = mlp_graph
    x = np.ones((2, 16), np.float32)
    readonly = np.zeros((2, 4), np.float32)
    readonly.flags.writeable = False
    cases = [
        ([1, 2], "outputs must be a dict"),
        (
            {"z": np.zeros((2, 4), np.float32)},
            "unexpected output(s) ['z']; the model produces ['y']",
        ),
        ({"y": [[0.0] * 4] * 2}, "output 'y' must be a numpy array, got list"),
        ({"y": readonly}, "output 'y' is read-only"),
        (
            {"y": np.zeros((2, 4), np.float64)},
            "output 'y' has dtype float64, the model produces float32",
        ),
        (
            {"y": np.zeros((2, 4), np.float16)},
            "output 'y' has dtype float16, the model produces float32",
        ),
        (
            {"y": np.zeros(8, np.float32)},
            "output 'y' has rank 1, the model produces 2 (shape [batch, 4])",
        ),
        (
            {"y": np.zeros((2, 4, 1), np.float32)},
            "output 'y' has rank 3, the model produces 2 (shape [batch, 4])",
        ),
        (
            {"y": np.zeros((3, 4), np.float32)},
            "output 'y' has shape (3, 4), the run produces [batch, 4] = [2, 4] (axis 0)",
        ),
        (
            {"y": np.zeros((2, 5), np.float32)},
            "output 'y' has shape (2, 5), the run produces [batch, 4] = [2, 4] (axis 1)",
        ),
        (
            {"y": np.zeros((1, 4), np.float32)},
            "output 'y' has shape (1, 4), the run produces [batch, 4] = [2, 4] (axis 0)",
        ),
    ]
    with load_executor(graph) as executor:
        for outputs, message in cases:
            with pytest.raises(ModelInputError, match=re.escape(message)):
                executor.execute_sync({"x": x}, outputs=outputs)
        assert executor.iterations == 0  # all refused before running
        assert executor.execute_sync({"x": x})["y"].shape == (2, 4)


def test_io_address_reuse_check():
    proto = two_outputs()
    with load_executor(proto) as executor:
        x = np.arange(-8, 8, dtype=np.float32).reshape(4, 4)
        with pytest.raises(
            ModelInputError,
            match=re.escape(
                "output 'a' overlaps input 'x', which the model still reads (I/O address reuse)"
            ),
        ):
            executor.execute_sync({"x": x}, outputs={"a": x})
        rows = np.zeros((4, 4), np.float32)
        rows[:2] = x[:2]  # input: rows 0-1; output 'b': rows 1-2 of the same array
        with pytest.raises(ModelInputError, match="output 'b' overlaps input 'x'"):
            executor.execute_sync({"x": rows[:2]}, outputs={"b": rows[1:3]})
        executor.execute_sync({"x": rows[:2]}, outputs={"b": rows[2:]})  # adjacent: accepted
        np.testing.assert_array_equal(rows[2:], -x[:2])
        both = np.zeros((4, 8), np.float32)
        with pytest.raises(ModelInputError, match="output 'b' overlaps output 'a'"):
            executor.execute_sync({"x": x}, outputs={"a": both[:, :4], "b": both[:, 2:6]})
        # interleaved halves of one array do not overlap: accepted
        executor.execute_sync({"x": x}, outputs={"a": both[:, :4], "b": both[:, 4:]})
        np.testing.assert_array_equal(both[:, :4], np.maximum(x, 0))
        np.testing.assert_array_equal(both[:, 4:], -x)
        # views whose overlap numpy cannot decide within the check's work bound (they do not
        # overlap): refused, the check errs on the side of refusing
        memory = np.zeros(300_000, np.float32)
        tangled = np.lib.stride_tricks.as_strided(memory, (2000, 4), (552, 976))
        other = np.lib.stride_tricks.as_strided(memory[279:], (2000, 4), (184, 676))
        with pytest.raises(np.exceptions.TooHardError):
            np.shares_memory(tangled, other, max_work=10_000)
        with pytest.raises(ModelInputError, match="output 'a' overlaps input 'x'"):
            executor.execute_sync({"x": tangled}, outputs={"a": other})
        assert executor.iterations == 2


# -- lifecycle and sessions ----------------------------------------------------------------------
def test_session_shares_weights_uploaded_once(mlp_graph):
    proto, graph = mlp_graph
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    with SharedWeights(max_devices=1) as session:
        first = load_executor(graph, session=session)
        allocated = first.device.stats()["hbm"]["allocated_bytes.current"]
        second = load_executor(graph, session=session)
        assert second.device is first.device and session.init_runs == 1
        # the second load adds only its input staging block (512 bytes): weights referenced
        grown = first.device.stats()["hbm"]["allocated_bytes.current"] - allocated
        assert grown == 512 < allocated // 4
        assert first.streams != second.streams
        for executor in (first, second, first):
            np.testing.assert_allclose(
                executor.execute_sync({"x": x})["y"], mlp_reference(proto, x), RTOL, ATOL
            )
        with pytest.raises(
            ModelStateError, match=r"close\(\) of a session with 2 executor\(s\) still loaded"
        ):
            session.close()
        first.unload()
        second.unload()
        weights = first.device.stats()["hbm"]["allocated_bytes.current"]
        assert weights == allocated - 512  # the weights stay until close
        device = first.device
    assert device.stats()["hbm"]["allocated_bytes.current"] == 0  # DeInit at close
    assert device.hazard_count == 0
    with pytest.raises(SessionStateError, match="the session is closed"):
        ModelExecutor(graph, session=session)
    with SharedWeights() as separate:
        a, b = (load_executor(graph, session=separate) for _ in range(2))
        assert a.device is not b.device and separate.init_runs == 2
        a.unload()
        b.unload()
    with pytest.raises(ModelResourceError, match="a device or a session, not both"):
        ModelExecutor(graph, device=a.device, session=SharedWeights())


def test_private_executor_unload_runs_deinit(mlp_graph):
    _, graph = mlp_graph
    executor = load_executor(graph)
    assert executor.device.stats()["hbm"]["allocated_bytes.current"] > 0
    executor.unload()
    assert executor.device.stats()["hbm"]["allocated_bytes.current"] == 0
    with pytest.raises(ModelStateError, match="execute on a model that is unloaded"):
        executor.execute({"x": np.ones((1, 16), np.float32)})


# -- 4. StreamExecutor ---------------------------------------------------------------------------
def test_stream_executor_get_or_create_and_erase(mlp_graph):
    _, graph = mlp_graph
    with StreamExecutor(graph) as streams:
        got = []
        threads = [
            threading.Thread(target=lambda: got.append(streams.get_or_create_loaded("s")))
            for _ in range(6)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({id(executor) for executor in got}) == 1 and len(streams) == 1
        assert streams.erase("s") and not streams.erase("s")
        assert got[0].state == "unloaded"
        assert streams.get_or_create_loaded("s") is not got[0]
    with pytest.raises(ModelStateError, match="closed StreamExecutor"):
        streams.get_or_create_loaded("s")


def hammer(proto, graph, threads, iterations, stream_count, session=None):
    """`threads` threads x `iterations` execute_sync on `stream_count` streams, each call with
    its own input; every output checked against numpy. Returns the StreamExecutor's devices."""
    failures = []
    barrier = threading.Barrier(threads)
    with StreamExecutor(graph, session=session) as streams:

        def work(index):
            rng = np.random.default_rng(index)
            barrier.wait()
            try:
                for i in range(iterations):
                    batch = 1 + (index + i) % 5
                    x = rng.standard_normal((batch, 16)).astype(np.float32)
                    y = streams.execute_sync(index % stream_count, {"x": x})["y"]
                    if not np.allclose(y, mlp_reference(proto, x), rtol=RTOL, atol=ATOL):
                        failures.append((index, i))
            except Exception as error:  # reported below, not swallowed
                failures.append((index, repr(error)))

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        executors = [streams.get_or_create_loaded(s) for s in range(stream_count)]
        assert sum(e.iterations for e in executors) == threads * iterations
        devices = {id(e.device): e.device for e in executors}.values()
        assert all(device.hazard_count == 0 for device in devices)
    assert not failures, failures[:5]
    return list(devices)


def test_stream_executor_8_threads_x_500_on_4_streams(mlp_graph):
    proto, graph = mlp_graph
    devices = hammer(proto, graph, threads=8, iterations=500, stream_count=4)
    assert len(devices) == 4  # one device per stream executor: host-concurrent
    with SharedWeights(max_devices=1) as session:  # every stream on one device, weights shared
        shared = hammer(proto, graph, threads=8, iterations=100, stream_count=4, session=session)
        assert len(shared) == 1 and session.init_runs == 1


@pytest.mark.large
def test_stream_executor_repeated_without_flakiness(mlp_graph):
    proto, graph = mlp_graph
    for _ in range(5):
        hammer(proto, graph, threads=8, iterations=500, stream_count=4)
        with SharedWeights(max_devices=2) as session:
            hammer(proto, graph, threads=8, iterations=500, stream_count=4, session=session)


# -- failed runs release what they allocated ----------------------------------------------------
def mismatched_add():
    """Relu(x) + Neg(y) with x: [a], y: [b]: the inputs pass their checks, and Add's shape
    inference fails at run time when a != b, after Relu's and Neg's blocks are allocated."""
    return model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Neg", ["y"], ["s"]),
            helper.make_node("Add", ["r", "s"], ["z"]),
        ],
        [("x", FLOAT, ["a"]), ("y", FLOAT, ["b"])],
        [("z", FLOAT, ["a"])],
    )


def allocated(device):
    return device.stats()["hbm"]["allocated_bytes.current"]


def check_failures_then_success(execute, device, base):
    """5 failing executes (larger inputs than load() staged for) then a good one."""
    bad = {"x": np.ones(300, np.float32), "y": np.ones(400, np.float32)}
    for _ in range(5):
        with pytest.raises(KernelError, match="incompatible input shapes"):
            execute(bad)
        assert allocated(device) == base
    x = np.linspace(-2, 2, 3, dtype=np.float32)
    y = np.array([1.0, -1.0, 0.5], np.float32)
    np.testing.assert_array_equal(execute({"x": x, "y": y})["z"], np.maximum(x, 0) - y)
    assert allocated(device) == base


def test_failed_executes_release_their_blocks_and_staging():
    with load_executor(mismatched_add()) as executor:
        base = allocated(executor.device)  # weights (none here) and the load-time staging
        check_failures_then_success(executor.execute_sync, executor.device, base)
        check_failures_then_success(
            lambda inputs: executor.execute(inputs).result(), executor.device, base
        )
        assert executor.iterations == 2 and executor.device.hazard_count == 0


def test_failed_executes_on_stream_executor_streams_release_their_blocks():
    with (
        SharedWeights(max_devices=1) as session,
        StreamExecutor(mismatched_add(), session=session) as streams,
    ):
        for key in ("a", "b"):
            streams.get_or_create_loaded(key)
        device = session.devices[0]
        base = allocated(device)
        for key in ("a", "b"):
            check_failures_then_success(
                lambda inputs, key=key: streams.execute_sync(key, inputs), device, base
            )
