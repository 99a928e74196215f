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
from typing import NamedTuple

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


# (stored mantissa bits, rounding steps) of the float types whose rounding step is coarse next
# to the runner's rtol: an element within that many steps of the expected value (at the larger
# magnitude of the two) passes. One step for the 8- and 4-bit floats, whose expected values
# are one cast: no implementation can promise finer. Two for float16 and bfloat16: the
# generators compute their expected values with numpy in the narrow type itself (every
# product, exp, difference and, for bfloat16, partial sum rounded to it), so an expected
# value carries its own error, up to 1.7 steps from the float64 result on the half-precision
# Attention cases, where rtsoa's (float32, rounded once) is within half a step; a correctly
# rounded answer thus lies up to 2.2 steps away. A wrong mask, scale or softmax axis moves
# these values by tens of steps.
_COARSE_STEPS = {"bfloat16": (7, 2), "float16": (10, 2)}
_COARSE_STEPS.update({"float8_e4m3fn": (3, 1), "float8_e4m3fnuz": (3, 1)})
_COARSE_STEPS.update({"float8_e5m2": (2, 1), "float8_e5m2fnuz": (2, 1), "float4_e2m1fn": (1, 1)})

# Ops each of whose output elements sums a whole line of the input (the Fourier transforms):
# the reference's numpy.fft computes float32 / complex64 input in single precision, so an
# expected element whose exact value is 0 holds rounding noise of the line's magnitude
# (1.9e-07 where the float64 result is 7e-16 in test_dft_inverse, whose largest output is
# 54). There, an element passes when both it and the expected one are below one float32 step
# of the output's largest expected magnitude: zero at that output's resolution.
LINE_SUM_OPS = frozenset({"DFT", "STFT"})


def _within_steps(have64, want64, mantissa, steps):
    """Elementwise: |have - want| <= `steps` steps of a float with `mantissa` stored bits at
    the larger magnitude of the two."""
    magnitude = np.maximum(np.abs(have64), np.abs(want64))
    with np.errstate(divide="ignore", invalid="ignore"):
        step = np.exp2(np.floor(np.log2(magnitude)) - mantissa)
    return np.abs(have64 - want64) <= np.where(magnitude > 0, steps * step, 0.0)


def _both_zero_at_scale(have64, want64, dtype):
    """Elementwise: are both below one step of `dtype` at the largest expected magnitude?"""
    finite = np.abs(want64[np.isfinite(want64)])
    if finite.size == 0:
        return np.zeros(want64.shape, bool)
    floor = np.finfo(dtype).eps * finite.max()
    return (np.abs(have64) < floor) & (np.abs(want64) < floor)


# Ops whose outputs are random draws: a case using one is judged by its outputs' element types
# and shapes only (the expected values are one draw of the reference's generator).
RANDOM_OPS = frozenset(
    {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform"}
    | {"RandomUniformLike"}
)


def _draws_at_random(node):
    """Is `node` a random op, or a Dropout whose training mode is an input (true in the
    node suite's training cases: it drops elements at random)?"""
    training = node.op_type == "Dropout" and len(node.input) > 2 and bool(node.input[2])
    return node.op_type in RANDOM_OPS or training


def compare(name, have, want, rtol, atol, values=True, line_sums=False):
    """None if `have` matches `want` (arrays, lists of them for sequences, None for an empty
    optional), else what differs: dtypes and shapes exactly, floats within rtol / atol (NaN
    where NaN is expected; for float16, bfloat16, float8 and float4 also within the type's
    rounding steps of `_COARSE_STEPS`; with `line_sums`, an output of LINE_SUM_OPS, float32
    and float64 elements that both are zero at the output's scale), everything else exactly;
    without `values`, dtypes and shapes only."""
    if want is None or have is None:
        return None if want is None and have is None else f"{name}: {have!r} != {want!r}"
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            got = len(have) if isinstance(have, list) else type(have).__name__
            return f"{name}: a sequence of {len(want)} expected, got {got}"
        for index, (item, expected) in enumerate(zip(have, want, strict=True)):
            problem = compare(f"{name}[{index}]", item, expected, rtol, atol, values, line_sums)
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
        coarse = _COARSE_STEPS.get(want.dtype.name)
        if coarse is not None:
            close |= _within_steps(have64, want64, *coarse)
        if line_sums and want.dtype in (np.float32, np.float64):
            close |= _both_zero_at_scale(have64, want64, want.dtype)
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


class Judging(NamedTuple):
    """How `compare` judges a case's outputs (its arguments after the arrays)."""

    rtol: float
    atol: float
    values: bool  # False: dtypes and shapes only (a random op's case)
    line_sums: bool  # the case uses one of LINE_SUM_OPS


def _one_line(error):
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:400]}"


def _judge(runner, input_names, output_names, data_sets, judging):
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
            problem = compare(name, got[name], want, *judging)
            if problem:
                return WRONG, problem
    return PASS, ""


def _run_sequences(model_bytes, input_names, output_names, data_sets, judging):
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
        return _judge(session.execute_sync, input_names, output_names, data_sets, judging)
    except LoweringError as error:  # a specialisation's lowering, carried past `_judge`
        return REFUSED, " ".join(str(error).split())[:400]
    finally:
        session.close()


def _run_rtsoa(model_bytes, input_names, output_names, data_sets, judging):
    import onnx

    from rtsoa.errors import LoweringError, ModelInputError
    from rtsoa.lowering import lower
    from rtsoa.lowering.sequence_io import takes_sequences
    from rtsoa.runtime.model import ModelExecutor

    if takes_sequences(onnx.load_from_string(model_bytes)):
        return _run_sequences(model_bytes, input_names, output_names, data_sets, judging)
    try:
        executor = ModelExecutor(lower(model_bytes)).load()
    except (LoweringError, ModelInputError) as error:
        return REFUSED, " ".join(str(error).split())[:400]
    except Exception as error:  # a refusal must be typed: anything else is a bug
        return ERROR, f"lowering: {_one_line(error)}"
    try:
        return _judge(executor.execute_sync, input_names, output_names, data_sets, judging)
    finally:
        executor.unload()


def _run_onnxruntime(model_bytes, input_names, output_names, data_sets, judging):
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

    return _judge(run, input_names, output_names, data_sets, judging)


RUNTIMES = {"rtsoa": _run_rtsoa, "onnxruntime": _run_onnxruntime}


def run_case(runtime, model_bytes, data_sets, rtol, atol):
    """(status, reason) of one case (a serialized model and its [(inputs, outputs)] data
    sets) in `runtime`; a case using a random op (RANDOM_OPS, or Dropout with its training
    mode an input) is judged by its outputs' element types and shapes only."""
    import onnx

    graph = onnx.load_from_string(model_bytes).graph
    initialized = {tensor.name for tensor in graph.initializer}
    input_names = [value.name for value in graph.input if value.name not in initialized]
    output_names = [value.name for value in graph.output]
    values = not any(_draws_at_random(node) for node in graph.node)
    line_sums = any(node.op_type in LINE_SUM_OPS for node in graph.node)
    judging = Judging(rtol, atol, values, line_sums)
    return RUNTIMES[runtime](model_bytes, input_names, output_names, data_sets, judging)


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
