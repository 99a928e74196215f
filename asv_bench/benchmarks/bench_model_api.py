"""The model API's per-call overhead: `execute_sync` over the bare executor run.

An overhead-bound model (one Relu on a [1, 4] float32 tensor: the run itself is a handful of
nodes) is run two ways, interleaved in one process:
- `execute_sync({"x": x})`: input checks, input block malloc + copy, Main's run, output copy
  out and frees, completion events and the wait (the whole user call);
- the bare run: `model.main.run()` on an input block prepared once (its handle stored in the
  input's slot), then the free of the output block Main allocated (needed to run again).
`track_overhead_us` is the difference of the medians in microseconds (target < 20 us);
`track_overhead_ratio` is execute_sync's median over the bare run's.

Reproduce: `cd asv_bench && asv run --python=same --quick -b bench_model_api`, or
`python -m asv_bench.benchmarks.bench_model_api` from the repository root for a quick figure.
"""

import time

import numpy as np


def _model():
    from onnx import helper

    from rtsoa.testing.models import FLOAT, model

    return model(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", FLOAT, [1, 4])], [("y", FLOAT, [1, 4])]
    )


class ExecuteSyncOverhead:
    timeout = 600

    def setup(self):
        from rtsoa.graph.schema import MAX_RANK
        from rtsoa.kernels.abi import SHAPE_DIMS, SHAPE_DTYPE, SHAPE_RANK
        from rtsoa.runtime import load_executor

        self.model = load_executor(_model())
        self.inputs = {"x": np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)}
        got = self.model.execute_sync(self.inputs)["y"]
        assert np.array_equal(got, np.maximum(self.inputs["x"], 0))
        # the bare run: an input block prepared once, Main run, its output block freed
        model = self.model
        name, block, shape, dtype, _ = model.inputs[0]
        x = self.inputs[name]
        self.handle = model.device.malloc(x.nbytes, stream=model.streams[0])
        model.device.view(self.handle)[:] = x.view(np.uint8).reshape(-1)
        values = model.values
        values.slots[block] = self.handle
        values.slots[shape] = x.nbytes
        values.shapes[shape, SHAPE_RANK] = x.ndim
        values.shapes[shape, SHAPE_DTYPE] = int(dtype)
        values.shapes[shape, SHAPE_DIMS : SHAPE_DIMS + MAX_RANK] = 0
        values.shapes[shape, SHAPE_DIMS : SHAPE_DIMS + x.ndim] = x.shape
        self.out_block = model.outputs[0][1]
        self.in_block = block
        self.bare()
        assert model.device.hazard_count == 0

    def teardown(self):
        self.model.device.free(self.handle, self.model.streams[0])
        self.model.unload()

    def bare(self):
        model = self.model
        model.values.slots[self.in_block] = self.handle  # execute_sync's own block was freed
        model.main.run()
        model.device.free(int(model.values.slots[self.out_block]), model.streams[0])

    def call(self):
        self.model.execute_sync(self.inputs)

    def medians(self, rounds=15, calls=200):
        call, bare = [], []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(calls):
                self.call()
            call.append((time.perf_counter() - start) / calls)
            start = time.perf_counter()
            for _ in range(calls):
                self.bare()
            bare.append((time.perf_counter() - start) / calls)
        return float(np.median(call)), float(np.median(bare))

    def time_execute_sync(self):
        self.call()

    def time_bare_run(self):
        self.bare()

    def track_overhead_us(self):
        call, bare = self.medians()
        return (call - bare) * 1e6

    track_overhead_us.unit = "us"

    def track_overhead_ratio(self):
        call, bare = self.medians()
        return call / bare

    track_overhead_ratio.unit = "ratio"


if __name__ == "__main__":
    bench = ExecuteSyncOverhead()
    bench.setup()
    call, bare = bench.medians()
    print(
        f"execute_sync {call * 1e6:.1f} us, bare run {bare * 1e6:.1f} us, "
        f"overhead {(call - bare) * 1e6:.1f} us (ratio {call / bare:.2f})"
    )
    bench.teardown()
