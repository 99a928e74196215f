"""Named arrays in .npz files: a model's input sets and outputs (`rtsoa run --inputs /
--outputs`, batch model jobs)."""

import zipfile
import zlib

import numpy as np

from rtsoa.errors import ModelInputError

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


def write_outputs(path, arrays):
    """Write {name: array} to `path` as np.savez does (an uncompressed zip of `name.npy`
    members), member by member: np.savez takes the names as keyword arguments, so an output
    named `file` collided with its own argument and one named `allow_pickle` was dropped."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
