"""Compute ops: the njit shape inference and compute of every ONNX op rtsoa runs.

Importing this package registers the built-in ops (`OPS`, by ONNX op type). See `abi` for the
calling convention, `registry` for registering an op, `entry` for the compiled entry of each
op that kernels call, `library` for when entries compile.
"""

from rtsoa.ops import (  # noqa: F401  (register the built-in ops)
    activations,
    affine_grid,
    attention,
    bitcast,
    bitwise,
    blocks,
    cast,
    col2im,
    conv,
    cumulative,
    deform_conv,
    detection,
    determinant,
    dropout,
    einsum,
    elementwise,
    generated,
    grid_sample,
    indexing,
    linalg,
    linear_attention,
    loss,
    math_functions,
    mel,
    normalization,
    pad,
    pooling,
    positional,
    quantize,
    randomness,
    recurrent,
    reduce,
    reshape,
    resize,
    roi_align,
    rotary,
    scatter,
    selection,
    shape,
    signal,
    softmax,
    spectral,
    svm,
    topk,
    trees,
    unique,
    unpool,
    winograd,
)
from rtsoa.ops.registry import (
    OPS,
    OpDef,
    bind_ops,
    compiled_op_code,
    compiled_op_names,
    freeze_codes,
    op_code,
    op_names,
    register_op,
)

freeze_codes()

__all__ = [
    "OPS",
    "OpDef",
    "bind_ops",
    "compiled_op_code",
    "compiled_op_names",
    "op_code",
    "op_names",
    "register_op",
]
