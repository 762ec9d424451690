"""Loading a library: what is not a whole dlbridge library of this machine
(a plain C library, a Go library built without dlbridge, one of another
dlbridge version, a truncated or foreign file) is refused before dlopen with
an ImportError that says what it is, and leaves the process able to load
its default library; another Go runtime already in the process is found
among the mapped objects whatever its file is named and after its file was
deleted. Each case runs in a fresh interpreter without DLBRIDGE_LIB, as a
user's process starts."""

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap

import pytest

INSTALLED = os.environ.get("DLBRIDGE_EXPECT_INSTALLED") == "1"


def _need(tool):
    path = shutil.which(os.environ.get(tool.upper(), tool))
    if path is None:
        if INSTALLED:
            pytest.fail("%s is not on PATH: the loading tests build small libraries with it" % tool)
        pytest.skip("needs %s to build the libraries of the loading tests" % tool)
    return path


def _child(code, timeout=120):
    """Runs code in a fresh interpreter without DLBRIDGE_LIB; the last line
    of its output, as JSON, or a failure that shows how it ended (a signal:
    the process died inside the loader)."""
    env = {k: v for k, v in os.environ.items() if k != "DLBRIDGE_LIB"}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd="/",
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, "status %d\n%s%s" % (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def default_lib():
    """The library a process of this environment loads by default."""
    return _child("""
    import json, dlbridge
    dlbridge.arange(1)
    print(json.dumps(dlbridge.library_path))
    """)


@pytest.fixture(scope="module")
def go_lib(tmp_path_factory):
    """A Go c-shared library that does not link dlbridge (its own Go
    runtime, nothing of dlbridge's ABI)."""
    go = _need("go")
    d = tmp_path_factory.mktemp("golib")
    (d / "go.mod").write_text("module example.com/golib\n\ngo 1.22\n")
    (d / "main.go").write_text('package main\n\nimport "C"\n\n//export Seven\nfunc Seven() C.int { return 7 }\n\n'
                               "func main() {}\n")
    out = d / "libgo.so"
    env = dict(os.environ, CGO_ENABLED="1", GOWORK="off", GOFLAGS="", GOPROXY="off")
    r = subprocess.run([go, "build", "-buildmode=c-shared", "-o", str(out), "."], cwd=str(d), env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return str(out)


def _gcc(tmp_path, name, source, *flags):
    gcc = _need("gcc")
    src = tmp_path / (name + ".c")
    src.write_text(source)
    out = tmp_path / name
    subprocess.run([gcc, *flags, "-o", str(out), str(src)], check=True)
    return str(out)


def _last_segment_end(path):
    """The end in the file of the last loaded segment of an ELF64 file."""
    with open(path, "rb") as f:
        data = f.read()
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    start = end = 0
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1 and p_filesz and p_offset + p_filesz > end:  # PT_LOAD
            start, end = p_offset, p_offset + p_filesz
    return start, end


def _make(kind, tmp_path, default_lib, go_lib):
    """The file of case kind, and what the refusal says of it."""
    p = tmp_path / ("lib%s.so" % kind)
    if kind == "c":
        return _gcc(tmp_path, "libc.so", "int plain(void) { return 1; }\n", "-shared", "-fPIC"), \
            "not a dlbridge library: it has no dlbridge ABI symbol (dlb_abi_version)"
    if kind == "go":
        return go_lib, "a Go library built without dlbridge: it has no dlbridge ABI symbol (dlb_abi_version)"
    if kind == "other-version":
        return _gcc(tmp_path, "libold.so", "int dlb_abi_version(void) { return 1; }\n", "-shared", "-fPIC"), \
            "built from another version of dlbridge: it lacks dlb_"
    data = open(default_lib, "rb").read()
    if kind == "cut-in-a-segment":
        # dlopen maps the segment past the file's end: SIGBUS when touched.
        start, end = _last_segment_end(default_lib)
        p.write_bytes(data[:(start + end) // 2])
        return str(p), "truncated or damaged: its loaded segment"
    if kind == "cut-in-the-section-headers":
        p.write_bytes(data[:-100])
        return str(p), "truncated or damaged: its section headers"
    if kind == "cut-in-the-header":
        p.write_bytes(data[:40])
        return str(p), "truncated or damaged: the file (40 bytes) ends inside its ELF header"
    if kind == "empty":
        p.write_bytes(b"")
        return str(p), "not a shared library: the file is empty"
    if kind == "text":
        p.write_text("INPUT(libdlbridge.so)\n")  # a linker script, as some lib*.so files are
        return str(p), "not a shared library: not an ELF file"
    if kind == "foreign-machine":
        b = bytearray(open(_gcc(tmp_path, "libc.so", "int plain(void) { return 1; }\n", "-shared", "-fPIC"),
                           "rb").read())
        other, name = (183, "aarch64") if b[18] != 183 else (62, "x86_64")
        b[18:20] = struct.pack("<H", other)
        p.write_bytes(bytes(b))
        return str(p), "built for %s (64-bit, little-endian), but this Python runs on" % name
    if kind == "object":
        return _gcc(tmp_path, "plain.o", "int plain(void) { return 1; }\n", "-c", "-fPIC"), \
            "not a shared library: an ELF file that is a relocatable object (.o)"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["c", "go", "other-version", "cut-in-a-segment", "cut-in-the-section-headers",
                                  "cut-in-the-header", "empty", "text", "foreign-machine", "object"])
def test_what_is_not_a_whole_dlbridge_library_is_refused_before_dlopen(kind, tmp_path, default_lib, go_lib):
    if kind == "foreign-machine" and (sys.byteorder != "little" or sys.maxsize < 2**32):
        pytest.skip("the forged header is a 64-bit little-endian one")
    path, says = _make(kind, tmp_path, default_lib, go_lib)
    out = _child("""
    import json, os, dlbridge
    out = {}
    try:
        dlbridge.load_library(%r)
        out["loaded"] = dlbridge.library_path
    except ImportError as e:
        out["error"] = str(e)
    maps = open("/proc/self/maps").read()
    out["mapped"] = %r in maps
    out["threads"] = len(os.listdir("/proc/self/task"))  # no Go runtime started
    out["after"] = dlbridge.arange(3).tolist()  # the default library still loads
    out["library"] = dlbridge.library_path
    print(json.dumps(out))
    """ % (path, path))
    assert "loaded" not in out, out
    assert out["error"].startswith("dlbridge: cannot load %s: %s" % (path, says)), out["error"]
    assert not out["mapped"] and out["threads"] == 1
    assert out["after"] == [0, 1, 2] and out["library"] == default_lib


def test_a_good_library_loads_after_a_refused_one(tmp_path, default_lib, go_lib):
    out = _child("""
    import json, dlbridge
    refused = []
    for bad in (%r, %r):
        try:
            dlbridge.load_library(bad)
        except ImportError as e:
            refused.append(bad)
    print(json.dumps({"refused": refused, "loaded": dlbridge.load_library(%r), "sum": dlbridge.arange(4).sum()}))
    """ % (go_lib, _make("c", tmp_path, default_lib, go_lib)[0], default_lib))
    assert len(out["refused"]) == 2 and out["loaded"] == default_lib and out["sum"] == 6


@pytest.mark.parametrize("how", ["named-without-.so", "deleted-after-loading", "both"])
def test_another_go_runtime_is_found_by_what_is_mapped(how, tmp_path, go_lib):
    name = "gohost.bin" if how != "deleted-after-loading" else "libgone.so"
    copy = tmp_path / name
    shutil.copy(go_lib, copy)
    out = _child("""
    import ctypes, json, os
    lib = ctypes.CDLL(%r)
    assert lib.Seven() == 7  # its Go runtime runs
    if %r:
        os.unlink(%r)
    import dlbridge
    out = {}
    try:
        dlbridge.arange(3)
        out["loaded"] = dlbridge.library_path
    except RuntimeError as e:
        out["error"] = str(e)
    out["after"] = lib.Seven() + sum(range(3))  # the process goes on, on the Go runtime it had
    print(json.dumps(out))
    """ % (str(copy), how != "named-without-.so", str(copy)))
    assert "loaded" not in out, out
    msg = out["error"]
    assert ("the Go library %s" % copy) in msg and "one Go runtime per process" in msg, msg
    assert ("(its file was deleted since)" in msg) == (how != "named-without-.so"), msg
    assert out["after"] == 10
