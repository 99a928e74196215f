"""Cached machine code loaded without parsing its LLVM bitcode.

A Numba disk-cache entry holds a function's object code and, for callers that copy the function
into their own module, its LLVM module as bitcode. Loading an entry (Numba's
`CPUCodeLibrary._unserialize`) parses that bitcode, then walks every function and global of
the parsed module to note the symbols it defines: 1-6 ms per entry on the development machine,
nearly all of it calls into LLVM. The op library's switch loads ~300 entries (one per op
function and helper, `rtsoa._linking`), so a warm model start paid about a second for
modules that its callers, linked by symbol, never copy.

Installed, an entry of object code loads as in Numba except that
- its bitcode is kept as bytes and parsed only when a caller asks for the module to copy it
  (`_get_module_for_linking`: functions that are not linked once, or a later re-save);
- the symbols it defines are read from the object code's ELF symbol table: every defined
  function, variable or untyped symbol with a name. On each of the 618 entries of rtsoa's
  op library that was the set Numba's walk finds, less LLVM's private lookup tables
  (`switch.table.*`), which nothing looks up by name (a one-off comparison, README "Eleventh
  session"); the cache tests compare the two sets on a fresh compile.
Object code that is not 64-bit little-endian ELF (macOS, Windows), or whose tables do not read
back cleanly, loads Numba's way.
"""

import numpy as np

_SECTION = np.dtype(
    [
        ("name", "<u4"),
        ("type", "<u4"),
        ("flags", "<u8"),
        ("addr", "<u8"),
        ("offset", "<u8"),
        ("size", "<u8"),
        ("link", "<u4"),
        ("info", "<u4"),
        ("addralign", "<u8"),
        ("entsize", "<u8"),
    ]
)
_SYMBOL = np.dtype(
    [
        ("name", "<u4"),
        ("info", "u1"),
        ("other", "u1"),
        ("shndx", "<u2"),
        ("value", "<u8"),
        ("size", "<u8"),
    ]
)
_SHT_SYMTAB = 2
_SHN_UNDEF = 0
_DEFINED_TYPES = (0, 1, 2)  # STT_NOTYPE, STT_OBJECT, STT_FUNC (not sections or files)


def elf_defined_symbols(obj):
    """Names of the symbols a 64-bit little-endian ELF object defines; None if `obj` is not
    such an object or its tables do not read back cleanly."""
    try:
        obj = bytes(obj)
        if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
            return None
        shoff = int.from_bytes(obj[0x28:0x30], "little")
        shentsize = int.from_bytes(obj[0x3A:0x3C], "little")
        shnum = int.from_bytes(obj[0x3C:0x3E], "little")
        if shentsize != _SECTION.itemsize:
            return None
        sections = np.frombuffer(obj, _SECTION, shnum, shoff)
        (tables,) = np.nonzero(sections["type"] == _SHT_SYMTAB)
        if len(tables) != 1:
            return None
        table = sections[tables[0]]
        if int(table["entsize"]) != _SYMBOL.itemsize:
            return None
        count = int(table["size"]) // _SYMBOL.itemsize
        symbols = np.frombuffer(obj, _SYMBOL, count, int(table["offset"]))
        strings = sections[int(table["link"])]
        start = int(strings["offset"])
        end = start + int(strings["size"])
        if end > len(obj):
            return None
        names = obj[start:end]
        keep = (symbols["shndx"] != _SHN_UNDEF) & np.isin(symbols["info"] & 0xF, _DEFINED_TYPES)
        found = set()
        for offset in symbols["name"][keep].tolist():
            stop = names.find(b"\0", offset)
            if stop < 0:
                return None
            if stop > offset:
                found.add(names[offset:stop].decode())
        return found
    except (ValueError, IndexError, OverflowError, UnicodeDecodeError):
        return None


def install():
    """Wrap Numba's library loading as the module docstring says; True if installed (False,
    and nothing changed, if Numba's internals are not the expected ones)."""
    try:
        import llvmlite.binding as ll
        from numba.core import codegen

        library = codegen.CPUCodeLibrary
        numba_unserialize = library.__dict__["_unserialize"].__func__
        numba_module_for_linking = library._get_module_for_linking
        library.enable_object_caching  # noqa: B018 - present in the expected internals
        library._set_compiled_object  # noqa: B018
        library._finalize_final_module  # noqa: B018
    except (ImportError, AttributeError, KeyError):
        return False
    if getattr(library, "_rtsoa_lazy_bitcode", False):
        return True

    def _unserialize(cls, codegen_, state):
        name, kind, data = state
        defined = getattr(getattr(codegen_, "_engine", None), "_defined_symbols", None)
        symbols = elf_defined_symbols(data[0]) if kind == "object" else None
        if symbols is None or not isinstance(defined, set):
            return numba_unserialize(cls, codegen_, state)
        object_code, shared_bitcode = data
        self = codegen_.create_library(name)
        assert isinstance(self, cls)
        self.enable_object_caching()
        self._set_compiled_object(object_code)
        self._rtsoa_bitcode = shared_bitcode
        self._finalize_final_module()
        defined |= symbols
        return self

    def _get_module_for_linking(self):
        bitcode = self.__dict__.pop("_rtsoa_bitcode", None)
        if bitcode is not None and self._shared_module is None:
            self._shared_module = ll.parse_bitcode(bitcode)
        return numba_module_for_linking(self)

    library._unserialize = classmethod(_unserialize)
    library._get_module_for_linking = _get_module_for_linking
    library._rtsoa_lazy_bitcode = True
    return True
