"""The table of host ops: (domain, op) -> `HostOp` (see `rtsoa.host.kinds`)."""

from rtsoa.abi.registry import Registry
from rtsoa.host.encoders import label_encoder, tfidf_vectorizer
from rtsoa.host.images import image_decoder
from rtsoa.host.labels import DOMAIN as LABELS_DOMAIN
from rtsoa.host.labels import class_labels
from rtsoa.host.maps import zip_map
from rtsoa.host.strings import STRING_OPS

HOST_OPS = Registry.of("host op", STRING_OPS)
HOST_OPS.add(("", "TfIdfVectorizer"), tfidf_vectorizer)
HOST_OPS.add(("ai.onnx.ml", "LabelEncoder"), label_encoder)
HOST_OPS.add(("", "ImageDecoder"), image_decoder)
HOST_OPS.add((LABELS_DOMAIN, "ClassLabels"), class_labels)
HOST_OPS.add(("ai.onnx.ml", "ZipMap"), zip_map)
# Ops that run on the host whatever their element types (rtsoa has no device op for them);
# the others run on the host when a string tensor is among their inputs or outputs.
ALWAYS_HOST = frozenset(
    {
        ("", "TfIdfVectorizer"),
        ("ai.onnx.ml", "LabelEncoder"),
        ("", "ImageDecoder"),
        (LABELS_DOMAIN, "ClassLabels"),
        ("ai.onnx.ml", "ZipMap"),
    }
)
