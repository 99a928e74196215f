"""The layouts the windowed ops share (Conv, ConvTranspose, MaxPool, AveragePool): the attribute
slots `window.encode_window` writes and the geometry array `window.window_geometry` returns."""

# -- attribute slots (encode_window) -------------------------------------------------------------
AUTO_PAD, GROUP, CEIL_MODE, COUNT_INCLUDE_PAD, STORAGE_ORDER = 0, 1, 2, 3, 4
N_KERNEL, N_STRIDES, N_DILATIONS, N_PADS, N_OUTPUT_PADDING, N_OUTPUT_SHAPE = 5, 6, 7, 8, 9, 10
KERNEL, STRIDES, DILATIONS, PADS_BEGIN, PADS_END, OUTPUT_PADDING, OUTPUT_SHAPE = (
    11,
    14,
    17,
    20,
    23,
    26,
    29,
)
WINDOW_SLOTS = 32
NOTSET, SAME_UPPER, SAME_LOWER, VALID, UNKNOWN_PAD = 0, 1, 2, 3, 4
AUTO_PADS = {"NOTSET": NOTSET, "SAME_UPPER": SAME_UPPER, "SAME_LOWER": SAME_LOWER, "VALID": VALID}

# -- geometry array (window_geometry) -------------------------------------------------------------
G_N, G_C, G_M, G_GROUP = 0, 1, 2, 3  # batch, input channels, output channels, groups
G_IN, G_K, G_S, G_D, G_PB, G_PE, G_OUT = 4, 7, 10, 13, 16, 19, 22  # 3 slots each (d, h, w)
GEOMETRY = 25
CONV, POOL, CONV_TRANSPOSE = 0, 1, 2
