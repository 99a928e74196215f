"""Worker process of the op differential fuzzer (`test_op_differential.py`).

Reads cases from stdin and writes replies to stdout, each a pickled frame behind an 8-byte
little-endian length. A case is (serialized ONNX model, list of feeds, oracle name, options:
`streams` of the lowering, `executor` of the model); for each feed the worker runs rtsoa (the
model lowered once, run on every feed) and the oracle (onnxruntime, single thread, or
onnx.reference, which also stands in for onnxruntime where it has no kernel for the op and
dtype), announcing each step first with a ("step", runtime, feed index) frame, so that when
this process dies (a signal in either runtime) the driver names the runtime, the op and the
inputs it was running. The reply is
("done", [(rtsoa outcome, oracle outcome) per feed]); an outcome is ("ok", {name: array}),
("error", type name, message) or, where rtsoa refused the model at lowering or load,
("refused", type name, message). Stray prints go to stderr, never into the frames.
"""

import os
import pickle
import struct
import sys

import numpy as np


def _send(stream, message):
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(payload)) + payload)
    stream.flush()


def _receive(stream):
    header = stream.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack("<Q", header)
    return pickle.loads(stream.read(size))


def _error(error):
    return ("error", type(error).__name__, str(error)[:500])


def _rtsoa_runner(model_bytes, options):
    """A function feed -> outcome running the lowered model, or the lowering's error
    (a "refused" outcome). `options`: `streams` of the lowering, `executor` of the model."""
    from rtsoa.lowering import lower
    from rtsoa.runtime import load_model

    try:
        graph = lower(model_bytes, streams=options.get("streams", 1))
        model = load_model(graph, executor=options.get("executor", "auto"))
    except Exception as error:  # refused at lowering or load: every feed gets the error
        outcome = ("refused", *_error(error)[1:])
        return (lambda feeds: outcome), None

    def run(feeds):
        try:
            return ("ok", model.execute_sync(feeds))
        except Exception as error:
            return _error(error)

    return run, model


def _oracle_runner(model_bytes, oracle):
    """A function feed -> outcome of onnxruntime or onnx.reference."""
    try:
        if oracle == "reference":
            from onnx import load_from_string
            from onnx.reference import ReferenceEvaluator

            session = ReferenceEvaluator(load_from_string(model_bytes))
            names = session.output_names
        else:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
            names = [output.name for output in session.get_outputs()]
    except Exception as error:
        if oracle != "reference" and "NOT_IMPLEMENTED" in str(error):
            return _oracle_runner(model_bytes, "reference")  # no onnxruntime kernel
        outcome = _error(error)
        return lambda feeds: outcome

    def run(feeds):
        try:
            values = session.run(None, feeds)
            return ("ok", {name: np.asarray(v) for name, v in zip(names, values, strict=True)})
        except Exception as error:
            return _error(error)

    return run


def main():
    if os.environ.get("RTSOA_MUTATION_STAMP_FILE"):  # as tests/conftest.py does (mutation runs)
        from rtsoa._numba.caching import set_package_source_stamp

        with open(os.environ["RTSOA_MUTATION_STAMP_FILE"]) as stamp_file:
            set_package_source_stamp(stamp_file.read().strip())
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    requests = sys.stdin.buffer
    while True:
        case = _receive(requests)
        if case is None:
            return
        model_bytes, feeds_list, oracle, options = case
        _send(replies, ("step", "rtsoa lowering", -1))
        run_rtsoa, model = _rtsoa_runner(model_bytes, options)
        _send(replies, ("step", f"{oracle} session", -1))
        run_oracle = _oracle_runner(model_bytes, oracle)
        results = []
        for index, feeds in enumerate(feeds_list):
            _send(replies, ("step", "rtsoa", index))
            mine = run_rtsoa(feeds)
            _send(replies, ("step", oracle, index))
            results.append((mine, run_oracle(feeds)))
        if model is not None:
            model.unload()
        _send(replies, ("done", results))


if __name__ == "__main__":
    main()
