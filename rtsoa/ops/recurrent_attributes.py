"""The attribute encoding of the recurrent ops (`rtsoa.ops.recurrent`): the slots of their
attrs, the activation functions with the ONNX defaults of their alpha / beta, and
`encode_recurrent`, which fills the slots from a node's ONNX attributes (plain Python, shared
with the converters)."""

from rtsoa.ops.attributes import onnx_float

DIRECTION, HIDDEN, LAYOUT, CLIP, FLAG = 0, 1, 2, 3, 4
ACTIVATIONS, ALPHAS, BETAS = 5, 11, 17
SLOTS = 23
DIRECTIONS = {"forward": 0, "reverse": 1, "bidirectional": 2}

# Activation codes, and (alphas taken, betas taken, default alpha, default beta) of each: the
# defaults are the ONNX operators' of the same name (Affine and ScaledTanh are the
# experimental ops').
SIGMOID, TANH, RELU, LEAKY_RELU, THRESHOLDED_RELU, SCALED_TANH = 0, 1, 2, 3, 4, 5
HARD_SIGMOID, ELU, SOFTSIGN, SOFTPLUS, AFFINE = 6, 7, 8, 9, 10
ACTIVATION_FUNCTIONS = {
    "sigmoid": (SIGMOID, 0, 0, 0.0, 0.0),
    "tanh": (TANH, 0, 0, 0.0, 0.0),
    "relu": (RELU, 0, 0, 0.0, 0.0),
    "leakyrelu": (LEAKY_RELU, 1, 0, 0.01, 0.0),
    "thresholdedrelu": (THRESHOLDED_RELU, 1, 0, 1.0, 0.0),
    "scaledtanh": (SCALED_TANH, 1, 1, 1.0, 1.0),
    "hardsigmoid": (HARD_SIGMOID, 1, 1, 0.2, 0.5),
    "elu": (ELU, 1, 0, 1.0, 0.0),
    "softsign": (SOFTSIGN, 0, 0, 0.0, 0.0),
    "softplus": (SOFTPLUS, 0, 0, 0.0, 0.0),
    "affine": (AFFINE, 1, 1, 1.0, 0.0),
}
# Per direction: the functions a cell applies (f, g, h) and ONNX's defaults.
CELLS = {
    "LSTM": (4, ("Sigmoid", "Tanh", "Tanh")),
    "GRU": (3, ("Sigmoid", "Tanh")),
    "RNN": (1, ("Tanh",)),
}


def activation_names(op, attributes):
    """The activation names of every direction of `op`'s node (ONNX's defaults when absent)."""
    bidirectional = attribute_text(attributes.get("direction", "forward")) == "bidirectional"
    directions = 2 if bidirectional else 1
    names = attributes.get("activations")
    if names is None:
        return list(CELLS[op][1]) * directions
    return [attribute_text(name) for name in names]


def attribute_text(value):
    """A STRING attribute as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def encode_recurrent(op):
    """The `encode` of op `op` (LSTM, GRU, RNN): the slots of the module docstring. A value it
    does not know (a direction, an activation name) becomes -1, which shape inference refuses
    as a bad attribute (the converter names it first)."""

    def encode(attributes, inputs):
        names = activation_names(op, attributes)
        bidirectional = attribute_text(attributes.get("direction", "forward")) == "bidirectional"
        expected = len(CELLS[op][1]) * (2 if bidirectional else 1)
        alphas = [onnx_float(v) for v in attributes.get("activation_alpha", ())]
        betas = [onnx_float(v) for v in attributes.get("activation_beta", ())]
        codes, slot_alphas, slot_betas = [-1] * 6, [0.0] * 6, [0.0] * 6
        for k, name in enumerate(names[:6]):
            code, takes_alpha, takes_beta, alpha, beta = ACTIVATION_FUNCTIONS.get(
                name.lower(), (-1, 0, 0, 0.0, 0.0)
            )
            if takes_alpha and alphas:
                alpha = alphas.pop(0)
            if takes_beta and betas:
                beta = betas.pop(0)
            codes[k], slot_alphas[k], slot_betas[k] = code, onnx_float(alpha), onnx_float(beta)
        if len(names) != expected:
            codes = [-1] * 6  # not one function per cell function and direction
        flag = {"LSTM": "input_forget", "GRU": "linear_before_reset"}.get(op)
        return [
            DIRECTIONS.get(attribute_text(attributes.get("direction", "forward")), -1),
            int(attributes.get("hidden_size", -1)),
            int(attributes.get("layout", 0)),
            onnx_float(attributes.get("clip", 0.0)),
            int(attributes.get(flag, 0)) if flag else 0,
            *codes,
            *slot_alphas,
            *slot_betas,
        ]

    return encode
