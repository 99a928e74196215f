"""Named arrays in .npz files: a model's input sets and outputs (`rtsoa run --inputs /
--outputs`, batch model jobs). An output that is a sequence of maps (ZipMap's) is written as
two arrays, its keys and its values (`file_arrays`)."""

import zipfile
import zlib

import numpy as np

from rtsoa.errors import ModelInputError
from rtsoa.host.maps import as_arrays

# what np.load raises on a damaged archive, besides OSError / ValueError
_ARCHIVE_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def read_inputs(path):
    """{name: array} from an .npz file (ModelInputError if it is not a readable one)."""
    try:
        archive = np.load(path, allow_pickle=False)
        if not hasattr(archive, "files"):  # a .npy file: one array, no names
            raise ValueError("one array of a .npy file, not named arrays")
        with archive:
            return {name: archive[name] for name in archive.files}
    except _ARCHIVE_ERRORS as error:
        raise ModelInputError(f"--inputs {path}: not a readable .npz file ({error})") from None


def file_arrays(outputs):
    """{name: array} of a model's outputs as an .npz holds them: an array as it is; a sequence
    of maps (ZipMap's output: a list of dicts sharing their keys in one order) as two arrays,
    `name.keys` (its keys [C], int64 or unicode) and `name.values` (its values [N, C],
    float32). ValueError naming the output for any other value, or a name taken twice."""
    arrays = {}
    for name, value in outputs.items():
        if isinstance(value, list):
            keys, values = as_arrays(value, f"output {name!r}")
            parts = {f"{name}.keys": keys, f"{name}.values": values}
        else:
            parts = {name: value}
        for part, array in parts.items():
            if part in arrays:
                raise ValueError(f"output {name!r}: the .npz member {part!r} is taken twice")
            arrays[part] = array
    return arrays


def write_outputs(path, arrays):
    """Write {name: array} to `path` as np.savez does (an uncompressed zip of `name.npy`
    members), member by member: np.savez takes the names as keyword arguments, so an output
    named `file` collided with its own argument and one named `allow_pickle` was dropped.
    A sequence of maps is written as `file_arrays` lays it out."""
    arrays = file_arrays(arrays)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
