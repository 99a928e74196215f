"""Lowering real models: ONNX import, converters, and the passes to an ExecuteGraph."""

from rtsoa.lowering import (
    activations,  # noqa: F401  (registers the Gelu / Celu converters)
    attention,  # noqa: F401  (registers the Attention converter)
    bits,  # noqa: F401  (registers the BitShift / BitCast converters)
    composed,  # noqa: F401  (registers the converters of ops made of others)
    control_flow,  # noqa: F401  (registers the If / Loop converters)
    einsum,  # noqa: F401  (registers the Einsum converter)
    flex_attention,  # noqa: F401  (registers the FlexAttention converter)
    gated,  # noqa: F401  (registers SwiGLU and CausalConvWithState)
    image,  # noqa: F401  (Col2Im, MaxUnpool, RoiAlign, DeformConv)
    indexed,  # noqa: F401  (registers the scatter converters)
    integer_pools,  # noqa: F401  (registers MaxPool on int8 / uint8)
    linear_attention,  # noqa: F401  (registers the LinearAttention converter)
    mixed_types,  # noqa: F401  (registers Pow of mixed element types, Clip on integers)
    ml_linear,  # noqa: F401  (registers the ai.onnx.ml linear models)
    ml_svm,  # noqa: F401  (registers the ai.onnx.ml support vector machines)
    ml_transforms,  # noqa: F401  (registers the ai.onnx.ml feature transforms)
    ml_trees,  # noqa: F401  (registers the ai.onnx.ml tree ensembles)
    normalizing,  # noqa: F401  (registers MeanVarianceNormalization, LpNormalization, Hardmax)
    quantized,  # noqa: F401  (registers the quantisation converters)
    randomness,  # noqa: F401  (registers RandomUniformLike and Bernoulli)
    recurrent,  # noqa: F401  (registers the LSTM / GRU / RNN converters)
    reductions,  # noqa: F401  (registers the reductions composed of ReduceSum)
    resampling,  # noqa: F401  (registers the Resize / Upsample converters)
    scan,  # noqa: F401  (registers the Scan converter)
    selection,  # noqa: F401  (registers the CumProd / TopK converters)
    sequence_map,  # noqa: F401  (registers the SequenceMap converter)
    sequence_regions,  # noqa: F401  (registers the Optional converter)
    sequences,  # noqa: F401  (registers the sequence op converters)
    signal,  # noqa: F401  (registers the window converters)
    spatial,  # noqa: F401  (registers CenterCropPad and LpPool)
    spectral,  # noqa: F401  (registers the DFT / STFT / MelWeightMatrix converters)
    training,  # noqa: F401  (registers the Adagrad / Adam / Momentum optimizers)
)
from rtsoa.lowering.compute_graph import ComputeGraph, Node, Tensor
from rtsoa.lowering.converters import find_converter, register_converter
from rtsoa.lowering.lower import lower
from rtsoa.lowering.onnx_import import import_onnx

__all__ = [
    "ComputeGraph",
    "Node",
    "Tensor",
    "find_converter",
    "import_onnx",
    "lower",
    "register_converter",
]
