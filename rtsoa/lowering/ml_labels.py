"""String class labels of the ai.onnx.ml classifiers (TreeEnsembleClassifier,
LinearClassifier, SVMClassifier): before the graph is split into host steps and a device
graph, such a classifier is rewritten to label by class index (int64 labels 0 .. n - 1, on
the device), followed by a ClassLabels host step (`rtsoa.host.labels`) that turns the indexes
into the strings. The labels output then leaves the device graph as int64 and becomes strings
on the host, after the device run."""

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.host.labels import DOMAIN as LABELS_DOMAIN
from rtsoa.lowering.compute_graph import Node
from rtsoa.lowering.subgraphs import fresh_tensor_name

_CLASSIFIERS = {
    "TreeEnsembleClassifier": ("classlabels_strings", "classlabels_int64s"),
    "LinearClassifier": ("classlabels_strings", "classlabels_ints"),
    "SVMClassifier": ("classlabels_strings", "classlabels_ints"),
}


def refuse_string_labels(ctx, node):
    """LoweringError naming `node` when it still has string class labels here: the rewrite
    above happens in the top-level graph only, and for a classifier with a labels output."""
    if node.attributes.get("classlabels_strings"):
        raise LoweringError(
            f"{ctx.describe(node)}: string class labels (classlabels_strings) run as a host "
            "step after the top-level graph only (here: in a subgraph, without a labels "
            "output, or with int labels too)"
        )


def split_string_labels(graph):
    """Rewrite `graph`'s classifiers with string labels in place (see the module docstring)."""
    nodes = []
    for node in graph.nodes:
        nodes.append(node)
        names = _CLASSIFIERS.get(node.op_type) if node.domain == "ai.onnx.ml" else None
        labels = node.attributes.get(names[0]) if names else None
        if not labels or not node.outputs or not node.outputs[0]:
            continue
        if node.attributes.get(names[1]):
            continue  # both given: the converter refuses it, naming the node
        indexes = fresh_tensor_name(graph, f"{node.outputs[0]}_index")
        graph.tensor(indexes).dtype = DType.INT64
        attributes = {k: v for k, v in node.attributes.items() if k != names[0]}
        attributes[names[1]] = list(range(len(labels)))
        nodes[-1] = Node(
            node.op_type,
            list(node.inputs),
            [indexes] + list(node.outputs[1:]),
            attributes,
            node.name,
            node.domain,
            node.subgraphs,
        )
        graph.tensor(node.outputs[0]).string = True
        labels_node = Node(
            "ClassLabels",
            [indexes],
            [node.outputs[0]],
            {"labels": [str(label) for label in labels]},
            f"{node.name or node.op_type}_labels",
            LABELS_DOMAIN,
        )
        nodes.append(labels_node)
    graph.nodes[:] = nodes
