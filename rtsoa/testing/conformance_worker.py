"""The process that runs conformance cases for `rtsoa.testing.conformance_pool`.

    python -m rtsoa.testing.conformance_worker   # started by the pool, never by hand

Requests and replies are pickles over stdin / stdout (`multiprocessing.connection` frames). A
request is (runtime, model bytes, data sets, rtol, atol) with runtime "rtsoa" or
"onnxruntime"; the reply is (status, reason) of `run_case`. Anything the runtimes print goes to
stderr, never into the frames. A runtime that kills this process or hangs is the pool's to
record (as a crash or a timeout of that case).
"""

import os
import sys
from multiprocessing.connection import Connection

import numpy as np

# Outcomes of one case in one runtime.
PASS = "pass"
REFUSED = "refused"  # refused before running: a typed error naming what is not supported
ERROR = "error"  # an error while running, or an untyped error anywhere
WRONG = "wrong"  # ran, but outputs differ from the expected ones (values, shape or dtype)
CRASH = "crash"  # the process died (set by the pool)
TIMEOUT = "timeout"  # no answer within the pool's time limit (set by the pool)
STATUSES = (PASS, REFUSED, ERROR, WRONG, CRASH, TIMEOUT)


def _is_float(dtype):
    return dtype.kind in "fc" or dtype.name in ("bfloat16",) or dtype.name.startswith("float8")


# Stored mantissa bits of the float types whose one rounding step is coarser than the runner's
# rtol: an element within one step of the expected value (at the larger magnitude of the two)
# passes, since no implementation can promise a finer result in them.
_COARSE_MANTISSA = {"bfloat16": 7, "float8_e4m3fn": 3, "float8_e4m3fnuz": 3}
_COARSE_MANTISSA.update({"float8_e5m2": 2, "float8_e5m2fnuz": 2, "float4_e2m1fn": 1})


def _within_one_step(have64, want64, mantissa):
    """Elementwise: |have - want| <= one step of a float with `mantissa` stored bits at the
    larger magnitude of the two."""
    magnitude = np.maximum(np.abs(have64), np.abs(want64))
    with np.errstate(divide="ignore", invalid="ignore"):
        step = np.exp2(np.floor(np.log2(magnitude)) - mantissa)
    return np.abs(have64 - want64) <= np.where(magnitude > 0, step, 0.0)


# Ops whose outputs are random draws: a case using one is judged by its outputs' element types
# and shapes only (the expected values are one draw of the reference's generator).
RANDOM_OPS = frozenset(
    {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform"}
    | {"RandomUniformLike"}
)


def compare(name, have, want, rtol, atol, values=True):
    """None if `have` matches `want` (arrays, lists of them for sequences, None for an empty
    optional), else what differs: dtypes and shapes exactly, floats within rtol / atol (NaN
    where NaN is expected; for bfloat16, float8 and float4 also within one rounding step of
    the type), everything else exactly; without `values`, dtypes and shapes only."""
    if want is None or have is None:
        return None if want is None and have is None else f"{name}: {have!r} != {want!r}"
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            got = len(have) if isinstance(have, list) else type(have).__name__
            return f"{name}: a sequence of {len(want)} expected, got {got}"
        for index, (item, expected) in enumerate(zip(have, want, strict=True)):
            problem = compare(f"{name}[{index}]", item, expected, rtol, atol, values)
            if problem:
                return problem
        return None
    have, want = np.asarray(have), np.asarray(want)
    if have.dtype != want.dtype:
        return f"{name}: dtype {have.dtype} != {want.dtype}"
    if have.shape != want.shape:
        return f"{name}: shape {have.shape} != {want.shape}"
    if not values:
        return None
    if _is_float(want.dtype):
        have64, want64 = have.astype(np.float64), want.astype(np.float64)
        close = np.isclose(have64, want64, rtol=rtol, atol=atol, equal_nan=True)
        mantissa = _COARSE_MANTISSA.get(want.dtype.name)
        if mantissa is not None:
            close |= _within_one_step(have64, want64, mantissa)
        if not close.all():
            worst = int(np.argmax(~close.ravel()))
            return (
                f"{name}: {int((~close).sum())} of {close.size} elements differ, e.g. "
                f"{have64.ravel()[worst]!r} != {want64.ravel()[worst]!r}"
            )
        return None
    if not np.array_equal(have, want):
        different = have != want
        worst = int(np.argmax(different.ravel()))
        return (
            f"{name}: {int(different.sum())} of {different.size} elements differ, e.g. "
            f"{have.ravel()[worst]!r} != {want.ravel()[worst]!r}"
        )
    return None


def _one_line(error):
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:400]}"


def _judge(runner, input_names, output_names, data_sets, rtol, atol, values=True):
    from rtsoa.errors import LoweringError

    for inputs, expected in data_sets:
        feeds = dict(zip(input_names, inputs, strict=False))
        try:
            got = runner(feeds)
        except LoweringError:  # a run that lowers first (`_run_sequences`): a refusal
            raise
        except Exception as error:
            return ERROR, f"run: {_one_line(error)}"
        for name, want in zip(output_names, expected, strict=False):
            if name not in got:
                return WRONG, f"{name}: not returned"
            problem = compare(name, got[name], want, rtol, atol, values)
            if problem:
                return WRONG, problem
    return PASS, ""


def _run_sequences(model_bytes, input_names, output_names, data_sets, rtol, atol, values):
    """A model with sequence or optional inputs or outputs, through the session that lowers
    it per run's sequences: a refusal comes with the first run."""
    from rtsoa.errors import LoweringError, ModelInputError
    from rtsoa.runtime.inference import InferenceSession

    try:
        session = InferenceSession(model_bytes)
    except (LoweringError, ModelInputError) as error:
        return REFUSED, " ".join(str(error).split())[:400]
    except Exception as error:
        return ERROR, f"lowering: {_one_line(error)}"

    try:
        return _judge(
            session.execute_sync, input_names, output_names, data_sets, rtol, atol, values
        )
    except LoweringError as error:  # a specialisation's lowering, carried past `_judge`
        return REFUSED, " ".join(str(error).split())[:400]
    finally:
        session.close()


def _run_rtsoa(model_bytes, input_names, output_names, data_sets, rtol, atol, values):
    import onnx

    from rtsoa.errors import LoweringError, ModelInputError
    from rtsoa.lowering import lower
    from rtsoa.lowering.sequence_io import takes_sequences
    from rtsoa.runtime.model import ModelExecutor

    if takes_sequences(onnx.load_from_string(model_bytes)):
        return _run_sequences(model_bytes, input_names, output_names, data_sets, rtol, atol, values)
    try:
        executor = ModelExecutor(lower(model_bytes)).load()
    except (LoweringError, ModelInputError) as error:
        return REFUSED, " ".join(str(error).split())[:400]
    except Exception as error:  # a refusal must be typed: anything else is a bug
        return ERROR, f"lowering: {_one_line(error)}"
    try:
        return _judge(
            executor.execute_sync, input_names, output_names, data_sets, rtol, atol, values
        )
    finally:
        executor.unload()


def _run_onnxruntime(model_bytes, input_names, output_names, data_sets, rtol, atol, values):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    try:
        session = onnxruntime.InferenceSession(
            model_bytes, options, providers=["CPUExecutionProvider"]
        )
    except Exception as error:
        return REFUSED, _one_line(error)

    def run(feeds):
        return dict(zip(output_names, session.run(output_names, feeds), strict=True))

    return _judge(run, input_names, output_names, data_sets, rtol, atol, values)


RUNTIMES = {"rtsoa": _run_rtsoa, "onnxruntime": _run_onnxruntime}


def run_case(runtime, model_bytes, data_sets, rtol, atol):
    """(status, reason) of one case (a serialized model and its [(inputs, outputs)] data
    sets) in `runtime`; a case using a random op (RANDOM_OPS) is judged by its outputs'
    element types and shapes only."""
    import onnx

    graph = onnx.load_from_string(model_bytes).graph
    initialized = {tensor.name for tensor in graph.initializer}
    input_names = [value.name for value in graph.input if value.name not in initialized]
    output_names = [value.name for value in graph.output]
    values = not any(node.op_type in RANDOM_OPS for node in graph.node)
    return RUNTIMES[runtime](model_bytes, input_names, output_names, data_sets, rtol, atol, values)


def warm_up():
    """Lower and run one small model, so that loading (on a cold cache: compiling) the op
    library and the executors is done before the first case, within its longer time limit."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "warm_up", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    data_sets = [([np.array([-1.0, 2.0], np.float32)], [np.array([0.0, 2.0], np.float32)])]
    return run_case("rtsoa", model.SerializeToString(), data_sets, 0.0, 0.0)


def main():
    replies = Connection(os.dup(sys.stdout.fileno()), readable=False)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    requests = Connection(os.dup(sys.stdin.fileno()), writable=False)
    warm_up()  # whatever it finds is found again by the cases that need it
    while True:
        try:
            request = requests.recv()
        except EOFError:
            return 0
        replies.send(run_case(*request))


if __name__ == "__main__":
    sys.exit(main())
