"""ONNX import: an `onnx.ModelProto` (or a path, or bytes) into a ComputeGraph.

The `onnx` package reads the file (external-data files next to it included) and runs its shape
inference so intermediate tensors get dtypes and shapes where ONNX can tell. Initializers become
constants; attributes become Python values (ints, floats, strs, lists, numpy arrays for tensor
attributes, ComputeGraphs for If / Loop bodies). Symbolic dims keep their names ("batch");
anonymous unknown dims are None. Values typed as sequences of tensors are marked
(`Tensor.sequence`, for rtsoa.lowering.sequences); other non-tensor types are refused.
"""

import os

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.compute_graph import ComputeGraph, Node, Tensor

SUPPORTED_OPSETS = (1, 25)  # default-domain opset versions the importer accepts


def _dtype_map():
    from onnx import TensorProto

    return {
        TensorProto.FLOAT: DType.FLOAT32,
        TensorProto.DOUBLE: DType.FLOAT64,
        TensorProto.FLOAT16: DType.FLOAT16,
        TensorProto.INT8: DType.INT8,
        TensorProto.INT16: DType.INT16,
        TensorProto.INT32: DType.INT32,
        TensorProto.INT64: DType.INT64,
        TensorProto.UINT8: DType.UINT8,
        TensorProto.BOOL: DType.BOOL,
    }


def onnx_dtype(code, where):
    """rtsoa DType of an ONNX element type code, or LoweringError naming `where`."""
    mapped = _dtype_map().get(int(code))
    if mapped is None:
        from onnx import TensorProto

        name = (
            TensorProto.DataType.Name(int(code)) if code in TensorProto.DataType.values() else code
        )
        raise LoweringError(f"{where}: element type {name} is not supported")
    return mapped


def _dims_of(type_proto):
    tensor_type = type_proto.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    dims = []
    for d in tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(str(d.dim_param))
        else:
            dims.append(None)
    return tuple(dims)


def _value_info(graph, tensor_proto_info, where):
    type_proto = tensor_proto_info.type
    sequence = type_proto.HasField("sequence_type")
    if sequence:  # a sequence of tensors: its Tensor carries the elements' type
        type_proto = type_proto.sequence_type.elem_type
    if not type_proto.HasField("tensor_type"):
        raise LoweringError(
            f"{where} {tensor_proto_info.name!r}: only tensor values and sequences of tensors "
            "are supported"
        )
    elem = type_proto.tensor_type.elem_type
    tensor = graph.tensor(tensor_proto_info.name)
    if sequence:
        tensor.sequence = True
        if elem:
            tensor.dtype = onnx_dtype(elem, f"{where} {tensor_proto_info.name!r}")
        return tensor
    if elem:
        tensor.dtype = onnx_dtype(elem, f"{where} {tensor_proto_info.name!r}")
    dims = _dims_of(type_proto)
    if dims is not None:
        tensor.dims = dims
    return tensor


def _attribute_value(attribute, where, opsets):
    from onnx import AttributeProto, helper, numpy_helper

    kind = attribute.type
    if kind == AttributeProto.TENSOR:
        return numpy_helper.to_array(attribute.t)
    if kind == AttributeProto.GRAPH:
        return _convert_graph(attribute.g, opsets, where=f"{where} attribute {attribute.name!r}")
    if kind == AttributeProto.STRING:
        return attribute.s.decode("utf-8", "replace")
    if kind == AttributeProto.STRINGS:
        return [s.decode("utf-8", "replace") for s in attribute.strings]
    if kind in (AttributeProto.SPARSE_TENSOR, AttributeProto.GRAPHS, AttributeProto.TENSORS):
        raise LoweringError(f"{where}: attribute {attribute.name!r} of this kind is not supported")
    value = helper.get_attribute_value(attribute)
    if isinstance(value, list):
        return [v for v in value]
    return value


def _contiguous(data):
    """A C-contiguous copy if needed, keeping the rank (ascontiguousarray makes 0-d 1-d)."""
    return np.ascontiguousarray(data).reshape(np.shape(data))


def _convert_graph(graph_proto, opsets, where="graph"):
    from onnx import numpy_helper

    graph = ComputeGraph(name=graph_proto.name, opsets=dict(opsets))
    initializers = set()
    for init in graph_proto.initializer:
        data = numpy_helper.to_array(init)
        dtype = onnx_dtype(init.data_type, f"initializer {init.name!r}")
        graph.tensors[init.name] = Tensor(
            init.name, dtype, tuple(int(d) for d in data.shape), _contiguous(data)
        )
        initializers.add(init.name)
    for info in graph_proto.input:
        if info.name in initializers:
            continue  # an initializer listed as an input (old exporters): a constant
        _value_info(graph, info, "input")
        graph.inputs.append(info.name)
    for info in graph_proto.value_info:
        if info.name not in initializers:
            _value_info(graph, info, "value")
    for info in graph_proto.output:
        if info.name not in initializers:
            _value_info(graph, info, "output")
        graph.outputs.append(info.name)
    for index, node_proto in enumerate(graph_proto.node):
        node = Node(
            op_type=node_proto.op_type,
            inputs=list(node_proto.input),
            outputs=list(node_proto.output),
            name=node_proto.name,
            domain=node_proto.domain if node_proto.domain != "ai.onnx" else "",
        )
        label = node.describe(index)
        for attribute in node_proto.attribute:
            value = _attribute_value(attribute, label, opsets)
            if isinstance(value, ComputeGraph):
                node.subgraphs[attribute.name] = value
            else:
                node.attributes[attribute.name] = value
        for name in node.inputs + node.outputs:
            if name:
                graph.tensor(name)
        graph.nodes.append(node)
    return graph


def load_onnx(source, external_files=None, external_stamps=None):
    """The ModelProto of a path, bytes, or a ModelProto (external data loaded from the
    model's directory). For a path, the real paths of the external-data files it reads are
    appended to `external_files` (a list) when one is given, and `external_stamps` (a dict)
    gets `file_stamp` of each, taken before the file is read."""
    import onnx

    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, bytes | bytearray):
        return onnx.load_from_string(bytes(source))
    path = os.fspath(source)
    if not os.path.isfile(path):
        raise LoweringError(f"{path}: no such ONNX file")
    try:
        model = onnx.load(path, load_external_data=False)
        base = os.path.dirname(path)
        paths = external_data_paths(model, base)
        if external_files is not None:
            external_files.extend(paths)
        if external_stamps is not None:
            external_stamps.update((path, file_stamp(path)) for path in paths)
        onnx.load_external_data_for_model(model, base)
        return model
    except Exception as error:  # protobuf errors have many types
        raise LoweringError(f"{path}: not a readable ONNX model ({error})") from None


def _tensors(graph):
    """Every TensorProto of a GraphProto: initializers and attribute tensors, subgraphs too."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _tensors(subgraph)


def file_stamp(path):
    """What changes when a file is written or replaced: (device, inode, size, modification and
    status-change times in ns); None if it is missing. The status-change time cannot be set
    back by a writer, so equal stamps before and after reading mean nothing wrote in between
    (to the file system's time resolution)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def external_data_paths(model, base):
    """Sorted real paths of the external-data files `model`'s tensors name (relative to
    `base`, the model file's directory)."""
    import onnx

    paths = set()
    for tensor in _tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    paths.add(os.path.realpath(os.path.join(base, entry.value)))
    return sorted(paths)


def import_onnx(source, infer_shapes=True):
    """A ComputeGraph from an ONNX model (path, bytes or ModelProto)."""
    import onnx

    model = load_onnx(source)
    opsets = {entry.domain or "": int(entry.version) for entry in model.opset_import}
    version = opsets.get("", opsets.get("ai.onnx", 0))
    if not SUPPORTED_OPSETS[0] <= version <= SUPPORTED_OPSETS[1]:
        raise LoweringError(
            f"default-domain opset {version} is not supported (rtsoa imports opsets "
            f"{SUPPORTED_OPSETS[0]} to {SUPPORTED_OPSETS[1]})"
        )
    if infer_shapes:
        try:
            model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception:  # keep the declared shapes when ONNX cannot infer more
            pass
    graph = _convert_graph(model.graph, opsets)
    graph.name = model.graph.name or "model"
    return graph
