"""ONNX import: an `onnx.ModelProto` (or a path, or bytes) into a ComputeGraph.

The `onnx` package reads the file (external-data files in its directory included; for bytes or
a ModelProto only from a `base_dir` the caller names) and runs its shape inference so
intermediate tensors get dtypes and shapes where ONNX can tell. Initializers become
constants; attributes become Python values (ints, floats, strs, lists, numpy arrays for tensor
attributes, ComputeGraphs for If / Loop bodies). Symbolic dims keep their names ("batch");
anonymous unknown dims are None. Values typed as sequences of tensors are marked
(`Tensor.sequence`, for rtsoa.lowering.sequences); in If / Loop subgraphs an optional is typed
as its element; other non-tensor types are refused.

Any default-domain opset the installed `onnx` defines is accepted; whether each node's op
definition at that opset is one rtsoa implements is decided op by op at conversion
(`rtsoa.lowering.converters.changed_definition`). A model importing no default-domain opset
(only `ai.onnx.ml` or training ops, say) is accepted, and a default-domain node in it refused.
"""

import math
import os

import numpy as np

from rtsoa.abi.dtypes import DTYPE_OF_ONNX
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.compute_graph import ComputeGraph, Node, Tensor, sort_nodes

ONNX_STRING = 8  # TensorProto.STRING: string tensors are host values (rtsoa.host)

OLDEST_OPSET = 1  # the oldest default-domain opset the importer accepts


def supported_opsets():
    """(oldest, newest) default-domain opset versions the importer accepts: 1 to the newest
    the installed `onnx` defines (its op schemas are what the per-op check reads)."""
    import onnx

    return OLDEST_OPSET, int(onnx.defs.onnx_opset_version())


def onnx_dtype(code, where):
    """rtsoa DType of an ONNX element type code, or LoweringError naming `where`."""
    mapped = DTYPE_OF_ONNX.get(int(code))
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


_MAP_KEYS = {7: "int64", ONNX_STRING: "string"}  # TensorProto codes of the keys rtsoa maps take


def _map_sequence(graph, name, map_type, where):
    """The Tensor of a sequence of maps {int64 or string: float} (ZipMap's output), a host
    value (`rtsoa.host.maps`); LoweringError for other maps."""
    key = _MAP_KEYS.get(map_type.key_type)
    value = map_type.value_type
    if key is None or value.tensor_type.elem_type != 1:  # TensorProto.FLOAT
        raise LoweringError(
            f"{where} {name!r}: only sequences of maps from int64 or string to float are "
            "supported (ZipMap's output)"
        )
    tensor = graph.tensor(name)
    tensor.maps = key
    return tensor


def _value_info(graph, tensor_proto_info, where, optional=False):
    """The Tensor of a declared value; with `optional` (subgraph values), an optional type is
    its element's (rtsoa holds a present optional as its value)."""
    type_proto = tensor_proto_info.type
    if optional and type_proto.HasField("optional_type"):
        type_proto = type_proto.optional_type.elem_type
    sequence = type_proto.HasField("sequence_type")
    if sequence:  # a sequence of tensors: its Tensor carries the elements' type
        type_proto = type_proto.sequence_type.elem_type
    if sequence and type_proto.HasField("map_type") and where != "input":
        return _map_sequence(graph, tensor_proto_info.name, type_proto.map_type, where)
    if not type_proto.HasField("tensor_type"):
        raise LoweringError(
            f"{where} {tensor_proto_info.name!r}: only tensor values and sequences of tensors "
            "are supported"
        )
    elem = type_proto.tensor_type.elem_type
    tensor = graph.tensor(tensor_proto_info.name)
    if elem == ONNX_STRING:
        if sequence:
            raise LoweringError(
                f"{where} {tensor_proto_info.name!r}: sequences of strings are not supported"
            )
        tensor.string = True
        elem = 0
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
    from onnx import AttributeProto, helper

    kind = attribute.type
    if kind == AttributeProto.TENSOR:
        label = f"{where}: attribute {attribute.name!r}"
        if attribute.t.data_type != ONNX_STRING:
            onnx_dtype(attribute.t.data_type, label)
        return _tensor_data(attribute.t, label)
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


def _tensor_data(tensor, where):
    """The numpy array of a TensorProto whose data is in the model (load_onnx read any external
    data already), or LoweringError naming `where`."""
    from onnx import external_data_helper, numpy_helper

    if external_data_helper.uses_external_data(tensor):  # never read relative to the cwd
        raise LoweringError(f"{where}: external data was not loaded (no base directory)")
    try:
        data = numpy_helper.to_array(tensor)
        if tensor.data_type == ONNX_STRING:  # object arrays of str, as host values are
            data = _decoded(data)
        return data
    except Exception as error:  # a size that does not match the dims, an unknown type, ...
        raise LoweringError(f"{where}: unreadable tensor data ({error})") from None


def _decoded(data):
    """A string tensor's data as a numpy object array of str (ONNX stores UTF-8 bytes)."""
    out = np.empty(data.size, dtype=object)
    out[:] = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in data.ravel()]
    return out.reshape(data.shape)


def _contiguous(data):
    """A C-contiguous copy if needed, keeping the rank (ascontiguousarray makes 0-d 1-d)."""
    return np.ascontiguousarray(data).reshape(np.shape(data))


def _convert_graph(graph_proto, opsets, where="graph", initializer_protos=None):
    """`initializer_protos`: the graph's initializers where `graph_proto` is a copy without
    its large ones (`_inferred`), else None (its own)."""
    graph = ComputeGraph(name=graph_proto.name, opsets=dict(opsets))
    initializers = set()
    scope = "" if where == "graph" else f"{where}: "
    subgraph = where != "graph"
    if initializer_protos is None:
        initializer_protos = graph_proto.initializer
    for init in initializer_protos:
        label = f"{scope}initializer {init.name!r}"
        string = init.data_type == ONNX_STRING
        # the dtype before to_array, which fails on UNDEFINED
        dtype = DType.UNDEFINED if string else onnx_dtype(init.data_type, label)
        data = _tensor_data(init, label)
        graph.tensors[init.name] = Tensor(
            init.name, dtype, tuple(int(d) for d in data.shape), _contiguous(data), string=string
        )
        initializers.add(init.name)
    for info in graph_proto.input:
        if info.name in initializers:
            continue  # an initializer listed as an input (old exporters): a constant
        _value_info(graph, info, "input", subgraph)
        graph.inputs.append(info.name)
    for info in graph_proto.value_info:
        if info.name not in initializers:
            _value_info(graph, info, "value", subgraph)
    for info in graph_proto.output:
        if info.name not in initializers:
            _value_info(graph, info, "output", subgraph)
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


def load_onnx(source, base_dir=None, external_files=None, external_stamps=None):
    """The ModelProto of a path, bytes, or a ModelProto, its external data loaded from
    `base_dir`: by default a path's own directory; bytes and a ModelProto have none, so one
    of them with external data is refused unless `base_dir` is given (onnxruntime refuses
    them too). A given ModelProto is not modified (its external data goes into a copy).
    The real paths of the external-data files read are appended to `external_files` (a
    list) when one is given, and `external_stamps` (a dict) gets `file_stamp` of each, taken
    before the file is read. onnx refuses a location outside `base_dir` or a symlink."""
    import onnx

    if isinstance(source, onnx.ModelProto):
        model, label = source, "ModelProto"
    elif isinstance(source, bytes | bytearray):
        model, label = onnx.load_from_string(bytes(source)), "ONNX bytes"
    else:
        label = os.fspath(source)
        if not os.path.isfile(label):
            raise LoweringError(f"{label}: no such ONNX file")
        try:
            model = onnx.load(label, load_external_data=False)
        except Exception as error:  # protobuf errors have many types
            raise LoweringError(f"{label}: not a readable ONNX model ({error})") from None
        if base_dir is None:
            base_dir = os.path.dirname(label) or os.curdir
    external = external_tensor(model)
    if external is None:
        return model
    if base_dir is None:
        name, location = external
        raise LoweringError(
            f"{label}: tensor {name!r} keeps its data in external file {location!r}, and "
            "bytes or a ModelProto have no directory to read it from: pass the model's path, "
            "or base_dir= naming the directory it is relative to"
        )
    base_dir = os.fspath(base_dir)
    if not os.path.isdir(base_dir):
        raise LoweringError(f"{label}: base_dir {base_dir!r} is not a directory")
    if model is source:
        model = onnx.ModelProto()
        model.CopyFrom(source)
    paths = external_data_paths(model, base_dir)
    if external_files is not None:
        external_files.extend(paths)
    if external_stamps is not None:
        external_stamps.update((path, file_stamp(path)) for path in paths)
    try:
        onnx.load_external_data_for_model(model, base_dir)
    except Exception as error:  # onnx's checks (outside base_dir, symlink), OSError, ...
        raise LoweringError(f"{label}: external data not readable ({error})") from None
    return model


def external_tensor(model):
    """(name, location) of the first tensor of `model` whose data is in an external file, or
    None when every tensor's data is in the model."""
    import onnx

    for tensor in _tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            where = {entry.key: entry.value for entry in tensor.external_data}
            return tensor.name, where.get("location", "")
    return None


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
    """Sorted paths of the external-data files `model`'s tensors name: each location joined
    to the real path of `base` (the directory they are relative to), not resolved further,
    so reading a path again reads what the lowering would read now."""
    import onnx

    base = os.path.realpath(base)
    paths = set()
    for tensor in _tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    paths.add(os.path.normpath(os.path.join(base, entry.value)))
    return sorted(paths)


def _refuse_default_domain_nodes(graph_proto, domains):
    """LoweringError naming the first default-domain node of a model that imports no
    default-domain opset (its ops' definitions are then unknown)."""
    for index, node in enumerate(graph_proto.node):
        if node.domain in ("", "ai.onnx"):
            name = f" {node.name!r}" if node.name else ""
            raise LoweringError(
                f"{node.op_type} node{name} (#{index}): the model imports no default-domain "
                f"opset (only {', '.join(domains) or 'none'}), so the op has no definition"
            )


INFERENCE_INLINE_ELEMENTS = 1024  # larger initializers reach shape inference as typed inputs


def _inferred(model):
    """`model` with the shapes ONNX's shape inference adds, computed on a copy that carries
    the large initializers (more than INFERENCE_INLINE_ELEMENTS elements: weights, never a
    shape operand) as typed graph inputs without their data, so that inference does not copy
    a model's weights twice (it serialises its input and parses its result). The copy's
    top-level initializers are then not the model's: read those from `model`. `model` itself
    where inference fails (its declared shapes are kept)."""
    import onnx
    from onnx import helper

    large = [
        init
        for init in model.graph.initializer
        if math.prod(init.dims) > INFERENCE_INLINE_ELEMENTS and init.data_type != ONNX_STRING
    ]
    if large:
        listed = {info.name for info in model.graph.input}
        names = {init.name for init in large}
        stripped = onnx.ModelProto()
        _copy_fields(model, stripped, skip=("graph",))
        _copy_fields(model.graph, stripped.graph, skip=("initializer",))
        stripped.graph.initializer.extend(
            init for init in model.graph.initializer if init.name not in names
        )
        stripped.graph.input.extend(
            helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
            for init in large
            if init.name not in listed
        )
    try:
        return onnx.shape_inference.infer_shapes(stripped if large else model, strict_mode=False)
    except Exception:  # keep the declared shapes when ONNX cannot infer more
        return model


def _copy_fields(source, target, skip):
    """Copy every set field of protobuf message `source` into `target` but those in `skip`."""
    for field, value in source.ListFields():
        if field.name in skip:
            continue
        if hasattr(getattr(target, field.name), "extend"):  # a repeated field
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def import_onnx(source, infer_shapes=True, base_dir=None):
    """A ComputeGraph from an ONNX model (path, bytes or ModelProto); `base_dir`: where its
    external data is (see load_onnx). Nodes come in a topological order (sorted if the model
    lists them otherwise, as onnxruntime does); a cycle, a tensor nothing defines or an
    unreadable initializer is a LoweringError naming it."""
    model = load_onnx(source, base_dir=base_dir)
    opsets = {entry.domain or "": int(entry.version) for entry in model.opset_import}
    if not opsets:  # onnx's checker refuses this too (IR version 3 on)
        raise LoweringError("the model imports no opset (its opset_import is empty)")
    if "" in opsets or "ai.onnx" in opsets:
        version = opsets.get("", opsets.get("ai.onnx", 0))
        oldest, newest = supported_opsets()
        if not oldest <= version <= newest:
            raise LoweringError(
                f"default-domain opset {version} is not supported (rtsoa imports opsets "
                f"{oldest} to {newest}, the newest the installed onnx package defines)"
            )
    else:
        _refuse_default_domain_nodes(model.graph, sorted(opsets))
    inferred = _inferred(model) if infer_shapes else model
    graph = _convert_graph(inferred.graph, opsets, initializer_protos=model.graph.initializer)
    graph.name = model.graph.name or "model"
    sort_nodes(graph)
    return graph
