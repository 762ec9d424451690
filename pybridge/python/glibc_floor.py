"""Link libdlbridge.so against an old glibc's symbol versions (setup.py).

A binary linked on this machine binds each glibc function to the newest
version of it that this glibc has: pthread_create@GLIBC_2.34 on glibc 2.36,
which a system with glibc 2.28 (RHEL 8) refuses to load. glibc keeps every
older version of a symbol it ever had, so a binary that names the older
ones runs on both. This module makes the link do that, as an old-glibc
sysroot would (and as zig cc's glibc stubs do): it writes stub copies of
libc.so.6, libpthread.so.0 and libdl.so.2 that export each symbol of this
machine's glibc at the newest version no newer than the floor (2.17 by
default: manylinux2014, CentOS 7, and the first glibc of aarch64), with the
libraries of that glibc (dlopen in libdl, pthread_* in libpthread, as before
glibc 2.34 merged them into libc), and a libc.so linker script beside them.
Linking with -L on that directory binds every glibc reference, from C and
from the Go linker's own dynamic imports alike, to those versions; symbols
that glibc did not have at the floor stay undefined and fail the link with
their name. At run time the real glibc provides them: the stubs only decide
the versions written into the binary. scripts/check-dist.py and setup.py's
wheel tag then read the result from the binary, not from this intent.

    python3 glibc_floor.py DIR [FLOOR]   # writes the stubs, prints -L DIR
"""

import os
import re
import shutil
import subprocess
import sys

# Before glibc 2.34 these lived outside libc.so.6 (the floor's layout).
DL_SYMBOLS = {"dlopen", "dlclose", "dlsym", "dlerror", "dladdr", "dladdr1", "dlinfo", "dlmopen", "dlvsym"}
PTHREAD_PREFIXES = ("pthread_", "sem_", "__pthread_")
_LINE = re.compile(r"^[0-9a-f]+ (.{7}) (\S+)\s+([0-9a-f]+)\s+(?:\((\S+)\)|(\S+))\s+(\S+)$")


class FloorError(Exception):
    """The stubs cannot be made here (no binutils, no glibc)."""


def _version(v):
    m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.(\d+))?", v)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def _file(cc, name):
    p = subprocess.run([cc, "-print-file-name=" + name], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(p) or not os.path.exists(p):
        raise FloorError("%s does not know where %s is (is this a glibc system?)" % (cc, name))
    return os.path.realpath(p)


def symbols(objdump, path):
    """name -> [(version tuple, version name, kind, size)] of path's defined
    dynamic symbols (kind "F" function, "O" object)."""
    out = subprocess.run([objdump, "-T", path], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        flags, section, size, hidden, shown, name = m.groups()
        vname = hidden or shown
        v = _version(vname)
        if (section in ("*UND*", "*ABS*") or v is None or section.startswith((".tbss", ".tdata"))
                or not re.fullmatch(r"[A-Za-z_]\w*", name)):  # version nodes, TLS
            continue
        kind = "O" if "O" in flags else "F"
        syms.setdefault(name, []).append((v, vname, kind, int(size, 16)))
    return syms


def _library_of(name):
    if name in DL_SYMBOLS:
        return "libdl.so.2"
    if name.startswith(PTHREAD_PREFIXES):
        return "libpthread.so.0"
    return "libc.so.6"


def write_stubs(out, floor=(2, 17), cc="gcc", objdump=None):
    """Write the stub libraries and libc.so into the directory out; returns
    the linker flags that use them."""
    objdump = objdump or shutil.which(re.sub(r"gcc$|cc$", "objdump", os.path.basename(cc))) or shutil.which("objdump")
    if not objdump:
        raise FloorError("objdump (binutils) is needed to read this glibc's symbol versions")
    cc_path = shutil.which(cc)
    if not cc_path:
        raise FloorError("no C compiler %s" % cc)
    floor3 = tuple(floor) + (0,) * (3 - len(floor))
    chosen = {}
    for lib in ("libc.so.6", "libpthread.so.0", "libdl.so.2"):
        for name, vs in symbols(objdump, _file(cc, lib)).items():
            ok = [x for x in vs if x[0] <= floor3]
            if ok:
                best = max(ok)
                if name not in chosen or best[0] > chosen[name][0]:
                    chosen[name] = best
    if "pthread_create" not in chosen or "memcpy" not in chosen:
        raise FloorError("this glibc's symbols could not be read")
    os.makedirs(out, exist_ok=True)
    libs = {}
    for name, (v, vname, kind, size) in sorted(chosen.items()):
        libs.setdefault(_library_of(name), []).append((name, vname, kind, size))
    for lib, syms in sorted(libs.items()):
        base = os.path.join(out, lib.split(".so")[0])
        with open(base + ".c", "w") as f:
            for name, _, kind, size in syms:
                if kind == "O":
                    f.write("char %s[%d];\n" % (name, max(size, 1)))
                else:
                    f.write("void %s(void) {}\n" % name)
        nodes = {}
        for name, vname, _, _ in syms:
            nodes.setdefault(vname, []).append(name)
        with open(base + ".map", "w") as f:
            for vname in sorted(nodes, key=_version):
                f.write("%s {\n  global:\n%s};\n" % (vname, "".join("    %s;\n" % n for n in nodes[vname])))
        subprocess.run([cc_path, "-shared", "-nostdlib", "-fno-builtin", "-w", "-o", os.path.join(out, lib),
                        "-Wl,-soname," + lib, "-Wl,--version-script=" + base + ".map", base + ".c"], check=True)
        if lib != "libc.so.6":  # -lpthread, -ldl find the stubs
            dev = os.path.join(out, lib.split(".so")[0] + ".so")
            if os.path.lexists(dev):
                os.remove(dev)
            os.symlink(lib, dev)
    # libc.so: as glibc's own linker script, with the stub in the real one's place.
    with open(os.path.join(out, "libc.so"), "w") as f:
        f.write("GROUP ( %s %s AS_NEEDED ( %s ) )\n" % (
            os.path.join(os.path.abspath(out), "libc.so.6"), _file(cc, "libc_nonshared.a"),
            _file(cc, "ld-linux-x86-64.so.2" if "x86_64" in _machine(cc) else "ld-linux-aarch64.so.1")))
    # -lpthread -ldl: the floor's glibc needs both as DT_NEEDED where they are used.
    return ["-L" + os.path.abspath(out), "-lpthread", "-ldl"]


def _machine(cc):
    return subprocess.run([cc, "-dumpmachine"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    floor = tuple(int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "2.17").split("."))
    print(" ".join(write_stubs(sys.argv[1], floor)))
