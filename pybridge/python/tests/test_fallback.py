"""When the extension dlbridge._core is missing or cannot load, dlbridge
runs on ctypes and says so (dlbridge.fast_path, fast_path_reason); when
libdlbridge.so cannot load, the error says why in a user's terms (the glibc
it needs against the one found, the architecture, a missing file) and what
to do. Each case runs a copy of this dlbridge package, altered, in a new
interpreter."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import dlbridge
from dlbridge import _loaderr

PKG = os.path.dirname(os.path.abspath(dlbridge.__file__))

PROBE = """
import json, warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    import dlbridge
out = {"fast": dlbridge.fast_path, "reason": dlbridge.fast_path_reason,
       "warnings": [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]}
try:
    out["sum"] = dlbridge.arange(4, dtype="int32").sum()
    out["lib"] = dlbridge.library_path
except ImportError as e:
    out["error"] = str(e)
print(json.dumps(out))
"""


def library_file():
    return dlbridge.library_path  # loads it, as the rest of the suite does


def package_copy(root, with_library=True):
    """A copy of this package at root/dlbridge without its extension."""
    dst = os.path.join(root, "dlbridge")
    shutil.copytree(PKG, dst, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    if with_library:
        shutil.copy(library_file(), os.path.join(dst, "libdlbridge.so"))
    return dst


def run(pythonpath, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLBRIDGE") and k != "PYTHONPATH"}
    env["PYTHONPATH"] = pythonpath
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE)], env=env, cwd="/",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def extension_name():
    import importlib.machinery

    names = [f for f in os.listdir(PKG) if f.startswith("_core.") and f.endswith(".so")]
    if not names:
        pytest.skip("this dlbridge has no extension to break (a checkout without make ext)")
    usable = [f for f in names if any(f == "_core" + s for s in importlib.machinery.EXTENSION_SUFFIXES)]
    assert usable, names
    return usable[0]


def test_checkout_built_with_make_lib_only(tmp_path):
    # The layout of a source checkout: pybridge/python/dlbridge without the
    # extension and build/libdlbridge.so, found with no environment variable.
    pkg = package_copy(str(tmp_path / "pybridge" / "python"), with_library=False)
    os.makedirs(tmp_path / "build")
    shutil.copy(library_file(), str(tmp_path / "build" / "libdlbridge.so"))
    out = run(os.path.dirname(pkg))
    assert out["fast"] is False
    assert out["reason"].startswith("ctypes: the extension dlbridge._core is not built"), out
    assert out["warnings"] == []  # not built is a checkout's normal state
    assert out["sum"] == 6
    assert out["lib"] == str(tmp_path / "build" / "libdlbridge.so")


def test_no_fastpath_says_so(tmp_path):
    pkg = package_copy(str(tmp_path))
    out = run(os.path.dirname(pkg), {"DLBRIDGE_NO_FASTPATH": "1"})
    assert out["fast"] is False and out["reason"] == "ctypes: DLBRIDGE_NO_FASTPATH is set"
    assert out["sum"] == 6


def test_fast_path_reason_names_the_extension():
    if dlbridge.fast_path:
        assert dlbridge.fast_path_reason.startswith("extension: dlbridge._core (_core.")
    else:
        assert dlbridge.fast_path_reason.startswith("ctypes: ")


def test_extension_that_is_not_a_library(tmp_path):
    name = extension_name()
    pkg = package_copy(str(tmp_path))
    with open(os.path.join(pkg, name), "wb") as f:
        f.write(b"version https://git-lfs.github.com/spec/v1\n")  # e.g. a Git LFS pointer
    out = run(os.path.dirname(pkg))
    assert out["fast"] is False and out["sum"] == 6
    assert out["reason"].startswith("ctypes: the extension dlbridge._core failed to load: "), out
    assert "is not a shared library this system can load" in out["reason"]
    assert len(out["warnings"]) == 1 and "without its CPython extension" in out["warnings"][0]


def test_extension_with_an_undefined_symbol(tmp_path):
    # As the cp311 extension was on CPython 3.10: it needed PyType_GetName.
    name = extension_name()
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if not cc:
        pytest.skip("needs a C compiler")
    pkg = package_copy(str(tmp_path))
    src = tmp_path / "core.c"
    src.write_text("extern void *PyType_GetNameFromTheFuture(void *);\n"
                   "void *PyInit__core(void) { return PyType_GetNameFromTheFuture(0); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", os.path.join(pkg, name), str(src)], check=True)
    out = run(os.path.dirname(pkg))
    assert out["fast"] is False and out["sum"] == 6
    assert "built for a newer Python than this one" in out["reason"], out
    assert "PyType_GetNameFromTheFuture" in out["reason"]
    assert len(out["warnings"]) == 1


def test_extension_for_another_python(tmp_path):
    name = extension_name()
    pkg = package_copy(str(tmp_path))
    shutil.copy(os.path.join(PKG, name), os.path.join(pkg, "_core.cpython-39-x86_64-linux-gnu.so"))
    out = run(os.path.dirname(pkg))
    if out["fast"]:  # a 3.9 interpreter would take it
        pytest.skip("this interpreter loads a cpython-39 extension")
    assert "was built for another Python than this one" in out["reason"], out
    assert out["sum"] == 6


def patched_library(tmp_path, patch):
    pkg = package_copy(str(tmp_path))
    lib = os.path.join(pkg, "libdlbridge.so")
    with open(lib, "rb") as f:
        data = bytearray(f.read())
    patch(data)
    with open(lib, "wb") as f:
        f.write(bytes(data))
    return pkg, lib


def test_library_for_another_architecture(tmp_path):
    other = 183 if _loaderr.host_machine() != "aarch64" else 62

    def patch(data):
        data[18:20] = other.to_bytes(2, "little")

    pkg, lib = patched_library(tmp_path, patch)
    out = run(os.path.dirname(pkg), {"DLBRIDGE_NO_FASTPATH": "1"})
    err = out["error"]
    want = "aarch64" if other == 183 else "x86_64"
    assert "%s was built for %s (64-bit), but this Python runs on %s" % (lib, want, _loaderr.host_machine()) in err
    assert "pip install --no-binary dlbridge dlbridge" in err


def test_library_that_needs_a_newer_glibc(tmp_path):
    need = _loaderr.read_elf(library_file())["glibc"]
    found = _loaderr.host_glibc()
    if not need or not found:
        pytest.skip("the library needs no versioned glibc symbol, or this is not glibc")
    old = ("GLIBC_%d.%d\0" % need).encode()
    new = ("GLIBC_9.%d\0" % need[1]).encode()  # same length: an impossible glibc

    def patch(data):
        assert old in data
        data[:] = data.replace(old, new)

    pkg, lib = patched_library(tmp_path, patch)
    out = run(os.path.dirname(pkg), {"DLBRIDGE_NO_FASTPATH": "1"})
    err = out["error"]
    assert "%s needs glibc 9.%d or newer, but this system has glibc %d.%d" % ((lib, need[1]) + found) in err, err
    assert "manylinux_2_17" in err and "GLIBC_9.%d" % need[1] in err  # the loader's words too


def test_library_that_is_missing(tmp_path):
    out = run(os.path.dirname(package_copy(str(tmp_path))),
              {"DLBRIDGE_LIB": str(tmp_path / "nowhere" / "libdlbridge.so")})
    assert "nowhere/libdlbridge.so (missing)" in out["error"] and "set DLBRIDGE_LIB" in out["error"]
    gone = str(tmp_path / "gone.so")
    assert _loaderr.explain(gone).startswith(gone + " is missing: this copy of dlbridge is incomplete")


def test_read_elf_agrees_with_readelf():
    readelf = shutil.which("readelf")
    if not readelf:
        pytest.skip("needs binutils' readelf")
    lib = library_file()
    got = _loaderr.read_elf(lib)
    text = subprocess.run([readelf, "-V", "-W", lib], check=True, capture_output=True, text=True).stdout
    names = set()
    section = False
    for line in text.splitlines():
        if line.startswith("Version needs section"):
            section = True
        elif line.startswith("Version") and section:
            section = False
        elif section and "Name:" in line and "Flags:" in line:
            names.add(line.split("Name:")[1].split()[0])
    assert names == {n for v in got["versions"].values() for n in v}
    assert got["machine"] == _loaderr.host_machine() and got["bits"] == 64
