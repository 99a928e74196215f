"""rtsoa as an ONNX backend (`onnx.backend.base.Backend`), so that tools written against that
interface, `onnx.backend.test.BackendTest` first, run models through rtsoa:

    import onnx.backend.test
    import rtsoa.backend

    tests = onnx.backend.test.BackendTest(rtsoa.backend, __name__)
    tests.include(r"^test_relu_cpu$")
    globals().update(tests.test_cases)

    outputs = rtsoa.backend.run_model(model, [x])      # or prepare(model).run([x])

`prepare` checks the model (`onnx.checker`), lowers it and loads it on rtsoa's simulated device
(the only device: "CPU"); a model rtsoa cannot run is refused there with the LoweringError that
names the op, node, opset or dtype. `BackendRep.run` takes the inputs as a list in the order of
the graph's inputs (initializers left out) or a dict by name, and returns the outputs in the
graph's order, as a namedtuple. A model with sequence or optional graph inputs or outputs runs
in a `rtsoa.runtime.sequence_session.SequenceSession` (lowered per run's sequences, so a refusal
comes with the first run): a sequence is a list of arrays, an empty optional None.
"""

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, namedtupledict

from rtsoa.errors import ModelInputError
from rtsoa.lowering import lower
from rtsoa.lowering.onnx_import import supported_opsets
from rtsoa.lowering.sequence_io import takes_sequences
from rtsoa.runtime.inference import InferenceSession
from rtsoa.runtime.model import ModelExecutor


class RtsoaRep(BackendRep):
    """A model lowered and loaded by rtsoa, run with `run(inputs)`; `close()` (or leaving a
    `with` block) unloads it."""

    def __init__(self, executor, input_names, output_names):
        self.executor = executor
        self.input_names = input_names
        self.output_names = output_names

    def run(self, inputs, **kwargs):
        """The outputs for `inputs` (a list in graph input order, one array, or a dict)."""
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self.input_names):
                raise ModelInputError(
                    f"{len(inputs)} inputs given; the model takes {len(self.input_names)} "
                    f"({', '.join(self.input_names)})"
                )
            feeds = dict(zip(self.input_names, inputs, strict=False))
        results = self.executor.execute_sync(feeds)
        return namedtupledict("Outputs", self.output_names)(
            *(results[name] for name in self.output_names)
        )

    def close(self):
        """Unload the model (its device memory, streams and events)."""
        if self.executor.state == "loaded":
            self.executor.unload()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class RtsoaBackend(Backend):
    """The ONNX backend interface over `rtsoa.lowering.lower` and `ModelExecutor`."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        """An RtsoaRep of `model` (a ModelProto, serialized bytes or a path)."""
        if not cls.supports_device(device):
            raise ModelInputError(f"device {device!r}: rtsoa's backend runs on 'CPU' only")
        if not isinstance(model, onnx.ModelProto):
            model = onnx.load(model) if isinstance(model, str) else onnx.load_from_string(model)
        super().prepare(model, device, **kwargs)  # onnx.checker
        initialized = {tensor.name for tensor in model.graph.initializer}
        input_names = [value.name for value in model.graph.input if value.name not in initialized]
        output_names = [value.name for value in model.graph.output]
        if takes_sequences(model):  # a SequenceSession: lowered per run's sequences
            executor = InferenceSession(model)
        else:
            executor = ModelExecutor(lower(model)).load()
        return RtsoaRep(executor, input_names, output_names)

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        """The outputs of `model` for `inputs` (prepared, run once, unloaded)."""
        with cls.prepare(model, device, **kwargs) as rep:
            return rep.run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        """The outputs of one NodeProto for `inputs` (arrays for its non-empty inputs, in
        order), run as a one-node model of opset `opset_version` (default: the newest rtsoa
        imports). `outputs_info`: (numpy dtype, shape) per output, when known."""
        super().run_node(node, inputs, device, outputs_info, **kwargs)  # onnx.checker
        names = [name for name in node.input if name]
        if len(inputs) != len(names):
            raise ModelInputError(
                f"node {node.op_type!r} takes {len(names)} inputs here, {len(inputs)} given"
            )
        arrays = [_string_objects(np.asarray(value)) for value in inputs]
        graph_inputs = [
            helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape
            )
            for name, array in zip(names, arrays, strict=True)
        ]
        graph_outputs = []
        for k, name in enumerate(node.output):
            if outputs_info is not None and k < len(outputs_info):
                kind, shape = outputs_info[k]
                element = helper.np_dtype_to_tensor_dtype(np.dtype(kind))
                graph_outputs.append(helper.make_tensor_value_info(name, element, shape))
            else:
                graph_outputs.append(helper.make_empty_tensor_value_info(name))
        opset = int(kwargs.get("opset_version", supported_opsets()[1]))
        graph = helper.make_graph([node], f"{node.op_type}_node", graph_inputs, graph_outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model = onnx.shape_inference.infer_shapes(model)  # the output types not given
        return cls.run_model(model, arrays, device)

    @classmethod
    def supports_device(cls, device):
        """rtsoa runs on its simulated device, which the ONNX interface calls "CPU"."""
        return str(device).upper().split(":")[0] == "CPU"


def _string_objects(array):
    """Unicode arrays as object arrays of str, the numpy form of ONNX string tensors."""
    if array.dtype.kind != "U":
        return array
    out = np.empty(array.shape, dtype=object)
    out[...] = array.tolist() if array.ndim else array.item()
    return out


prepare = RtsoaBackend.prepare
run_model = RtsoaBackend.run_model
run_node = RtsoaBackend.run_node
supports_device = RtsoaBackend.supports_device
is_compatible = RtsoaBackend.is_compatible
