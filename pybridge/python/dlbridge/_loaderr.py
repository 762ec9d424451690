"""Why a native part of dlbridge did not load, said in a user's terms.

dlbridge ships two native files: libdlbridge.so (the Go library) and the
CPython extension dlbridge._core, which opens it; both are required. The dynamic loader's own message ("version
`GLIBC_2.34' not found", "wrong ELF class", "undefined symbol") names the
symptom; the functions here read the file's ELF header and symbol version
needs and say the cause (the glibc it needs against the one this system has,
the architecture it was built for, a missing file, a Python too old) and
what to do about it.

`python -m dlbridge._loaderr FILE...` prints, for each ELF file, its
architecture and the newest glibc version it needs, as JSON; the wheel
checks of `make dist` use it.
"""

import importlib
import importlib.machinery
import json
import os
import platform
import re
import struct
import sys
from typing import BinaryIO, Dict, List, Optional, Set, Tuple, TypedDict

# ELF e_machine values -> the names of platform.machine() and wheel tags.
_MACHINES = {3: "i686", 40: "armv7l", 62: "x86_64", 183: "aarch64", 20: "ppc", 21: "ppc64le",
             22: "s390x", 243: "riscv64"}
_SHT_GNU_VERNEED = 0x6FFFFFFE
_SHT_DYNAMIC = 6

_REBUILD = ("build it from source on this machine instead: pip install --no-binary dlbridge dlbridge "
            "(needs Go 1.25 or later and gcc)")


class ElfError(ValueError):
    """The file is not an ELF shared object this module can read."""


class ElfInfo(TypedDict):
    machine: str
    bits: int
    glibc: Optional[Tuple[int, int]]
    versions: Dict[str, List[str]]
    needed: List[str]


def read_elf(path: str) -> ElfInfo:
    """A dict describing the ELF file at path: machine (a platform.machine()
    name), bits (32 or 64), and glibc: the newest GLIBC_x.y version it needs
    as a tuple, None if it needs none; versions maps each needed library to
    its sorted version names; needed lists the DT_NEEDED libraries. ElfError
    if it is not an ELF file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise ElfError("%s is not an ELF file" % path)
    bits = {1: 32, 2: 64}.get(data[4])
    end = {1: "<", 2: ">"}.get(data[5])
    if bits is None or end is None:
        raise ElfError("%s: unknown ELF class or byte order" % path)
    (machine,) = struct.unpack_from(end + "H", data, 18)
    if bits == 64:
        (shoff,) = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        shfmt = end + "IIQQQQIIQQ"
    else:
        (shoff,) = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        shfmt = end + "IIIIIIIIII"
    sections = []
    for i in range(shnum):
        sections.append(struct.unpack_from(shfmt, data, shoff + i * shentsize))
    versions: Dict[str, Set[str]] = {}
    needed: List[str] = []
    for sec in sections:
        _, sh_type, _, _, sh_offset, sh_size, sh_link, sh_info = sec[:8]
        if sh_type not in (_SHT_GNU_VERNEED, _SHT_DYNAMIC):
            continue
        strtab = sections[sh_link][4]

        def name(off: int, strtab: int = strtab) -> str:
            start = strtab + off
            return data[start:data.index(b"\0", start)].decode("ascii", "replace")

        if sh_type == _SHT_DYNAMIC:
            dfmt = end + ("qQ" if bits == 64 else "iI")
            for pos in range(sh_offset, sh_offset + sh_size, struct.calcsize(dfmt)):
                tag, val = struct.unpack_from(dfmt, data, pos)
                if tag == 0:  # DT_NULL
                    break
                if tag == 1:  # DT_NEEDED
                    needed.append(name(val))
            continue

        pos = sh_offset
        for _ in range(sh_info):
            _, cnt, file_off, aux, nxt = struct.unpack_from(end + "HHIII", data, pos)
            names = versions.setdefault(name(file_off), set())
            apos = pos + aux
            for _ in range(cnt):
                _, _, _, vna_name, vna_next = struct.unpack_from(end + "IHHII", data, apos)
                names.add(name(vna_name))
                apos += vna_next
            pos += nxt
            if not nxt:
                break
    glibc = None
    for names in versions.values():
        for n in names:
            m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", n)
            if m:
                v = (int(m.group(1)), int(m.group(2)))
                glibc = v if glibc is None or v > glibc else glibc
    return {"machine": _MACHINES.get(machine, "e_machine %d" % machine), "bits": bits,
            "glibc": glibc, "versions": {k: sorted(v) for k, v in sorted(versions.items())},
            "needed": needed}


def host_machine() -> str:
    """This machine's architecture under the name wheel tags use."""
    m = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m.lower(), m)


def host_glibc() -> Optional[Tuple[int, int]]:
    """The glibc version of this process as a tuple, None where the C
    library is not glibc (musl: Alpine)."""
    try:
        s = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"
    except (ValueError, OSError, AttributeError):
        return None
    m = re.match(r"glibc (\d+)\.(\d+)", s or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _v(t: Tuple[int, int]) -> str:
    return "%d.%d" % t


def explain(path: str, err: Optional[BaseException] = None) -> str:
    """One paragraph: why the native file at path does not load here and
    what to do; err is the loader's exception, quoted at the end."""
    raw = " (the loader said: %s)" % err if err else ""
    if not os.path.exists(path):
        return ("%s is missing: this copy of dlbridge is incomplete. Reinstall it (pip install "
                "--force-reinstall dlbridge), or in a source checkout build it (make lib, or make ext)%s"
                % (path, raw))
    try:
        elf = read_elf(path)
    except (OSError, ElfError, struct.error, IndexError, ValueError) as e:
        return ("%s is not a shared library this system can load (%s): the file is damaged or "
                "was replaced; reinstall dlbridge (pip install --force-reinstall dlbridge)%s"
                % (path, e, raw))
    host = host_machine()
    if elf["machine"] != host or elf["bits"] != (64 if sys.maxsize > 2**32 else 32):
        return ("%s was built for %s (%d-bit), but this Python runs on %s (%d-bit): install the "
                "dlbridge wheel for linux_%s (pip picks it on this machine when one exists), or %s%s"
                % (path, elf["machine"], elf["bits"], host, 64 if sys.maxsize > 2**32 else 32,
                   host, _REBUILD, raw))
    found = host_glibc()
    need = elf["glibc"]
    if need and found is None:
        return ("%s needs the GNU C library (glibc %s or newer), but this system's C library is "
                "another one (musl, as on Alpine Linux): %s%s" % (path, _v(need), _REBUILD, raw))
    if need and found and need > found:
        return ("%s needs glibc %s or newer, but this system has glibc %s: install a dlbridge "
                "wheel tagged manylinux_2_17 (pip install --force-reinstall dlbridge picks the "
                "newest one this system can run), or %s%s"
                % (path, _v(need), _v(found), _REBUILD, raw))
    text = str(err or "")
    m = re.search(r"undefined symbol: (_?Py\w+)", text)
    if m:
        return ("%s was built for a newer Python than this one (%s): it needs %s. Install dlbridge "
                "for this Python (pip install --force-reinstall dlbridge), or %s%s"
                % (path, platform.python_version(), m.group(1), _REBUILD, raw))
    if "cannot open shared object file" in text:
        lib = text.split(":", 1)[0].strip()
        return ("%s needs %s, which this system does not have: install the package that provides "
                "it, or %s%s" % (path, lib, _REBUILD, raw))
    return ("%s could not be loaded: reinstall dlbridge (pip install --force-reinstall dlbridge), "
            "or %s%s" % (path, _REBUILD, raw))


_ET_DYN = 3
_PT_LOAD = 1
_SHT_DYNSYM = 11
_SHT_NOBITS = 8
_ET_NAMES = {0: "of no type", 1: "a relocatable object (.o)", 2: "an executable", 4: "a core dump"}
_TABLE_CAP = 64 << 20  # a dynamic symbol table or string table larger than this is not one we made


def _host_bits() -> int:
    return 64 if sys.maxsize > 2**32 else 32


def check_library(path: str, need: Tuple[str, ...]) -> Optional[str]:
    """Why the file at path is not a whole dlbridge library of this machine,
    or None; read before dlopen, which runs a library's initialisers (a Go
    library starts its runtime, and a process runs one Go runtime for good)
    and maps segments past a truncated file's end (SIGBUS when touched).
    It checks the ELF header (class, byte order, type, machine), that every
    program header, loaded segment and section lies within the file, and
    that the dynamic symbol table defines each name of need (the symbols
    dlbridge binds; need[0] is dlb_abi_version, which says a library is
    dlbridge's); what is missing is named, and a Go library without
    dlbridge's C ABI (a .go.buildinfo section) is told apart from others."""
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as f:
            return _library_problem(f, size, need)
    except OSError as e:
        return "cannot read it (%s)" % e


def _library_problem(f: BinaryIO, size: int, need: Tuple[str, ...]) -> Optional[str]:
    def read(off: int, n: int, what: str) -> bytes:
        if off < 0 or n < 0 or off + n > size:
            raise _Truncated("its %s (bytes %d to %d) end past the end of the file (%d bytes)"
                             % (what, off, off + n, size))
        f.seek(off)
        b = f.read(n)
        if len(b) != n:
            raise _Truncated("its %s (bytes %d to %d) could not be read: the file is %d bytes"
                             % (what, off, off + n, len(b) + off))
        return bytes(b)

    head = f.read(64)
    if head[:4] != b"\x7fELF":
        return "not a shared library: %s" % ("the file is empty" if size == 0 else "not an ELF file")
    bits = {1: 32, 2: 64}.get(head[4])
    end = {1: "<", 2: ">"}.get(head[5])
    if bits is None or end is None:
        return "a damaged ELF file (class %d, byte order %d)" % (head[4], head[5])
    if len(head) < (64 if bits == 64 else 52):
        return "truncated or damaged: the file (%d bytes) ends inside its ELF header" % size
    e_type, machine = struct.unpack_from(end + "HH", head, 16)
    name = _MACHINES.get(machine, "e_machine %d" % machine)
    order = "little" if end == "<" else "big"
    if name != host_machine() or bits != _host_bits() or order != sys.byteorder:
        return ("built for %s (%d-bit, %s-endian), but this Python runs on %s (%d-bit, %s-endian)"
                % (name, bits, order, host_machine(), _host_bits(), sys.byteorder))
    if e_type != _ET_DYN:
        return "not a shared library: an ELF file that is %s" % _ET_NAMES.get(e_type, "of type %d" % e_type)
    if bits == 64:
        phoff, shoff = struct.unpack_from(end + "QQ", head, 0x20)
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(end + "HHHHH", head, 0x36)
        phfmt, phmin, shfmt, shmin, symfmt, symsize = end + "IIQQQQQQ", 56, end + "IIQQQQIIQQ", 64, end + "IBBHQQ", 24
    else:
        phoff, shoff = struct.unpack_from(end + "II", head, 0x1C)
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(end + "HHHHH", head, 0x2A)
        phfmt, phmin, shfmt, shmin, symfmt, symsize = end + "IIIIIIII", 32, end + "IIIIIIIIII", 40, end + "IIIBBH", 16
    try:
        if phnum == 0 or phentsize < phmin:
            return "a damaged ELF file: no program headers to load it by"
        table = read(phoff, phnum * phentsize, "program headers")
        for i in range(phnum):
            ph = struct.unpack_from(phfmt, table, i * phentsize)
            if bits == 64:
                p_type, p_offset, p_filesz = ph[0], ph[2], ph[5]
            else:
                p_type, p_offset, p_filesz = ph[0], ph[1], ph[4]
            if p_type == _PT_LOAD and p_offset + p_filesz > size:
                return ("truncated or damaged: its loaded segment %d (bytes %d to %d) ends past the end of the "
                        "file (%d bytes)" % (i, p_offset, p_offset + p_filesz, size))
        if shnum == 0 or shentsize < shmin or shstrndx >= shnum:
            return "not a dlbridge library: it has no section headers, so no dynamic symbol table to find dlbridge's in"
        table = read(shoff, shnum * shentsize, "section headers")
        sections = [struct.unpack_from(shfmt, table, i * shentsize) for i in range(shnum)]
        for i, sec in enumerate(sections):
            sh_type, sh_offset, sh_size = sec[1], sec[4], sec[5]
            if sh_type != _SHT_NOBITS and sh_offset + sh_size > size:
                return ("truncated or damaged: its section %d (bytes %d to %d) ends past the end of the file "
                        "(%d bytes)" % (i, sh_offset, sh_offset + sh_size, size))
        shstr = sections[shstrndx]
        names = read(shstr[4], min(shstr[5], _TABLE_CAP), "section names")
        go = any(names[s[0]:s[0] + 14] == b".go.buildinfo\0" for s in sections)
        defined: Set[str] = set()
        for sec in sections:
            if sec[1] != _SHT_DYNSYM or sec[6] >= shnum:
                continue
            strtab = sections[sec[6]]
            syms = read(sec[4], min(sec[5], _TABLE_CAP), "dynamic symbols")
            strs = read(strtab[4], min(strtab[5], _TABLE_CAP), "dynamic symbol names")
            for k in range(len(syms) // symsize):
                st = struct.unpack_from(symfmt, syms, k * symsize)
                st_name, st_shndx = st[0], (st[3] if bits == 64 else st[5])
                if st_shndx != 0 and st_name < len(strs):  # defined here, not needed from elsewhere
                    stop = strs.find(b"\0", st_name)
                    defined.add(strs[st_name:stop if stop >= 0 else len(strs)].decode("ascii", "replace"))
    except (_Truncated, struct.error) as e:
        return "truncated or damaged: %s" % e
    if need and need[0] not in defined:
        build = "build it with `dlbridge build -o lib.so PKG...`, which links dlbridge's C ABI and your Go packages into one library"
        if go:
            return "a Go library built without dlbridge: it has no dlbridge ABI symbol (%s); %s" % (need[0], build)
        return "not a dlbridge library: it has no dlbridge ABI symbol (%s); %s" % (need[0], build)
    missing = [n for n in need if n not in defined]
    if missing:
        return ("built from another version of dlbridge: it lacks %s%s; rebuild the library and the package together"
                % (", ".join(missing[:3]), " and %d more" % (len(missing) - 3) if len(missing) > 3 else ""))
    return None


class _Truncated(Exception):
    pass


def load_extension():  # type: ignore[no-untyped-def]
    """Import the extension dlbridge._core, without which dlbridge does not
    work; an ImportError that says why not and what to do. Importing it
    loads no library."""
    try:
        # By name: the extension has no stub for mypy to read.
        return importlib.import_module("dlbridge._core")
    except ImportError as err:  # also a missing file
        here = os.path.dirname(os.path.abspath(__file__))
        try:
            names = sorted(f for f in os.listdir(here) if f.startswith("_core.") and f.endswith(".so"))
        except OSError:
            names = []
        usable = [f for f in names if any(f == "_core" + s for s in importlib.machinery.EXTENSION_SUFFIXES)]
        if not names:
            why = ("the extension dlbridge._core is not built in %s (a source checkout: `make ext` "
                   "builds it; it needs a C compiler and Python's headers, python3-dev)" % here)
        elif not usable:
            why = ("the extension dlbridge._core in %s (%s) was built for another Python than this one "
                   "(%s): install dlbridge for this Python (pip install --force-reinstall dlbridge)"
                   % (here, ", ".join(names), platform.python_version()))
        else:
            why = "the extension dlbridge._core failed to load: " + explain(os.path.join(here, usable[0]), err)
        raise ImportError("dlbridge: " + why) from err


def _main(argv: List[str]) -> int:
    rc = 0
    for path in argv:
        try:
            elf = read_elf(path)
        except (OSError, ElfError, struct.error, IndexError) as e:
            print("%s: %s" % (path, e), file=sys.stderr)
            rc = 1
            continue
        glibc = elf["glibc"]
        print(json.dumps(dict(elf, path=path, glibc=_v(glibc) if glibc else None), sort_keys=True))
    return rc


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
