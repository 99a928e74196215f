"""Cached machine code loaded without parsing its LLVM bitcode.

A Numba disk-cache entry holds a function's object code and, for callers that copy the function
into their own module, its LLVM module as bitcode. Loading an entry (Numba's
`CPUCodeLibrary._unserialize`) parses that bitcode, then walks every function and global of
the parsed module to note the symbols it defines: milliseconds per entry, nearly all of it
calls into LLVM. The op library's switch loads ~300 entries (one per op
function and helper, `rtsoa._linking`), so a warm model start paid about a second for
modules that its callers, linked by symbol, never copy.

rtsoa's cache (`rtsoa._numba.caching.RtsoaCacheImpl.rebuild`) loads an entry of object code as
Numba does, except that
- its bitcode is kept as bytes and parsed only when a caller asks for the module to copy it
  (`_get_module_for_linking`: functions that are not linked once, or a later re-save);
- the symbols it defines are read from the object code's ELF symbol table: every defined
  function, variable or untyped symbol with a name. On each of the 618 entries of rtsoa's
  op library that was the set Numba's walk finds, less LLVM's private lookup tables
  (`switch.table.*`), which nothing looks up by name; the cache tests compare the two sets on
  a fresh compile.
Entries of plain `numba.njit` functions load Numba's way: Numba's classes are not changed.
Object code that is not 64-bit little-endian ELF (macOS, Windows), or whose tables do not read
back cleanly, loads Numba's way.
"""

import numpy as np

from rtsoa._numba import compat

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


_CODEGEN = "numba.core.codegen.JITCodeLibrary."
_REBUILD_PARAMETERS = (
    "cls",
    "target_context",
    "libdata",
    "fndesc",
    "env",
    "signature",
    "objectmode",
    "lifted",
    "typeann",
    "reload_init",
    "referenced_envs",
)
INSTALLED = compat.register(
    "lazy-bitcode",
    "rtsoa",
    [
        "llvmlite.binding.parse_bitcode",
        "numba.core.compiler.CompileResult._rebuild",
        _CODEGEN + "_get_module_for_linking",
        _CODEGEN + "enable_object_caching",
        _CODEGEN + "_set_compiled_object",
        _CODEGEN + "_finalize_final_module",
        "numba.core.base.BaseContext.get_executable",
    ],
    "cached entries load without parsing their bitcode",
)
if INSTALLED:
    import llvmlite.binding as _ll
    from numba.core import codegen as _codegen
    from numba.core import compiler as _compiler

    _rebuild_code = _compiler.CompileResult._rebuild.__func__.__code__
    _parameters = _rebuild_code.co_varnames[: _rebuild_code.co_argcount]
    if _parameters != _REBUILD_PARAMETERS:
        INSTALLED = False
        compat.skip("lazy-bitcode", f"CompileResult._rebuild takes {_parameters}")

    class LazyBitcodeLibrary(_codegen.JITCodeLibrary):
        """A code library loaded from object code whose bitcode is parsed on first use."""

        def _get_module_for_linking(self):
            bitcode = self.__dict__.pop("_rtsoa_bitcode", None)
            if bitcode is not None and self._shared_module is None:
                self._shared_module = _ll.parse_bitcode(bitcode)
            return super()._get_module_for_linking()


def _defined_symbols(codegen, state):
    """The symbols the cache entry `state` defines, read from its object code, and the engine's
    set to add them to; None to load the entry Numba's way (bitcode entries, object code this
    module cannot read, a codegen with a library class or engine of its own)."""
    name, kind, data = state
    defined = getattr(getattr(codegen, "_engine", None), "_defined_symbols", None)
    if kind != "object" or not isinstance(defined, set):
        return None
    if getattr(codegen, "_library_class", None) is not _codegen.JITCodeLibrary:
        return None
    symbols = elf_defined_symbols(data[0])
    return None if symbols is None else (symbols, defined)


def _unserialize(codegen, state, symbols, defined):
    name, _, (object_code, shared_bitcode) = state
    library = LazyBitcodeLibrary(codegen, name)
    library.enable_object_caching()
    library._set_compiled_object(object_code)
    library._rtsoa_bitcode = shared_bitcode
    library._finalize_final_module()
    defined |= symbols
    return library


def rebuild(target_context, payload):
    """Numba's `CompileResult._rebuild` of a cache entry's `payload` with a lazily parsed
    library; None when the entry must load Numba's way."""
    if not INSTALLED:
        return None
    libdata, fndesc, env, signature, objectmode, lifted, typeann, reload_init, envs = payload
    codegen = target_context.codegen()
    found = _defined_symbols(codegen, libdata)
    if found is None:
        return None
    for function in reload_init:  # first, as Numba does
        function()
    library = _unserialize(codegen, libdata, *found)
    result = _compiler.CompileResult(
        target_context=target_context,
        typing_context=target_context.typing_context,
        library=library,
        environment=env,
        entry_point=target_context.get_executable(library, fndesc, env),
        fndesc=fndesc,
        type_annotation=typeann,
        signature=signature,
        objectmode=objectmode,
        lifted=lifted,
        typing_error=None,
        call_helper=None,
        metadata=None,
        reload_init=reload_init,
        referenced_envs=envs,
    )
    for referenced in envs:
        library.codegen.set_env(referenced.env_name, referenced)
    return result
