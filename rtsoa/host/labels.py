"""The host step that names classes: ClassLabels (rtsoa's own, domain `rtsoa.host`) maps int64
class indexes to string labels. Lowering puts it after an ai.onnx.ml classifier whose labels
are strings (`rtsoa.lowering.ml_labels`): the classifier runs on the device with the indexes
as its labels, and this step turns them into the strings."""

import numpy as np

from rtsoa.host.kinds import STRING, HostOp, kind_name, strings

DOMAIN = "rtsoa.host"


def _prepare(attributes, kinds, opset):
    labels = attributes.get("labels")
    if not labels or not all(isinstance(label, str) for label in labels):
        raise ValueError("ClassLabels needs a non-empty list of string labels")
    if kinds[0] is not None and kinds[0] != np.dtype(np.int64):
        raise ValueError(f"ClassLabels reads int64 class indexes, not {kind_name(kinds[0])}")
    return {"labels": list(labels)}, [STRING]


def _run(parameters, inputs):
    indexes = np.asarray(inputs[0])
    labels = parameters["labels"]
    if indexes.size and (indexes.min() < 0 or indexes.max() >= len(labels)):
        raise ValueError(f"a class index is outside 0 .. {len(labels) - 1}")
    return [strings([labels[k] for k in indexes.ravel().tolist()], indexes.shape)]


class_labels = HostOp(_prepare, _run)
