"""Published CNN architectures built in code with random weights (nothing is downloaded).

Each builder returns a ModelProto with input x: [batch, 3, size, size] (batch symbolic) and
output y: [batch, classes] (softmax probabilities), following the layer plan of the paper's
network, so the ops, shapes and FLOPs are the real ones:

- `resnet(18)` / `resnet(50)`: 7x7 stem, BasicBlocks (18) or Bottlenecks (50) in four stages,
  BatchNormalization after every conv, residual Add + Relu, MaxPool, GlobalAveragePool, Gemm;
- `mobilenet_v2()`: inverted residuals (1x1 expansion, depthwise 3x3, 1x1 projection), Relu6
  as Clip(0, 6), residual Add where the shape is kept;
- `densenet()`: dense blocks whose layers Concat their growth onto the input, transitions with
  AveragePool;
- `inception()`: a stem and Inception-v1 blocks of four parallel branches (1x1; 1x1 -> 3x3;
  1x1 -> 5x5; 3x3 MaxPool -> 1x1) joined by Concat.

`width` scales every channel count (1.0: the paper's), `stages` / `blocks` shorten the network
for fast tests. Weights are He-initialised so activations neither vanish nor explode, and
BatchNormalization statistics are random but plausible (variance around 1); the outputs are
far from one-hot, so a comparison with another runtime checks every layer.
"""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
FLOAT = TensorProto.FLOAT


class _Net:
    """Appends nodes and initializers; every method returns its output tensor's name."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.initializers = []
        self.count = 0

    def name(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    def weight(self, prefix, array):
        name = self.name(prefix)
        self.initializers.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def node(self, op, inputs, **attributes):
        output = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    def conv(self, x, cin, cout, kernel, stride=1, group=1, bias=False):
        fan_in = cin // group * kernel * kernel
        w = self.rng.standard_normal((cout, cin // group, kernel, kernel)) * np.sqrt(2 / fan_in)
        inputs = [x, self.weight("w", w)]
        if bias:
            inputs.append(self.weight("b", 0.1 * self.rng.standard_normal(cout)))
        pad = kernel // 2
        return self.node(
            "Conv",
            inputs,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            group=group,
        )

    def batch_norm(self, x, channels, gamma=1.0):
        rng = self.rng
        parameters = [
            gamma * (1 + 0.1 * rng.standard_normal(channels)),  # scale
            0.1 * rng.standard_normal(channels),  # bias
            0.1 * rng.standard_normal(channels),  # running mean
            1 + 0.1 * np.abs(rng.standard_normal(channels)),  # running variance
        ]
        names = [self.weight(p, a) for p, a in zip("sbmv", parameters, strict=True)]
        return self.node("BatchNormalization", [x, *names], epsilon=1e-5)

    def conv_bn(self, x, cin, cout, kernel, stride=1, group=1, activation="Relu", gamma=1.0):
        y = self.batch_norm(self.conv(x, cin, cout, kernel, stride, group), cout, gamma)
        if activation == "Relu":
            return self.node("Relu", [y])
        if activation == "Relu6":
            low = self.weight("lo", np.array(0.0))
            high = self.weight("hi", np.array(6.0))
            return self.node("Clip", [y, low, high])
        return y

    def pool(self, op, x, kernel, stride, pad=0):
        return self.node(
            op, [x], kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4
        )

    def head(self, x, channels, classes):
        """GlobalAveragePool -> Flatten -> Gemm -> Softmax into the output y."""
        flat = self.node("Flatten", [self.node("GlobalAveragePool", [x])], axis=1)
        fc = self.rng.standard_normal((classes, channels)) / np.sqrt(channels)
        logits = self.node(
            "Gemm", [flat, self.weight("fc", fc), self.weight("fb", np.zeros(classes))], transB=1
        )
        self.nodes.append(helper.make_node("Softmax", [logits], ["y"], axis=-1))

    def model(self, size, classes, name):
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info("x", FLOAT, ["batch", 3, size, size])],
            [helper.make_tensor_value_info("y", FLOAT, ["batch", classes])],
            self.initializers,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


# The last BatchNormalization of a residual branch scales by ~0.2, as trained networks' small
# branch gains do: with random running statistics the inference-mode BN normalises nothing, and
# sixteen unscaled Bottleneck branches grow activations until the softmax saturates.
_RESIDUAL_GAMMA = 0.2


def _channels(count, width):
    return max(4, int(round(count * width)))


def resnet(depth=18, width=1.0, classes=1000, size=224, stages=4, seed=0):
    """ResNet-18 (BasicBlocks [2, 2, 2, 2]) or ResNet-50 (Bottlenecks [3, 4, 6, 3])."""
    if depth not in (18, 50):
        raise ValueError(f"depth must be 18 or 50, not {depth}")
    net = _Net(seed)
    stem = _channels(64, width)
    x = net.conv_bn("x", 3, stem, 7, stride=2)
    x = net.pool("MaxPool", x, 3, 2, pad=1)
    blocks = (2, 2, 2, 2) if depth == 18 else (3, 4, 6, 3)
    expansion = 1 if depth == 18 else 4
    cin = stem
    for stage in range(stages):
        mid = _channels(64 * 2**stage, width)
        cout = mid * expansion
        for block in range(blocks[stage]):
            stride = 2 if block == 0 and stage > 0 else 1
            if depth == 18:
                y = net.conv_bn(x, cin, mid, 3, stride)
                y = net.conv_bn(y, mid, cout, 3, activation=None, gamma=_RESIDUAL_GAMMA)
            else:
                y = net.conv_bn(x, cin, mid, 1)
                y = net.conv_bn(y, mid, mid, 3, stride)
                y = net.conv_bn(y, mid, cout, 1, activation=None, gamma=_RESIDUAL_GAMMA)
            shortcut = x
            if stride != 1 or cin != cout:
                shortcut = net.conv_bn(x, cin, cout, 1, stride, activation=None)
            x = net.node("Relu", [net.node("Add", [y, shortcut])])
            cin = cout
    net.head(x, cin, classes)
    return net.model(size, classes, f"resnet{depth}")


# (expansion, channels, repeats, stride) of MobileNetV2's inverted-residual stages
_MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1))
_MOBILENET_V2 += ((6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(width=1.0, classes=1000, size=224, stages=7, seed=0):
    """MobileNetV2: a 3x3 stem, inverted residuals with Relu6, a 1x1 conv to 1280 channels."""
    net = _Net(seed)
    cin = _channels(32, width)
    x = net.conv_bn("x", 3, cin, 3, stride=2, activation="Relu6")
    for expansion, channels, repeats, first_stride in _MOBILENET_V2[:stages]:
        cout = _channels(channels, width)
        for repeat in range(repeats):
            stride = first_stride if repeat == 0 else 1
            hidden = cin * expansion
            y = x
            if expansion != 1:
                y = net.conv_bn(y, cin, hidden, 1, activation="Relu6")
            y = net.conv_bn(y, hidden, hidden, 3, stride, group=hidden, activation="Relu6")
            residual = stride == 1 and cin == cout
            gamma = _RESIDUAL_GAMMA if residual else 1.0
            y = net.conv_bn(y, hidden, cout, 1, activation=None, gamma=gamma)
            x = net.node("Add", [y, x]) if residual else y
            cin = cout
    last = _channels(1280, width)
    x = net.conv_bn(x, cin, last, 1, activation="Relu6")
    net.head(x, last, classes)
    return net.model(size, classes, "mobilenet_v2")


def densenet(growth=32, blocks=(6, 12, 24, 16), width=1.0, classes=1000, size=224, seed=0):
    """DenseNet-121 by default: BN-Relu-Conv1x1 (4 x growth) -> BN-Relu-Conv3x3 (growth)
    layers Concat'ed onto their input; transitions halve channels and AveragePool by 2."""
    net = _Net(seed)
    growth = _channels(growth, width)
    channels = 2 * growth
    x = net.conv_bn("x", 3, channels, 7, stride=2)
    x = net.pool("MaxPool", x, 3, 2, pad=1)
    for index, layers in enumerate(blocks):
        for _ in range(layers):
            y = net.node("Relu", [net.batch_norm(x, channels)])
            y = net.conv(y, channels, 4 * growth, 1)
            y = net.node("Relu", [net.batch_norm(y, 4 * growth)])
            y = net.conv(y, 4 * growth, growth, 3)
            x = net.node("Concat", [x, y], axis=1)
            channels += growth
        if index < len(blocks) - 1:
            y = net.node("Relu", [net.batch_norm(x, channels)])
            x = net.pool("AveragePool", net.conv(y, channels, channels // 2, 1), 2, 2)
            channels //= 2
    x = net.node("Relu", [net.batch_norm(x, channels)])
    net.head(x, channels, classes)
    return net.model(size, classes, "densenet")


# Inception-v1 blocks: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection), MaxPool after
# the blocks marked True
_INCEPTION_V1 = (
    ((64, 96, 128, 16, 32, 32), False),
    ((128, 128, 192, 32, 96, 64), True),
    ((192, 96, 208, 16, 48, 64), False),
    ((160, 112, 224, 24, 64, 64), False),
    ((128, 128, 256, 24, 64, 64), False),
    ((112, 144, 288, 32, 64, 64), False),
    ((256, 160, 320, 32, 128, 128), True),
    ((256, 160, 320, 32, 128, 128), False),
    ((384, 192, 384, 48, 128, 128), False),
)


def inception(width=1.0, classes=1000, size=224, blocks=9, seed=0):
    """GoogLeNet (Inception-v1) without its auxiliary heads: a conv stem, then Inception
    blocks of four parallel branches joined by Concat."""
    net = _Net(seed)
    c = _channels(64, width)
    x = net.pool("MaxPool", net.conv_bn("x", 3, c, 7, stride=2), 3, 2, pad=1)
    x = net.conv_bn(x, c, c, 1)
    cin = _channels(192, width)
    x = net.pool("MaxPool", net.conv_bn(x, c, cin, 3), 3, 2, pad=1)
    for plan, pool_after in _INCEPTION_V1[:blocks]:
        one, r3, three, r5, five, projection = (_channels(n, width) for n in plan)
        branches = [
            net.conv_bn(x, cin, one, 1),
            net.conv_bn(net.conv_bn(x, cin, r3, 1), r3, three, 3),
            net.conv_bn(net.conv_bn(x, cin, r5, 1), r5, five, 5),
            net.conv_bn(net.pool("MaxPool", x, 3, 1, pad=1), cin, projection, 1),
        ]
        x = net.node("Concat", branches, axis=1)
        cin = one + three + five + projection
        if pool_after:
            x = net.pool("MaxPool", x, 3, 2, pad=1)
    net.head(x, cin, classes)
    return net.model(size, classes, "inception")


ARCHITECTURES = {
    "resnet18": lambda **k: resnet(18, **k),
    "resnet50": lambda **k: resnet(50, **k),
    "mobilenet_v2": mobilenet_v2,
    "densenet121": densenet,
    "inception_v1": inception,
}
