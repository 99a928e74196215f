"""The ai.onnx.ml feature transforms, composed at lowering of rtsoa's ops (exact: each is the
same float32 / float64 arithmetic onnxruntime does): Binarizer, ArrayFeatureExtractor, Scaler,
Normalizer, Imputer, OneHotEncoder (int64 categories) and FeatureVectorizer (the linear models:
`rtsoa.lowering.ml_linear`).

What each refuses, naming the node: string inputs or categories (those run on the host:
LabelEncoder); an element type the op does not define; attributes of the wrong length for the
input's last dimension when it is known; OneHotEncoder with zeros=0 (an error at run time on
an unknown category, which rtsoa's ops do not raise); FeatureVectorizer inputs whose widths
differ from inputdimensions.
"""

import numpy as np

from rtsoa.abi.dtypes import DTYPES
from rtsoa.graph.schema import DType
from rtsoa.lowering.ml_domain import SAME_AS_X, attribute, refuse, register_ml_converter

_FLOATS = (DType.FLOAT32, DType.FLOAT64)
NUMBERS = (DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64)
_ONNX_FLOAT = 1  # TensorProto.FLOAT
_NUMPY = {
    DType.FLOAT32: np.float32,
    DType.FLOAT64: np.float64,
    DType.INT32: np.int32,
    DType.INT64: np.int64,
}


def typed_input(ctx, node, position, allowed):
    """Input `position`'s name and DType, refused unless its type is known and allowed."""
    name = node.inputs[position]
    dtype = ctx.tensor(name).dtype
    if dtype == DType.UNDEFINED:
        refuse(ctx, node, f"the element type of input {name!r} is not known at lowering")
    if dtype not in allowed:
        names = ", ".join(DType(d).name.lower() for d in allowed)
        refuse(ctx, node, f"input {name!r} is {DType(dtype).name.lower()}; the op takes {names}")
    return name, DType(dtype)


def constant(ctx, prefix, array):
    name = ctx.fresh_name(prefix)
    ctx.set_constant(name, np.asarray(array))
    return name


def as_float32(ctx, x, dtype):
    """`x` as float32 (a Cast unless it is float32 already)."""
    if dtype == DType.FLOAT32:
        return x
    cast = ctx.fresh_name("float")
    ctx.emit("Cast", [x], [cast], {"to": _ONNX_FLOAT})
    return cast


def _last_dim(ctx, name):
    dims = ctx.tensor(name).dims
    if dims and isinstance(dims[-1], int):
        return dims[-1]
    return None


def _per_feature(ctx, node, x, values, what):
    """`values` (one, or one per feature of x's last dim) as a float32 array."""
    width = _last_dim(ctx, x)
    if len(values) == 0 or (len(values) != 1 and width is not None and len(values) != width):
        refuse(
            ctx,
            node,
            f"{what} has {len(values)} values; give 1 or one per feature ({width or 'C'})",
        )
    return np.asarray(values, dtype=np.float32)


@register_ml_converter("Binarizer", (1,), (SAME_AS_X,))
def binarizer(ctx, node):
    """Binarizer(x) = 1 where x > threshold else 0, in x's element type (NaN gives 0)."""
    x, dtype = typed_input(ctx, node, 0, _FLOATS)
    threshold = constant(ctx, "threshold", _NUMPY[dtype](attribute(ctx, node, "threshold", 0.0)))
    above = ctx.fresh_name("above")
    ctx.emit("Greater", [x, threshold], [above])
    ctx.emit("Cast", [above], node.outputs[:1], {"to": DTYPES[dtype].onnx})


@register_ml_converter("ArrayFeatureExtractor", (1,), (SAME_AS_X,))
def array_feature_extractor(ctx, node):
    """ArrayFeatureExtractor(x, indices) = x[..., indices] (indices flattened). A negative
    index is out of range here (it does not count from the end): Gather then fails the run
    with a bad-index status, as onnxruntime fails it."""
    x, _ = typed_input(ctx, node, 0, NUMBERS)
    indices, _ = typed_input(ctx, node, 1, (DType.INT64,))
    dims = ctx.tensor(x).dims
    if dims is not None and len(dims) < 1:
        refuse(ctx, node, "X is a scalar; the op takes X of rank 1 or more")
    flat = ctx.fresh_name("indices")
    ctx.emit("Reshape", [indices, constant(ctx, "flat", np.array([-1], dtype=np.int64))], [flat])
    data = ctx.tensor(indices).data
    if data is not None:
        low = int(np.min(data)) if data.size else 0
        width = _last_dim(ctx, x)
        if low < 0 or (width is not None and data.size and int(np.max(data)) >= width):
            refuse(ctx, node, f"an index of {data.ravel().tolist()} is outside 0 .. {width}")
        checked = flat
    else:  # negatives -> beyond any axis, so Gather refuses them instead of wrapping
        negative, checked = ctx.fresh_name("negative"), ctx.fresh_name("checked")
        zero = constant(ctx, "zero", np.array(0, dtype=np.int64))
        beyond = constant(ctx, "beyond", np.array(np.iinfo(np.int64).max, dtype=np.int64))
        ctx.emit("Less", [flat, zero], [negative])
        ctx.emit("Where", [negative, beyond, flat], [checked])
    if dims is not None and len(dims) == 1:  # [C] -> [1, k], as onnxruntime shapes it
        gathered = ctx.fresh_name("gathered")
        ctx.emit("Gather", [x, checked], [gathered], {"axis": -1})
        axes = constant(ctx, "axes", np.array([0], dtype=np.int64))
        ctx.emit("Unsqueeze", [gathered, axes], node.outputs[:1])
        return
    ctx.emit("Gather", [x, checked], node.outputs[:1], {"axis": -1})


@register_ml_converter("Scaler", (1,))
def scaler(ctx, node):
    """Scaler(x) = (float32(x) - offset) * scale, offset and scale one or one per feature."""
    x, dtype = typed_input(ctx, node, 0, NUMBERS)
    value = as_float32(ctx, x, dtype)
    offset = attribute(ctx, node, "offset")
    scale = attribute(ctx, node, "scale")
    steps = []
    if offset is not None:
        steps.append(("Sub", _per_feature(ctx, node, x, offset, "offset")))
    if scale is not None:
        steps.append(("Mul", _per_feature(ctx, node, x, scale, "scale")))
    if not steps:
        ctx.emit("Identity", [value], node.outputs[:1])
        return
    for k, (op, values) in enumerate(steps):
        out = node.outputs[0] if k == len(steps) - 1 else ctx.fresh_name("shifted")
        ctx.emit(op, [value, constant(ctx, op.lower(), values)], [out])
        value = out


@register_ml_converter("Normalizer", (1,))
def normalizer(ctx, node):
    """Normalizer(x) = float32(x) / its row's MAX, L1 or L2 norm (x [N, C] or [C])."""
    x, dtype = typed_input(ctx, node, 0, NUMBERS)
    dims = ctx.tensor(x).dims
    if dims is not None and len(dims) not in (1, 2):
        refuse(ctx, node, f"X has rank {len(dims)}; the op takes [N, C] or [C]")
    norm = attribute(ctx, node, "norm", "MAX")
    if norm not in ("MAX", "L1", "L2"):
        refuse(ctx, node, f"norm {norm!r} is not one of MAX, L1, L2")
    value = as_float32(ctx, x, dtype)
    axes = constant(ctx, "axes", np.array([-1], dtype=np.int64))
    divisor = ctx.fresh_name("norm")
    if norm == "MAX":
        ctx.emit("ReduceMax", [value, axes], [divisor], {"keepdims": 1})
    else:
        term = ctx.fresh_name("term")
        if norm == "L1":
            ctx.emit("Abs", [value], [term])
        else:
            ctx.emit("Mul", [value, value], [term])
        total = ctx.fresh_name("total") if norm == "L2" else divisor
        ctx.emit("ReduceSum", [term, axes], [total], {"keepdims": 1})
        if norm == "L2":
            ctx.emit("Sqrt", [total], [divisor])
    ctx.emit("Div", [value, divisor], node.outputs[:1])


@register_ml_converter("Imputer", (1,), (SAME_AS_X,))
def imputer(ctx, node):
    """Imputer(x): each element equal to the replaced value (NaN: each NaN) becomes its
    feature's imputed value (one, or one per feature)."""
    x, dtype = typed_input(ctx, node, 0, NUMBERS)
    floats = dtype in _FLOATS
    given = "imputed_value_floats" if floats else "imputed_value_int64s"
    other = "imputed_value_int64s" if floats else "imputed_value_floats"
    if node.attributes.get(other) is not None and len(node.attributes[other]):
        refuse(ctx, node, f"X is {dtype.name.lower()}, so {other!r} does not apply ({given})")
    values = attribute(ctx, node, given, required=True)
    width = _last_dim(ctx, x)
    if len(values) == 0 or (len(values) != 1 and width is not None and len(values) != width):
        refuse(ctx, node, f"{given} has {len(values)} values; give 1 or one per feature")
    imputed = constant(ctx, "imputed", np.asarray(values, dtype=_NUMPY[dtype]))
    if floats:
        replaced = float(attribute(ctx, node, "replaced_value_float", 0.0))
    else:
        replaced = int(attribute(ctx, node, "replaced_value_int64", 0))
    found = ctx.fresh_name("found")
    if floats and np.isnan(replaced):
        ctx.emit("IsNaN", [x], [found])
    else:
        target = constant(ctx, "replaced", np.array(replaced, dtype=_NUMPY[dtype]))
        ctx.emit("Equal", [x, target], [found])
    ctx.emit("Where", [found, imputed, x], node.outputs[:1])


@register_ml_converter("OneHotEncoder", (1,))
def one_hot_encoder(ctx, node):
    """OneHotEncoder(x) of int64 categories: float32 [..., categories], 1 where x equals the
    category. An x outside the categories gives a row of zeros (zeros=1)."""
    x, _ = typed_input(ctx, node, 0, (DType.INT64, DType.INT32))
    if node.attributes.get("cats_strings"):
        refuse(ctx, node, "string categories (cats_strings) are not supported; cats_int64s are")
    categories = attribute(ctx, node, "cats_int64s", required=True)
    if len(categories) == 0:
        refuse(ctx, node, "cats_int64s is empty")
    if int(attribute(ctx, node, "zeros", 1)) != 1:
        refuse(ctx, node, "zeros=0 (fail on an unknown category) is not supported; zeros=1 is")
    axes = constant(ctx, "axes", np.array([-1], dtype=np.int64))
    column, equal = ctx.fresh_name("column"), ctx.fresh_name("equal")
    wide = ctx.fresh_name("wide")
    ctx.emit("Cast", [x], [wide], {"to": 7})  # int64
    ctx.emit("Unsqueeze", [wide, axes], [column])
    cats = constant(ctx, "categories", np.asarray(categories, dtype=np.int64))
    ctx.emit("Equal", [column, cats], [equal])
    ctx.emit("Cast", [equal], node.outputs[:1], {"to": _ONNX_FLOAT})


@register_ml_converter("FeatureVectorizer", (1,))
def feature_vectorizer(ctx, node):
    """FeatureVectorizer(x1, x2, ...) = the inputs as float32 [N, d_k], side by side."""
    widths = [int(d) for d in attribute(ctx, node, "inputdimensions", required=True)]
    inputs = [name for name in node.inputs if name]
    if len(widths) != len(inputs):
        refuse(ctx, node, f"{len(inputs)} inputs but {len(widths)} inputdimensions")
    parts = []
    for position, (name, width) in enumerate(zip(inputs, widths, strict=True)):
        _, dtype = typed_input(ctx, node, position, NUMBERS)
        dims = ctx.tensor(name).dims
        if dims is None or len(dims) != 2 or dims[1] != width:
            refuse(
                ctx,
                node,
                f"input {name!r} has shape {list(dims) if dims is not None else 'unknown'}; "
                f"inputdimensions needs [N, {width}]",
            )
        parts.append(as_float32(ctx, name, dtype))
    if len(parts) == 1:
        ctx.emit("Identity", parts, node.outputs[:1])
    else:
        ctx.emit("Concat", parts, node.outputs[:1], {"axis": 1})
