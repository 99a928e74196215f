"""The table of host ops: (domain, op) -> `HostOp` (see `rtsoa.host.kinds`)."""

from rtsoa.host.encoders import label_encoder, tfidf_vectorizer
from rtsoa.host.strings import STRING_OPS

HOST_OPS = dict(STRING_OPS)
HOST_OPS[("", "TfIdfVectorizer")] = tfidf_vectorizer
HOST_OPS[("ai.onnx.ml", "LabelEncoder")] = label_encoder
# Ops that run on the host whatever their element types (rtsoa has no device op for them);
# the others run on the host when a string tensor is among their inputs or outputs.
ALWAYS_HOST = frozenset({("", "TfIdfVectorizer"), ("ai.onnx.ml", "LabelEncoder")})
