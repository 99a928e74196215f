"""A converter that never returns, for the batch tests (`--import batch_converters`): a model
using `com.example.batch.Stall` lowers forever, as a model whose lowering runs away would."""

import time

from rtsoa.lowering import register_converter


@register_converter("Stall", domain="com.example.batch")
def stall(ctx, node):
    while True:
        time.sleep(0.05)
