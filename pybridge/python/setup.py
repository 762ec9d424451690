"""Builds the dlbridge package: two native parts beside the Python code.

- dlbridge/libdlbridge.so, the Go c-shared library (pybridge/cmd/libdlbridge),
  built with the Go toolchain from the Go module this directory sits in (or
  the copy of it an sdist carries under _gosrc/). Needs Go and a C compiler
  for cgo.
- dlbridge._core, the CPython extension (src/_core.c), compiled against the
  interpreter's Python.h; stable ABI (abi3) on CPython 3.11+ with the GIL.
  It does not link against the library: dlbridge loads the library at its
  first use and hands the extension its entry points.

    pip install ./pybridge/python                        # or pip wheel
    pip install --no-build-isolation ./pybridge/python   # offline, Debian's setuptools
    python3 setup.py build_ext --inplace                 # the checkout itself (make ext)

The wheel runs without Go. GO and CC choose the toolchains.
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70: the wheel package's
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = "module github.com/dlbridge/dlbridge"
# Stable ABI from 3.10 (Ubuntu 22.04's Python; src/_core.c says how the
# buffer protocol, limited API only from 3.11, is declared there), where no
# free-threaded interpreter is in use (abi3 does not cover those).
ABI3 = sys.version_info >= (3, 10) and not sysconfig.get_config_var("Py_GIL_DISABLED")
ABI3_TAG, ABI3_HEX = "cp310", "0x030A0000"


class BuildError(Exception):
    """A missing tool or source, said in one sentence."""


def go_root():
    """The directory of the Go module github.com/dlbridge/dlbridge."""
    cands = [os.environ.get("DLBRIDGE_GO_SRC"), os.path.join(HERE, "_gosrc"),
             os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))]
    for d in cands:
        if not d:
            continue
        try:
            with open(os.path.join(d, "go.mod")) as f:
                if f.readline().strip() == MODULE:
                    return d
        except OSError:
            pass
    raise BuildError(
        "dlbridge: the Go sources were not found (go.mod of github.com/dlbridge/dlbridge in %s); "
        "build from a checkout of dlbridge (pip install ./pybridge/python) or an sdist made by "
        "`python3 setup.py sdist`, or set DLBRIDGE_GO_SRC" % " or ".join(c for c in cands if c))


def find_go():
    go = os.environ.get("GO")
    if go:
        if not shutil.which(go):
            raise BuildError(
                "dlbridge: GO=%s is not an executable: building libdlbridge.so needs the Go "
                "toolchain (1.25 or later)" % go)
        return go
    go = shutil.which("go")
    if not go and os.access("/usr/local/go/bin/go", os.X_OK):
        go = "/usr/local/go/bin/go"
    if not go:
        raise BuildError(
            "dlbridge: building libdlbridge.so needs the Go toolchain (1.25 or later): install it "
            "(https://go.dev/dl) and put `go` on PATH, or set GO=/path/to/go")
    return go


def find_cc(name):
    """The C compiler cgo and the extension use: $CC, else gcc, cc or clang."""
    cc = os.environ.get("CC", "").split()
    if cc:
        if not shutil.which(cc[0]):
            raise BuildError(
                "dlbridge: CC=%s is not an executable: building %s needs a C compiler (gcc)"
                % (cc[0], name))
        return cc[0]
    for c in ("gcc", "cc", "clang"):
        if shutil.which(c):
            return c
    raise BuildError(
        "dlbridge: building %s needs a C compiler (gcc): install it (apt-get install gcc) "
        "or set CC" % name)


class GoLibrary(Extension):
    """libdlbridge.so: a c-shared library built by `go build`, shipped in
    the package under its own name (no Python module suffix)."""

    def __init__(self, name, package_dir):
        super().__init__(name, sources=[])
        self.main_package = package_dir


class BuildExt(build_ext):
    def get_ext_filename(self, fullname):
        ext = self.ext_map.get(fullname) if hasattr(self, "ext_map") else None
        if isinstance(ext, GoLibrary):
            return os.path.join(*fullname.split(".")[:-1], fullname.split(".")[-1] + ".so")
        return super().get_ext_filename(fullname)

    def run(self):
        try:
            super().run()
        except BuildError as e:
            sys.exit(str(e))

    def build_extension(self, ext):
        if isinstance(ext, GoLibrary):
            self.build_go(ext)
            return
        find_cc("the extension dlbridge._core")
        include = sysconfig.get_paths()["include"]
        if not os.path.exists(os.path.join(include, "Python.h")):
            raise BuildError(
                "dlbridge: building the extension dlbridge._core needs Python's C headers "
                "(%s/Python.h is missing): install them (apt-get install python3-dev)" % include)
        # dlopen, dlsym and dlerror bind at the floor's versions too (this
        # glibc's libc has them at 2.34, which would make the wheel need
        # 2.34). The stubs' folder goes first: the linker takes the first
        # folder with a libc.so or libdl.a, and Python's LIBDIR has both.
        floor = self.glibc_floor()
        ext.library_dirs = [f[2:] for f in floor if f.startswith("-L")] + list(ext.library_dirs)
        ext.extra_link_args = [f for f in floor if not f.startswith("-L")] + list(ext.extra_link_args)
        super().build_extension(ext)

    def build_go(self, ext):
        go, root = find_go(), go_root()
        find_cc("libdlbridge.so (cgo)")
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        # Reproducible: no build paths (-trimpath), no Go build ID, no symbol
        # table or DWARF; the module's vendor/ directory where an sdist has it.
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false",
               "-ldflags=-s -w -buildid=", "-o", out, ext.main_package]
        if os.path.isdir(os.path.join(root, "vendor")):
            cmd[2:2] = ["-mod=vendor"]
        env = dict(os.environ, CGO_ENABLED="1")
        floor = self.glibc_floor()
        if floor:
            env["CGO_LDFLAGS"] = " ".join(floor + [env.get("CGO_LDFLAGS", "")]).strip()
        if self.verbose:  # setup.py -q (make ext, make demo): quiet
            print(" ".join(cmd), "(in %s)" % root, "CGO_LDFLAGS=%r" % env.get("CGO_LDFLAGS", ""), flush=True)
        try:
            subprocess.run(cmd, cwd=root, env=env, check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            raise BuildError("dlbridge: `go build` of libdlbridge.so failed: %s" % e) from None
        header = os.path.splitext(out)[0] + ".h"  # go build writes the cgo header beside it
        if os.path.exists(header):
            os.remove(header)


    def glibc_floor(self):
        """Linker flags that bind glibc symbols at the versions of glibc
        DLBRIDGE_GLIBC_FLOOR (default 2.17; empty: this machine's), through
        stub libraries written by glibc_floor.py; [] where that cannot be
        done (not glibc, no objdump): the wheel tag then says what the
        library needs."""
        want = os.environ.get("DLBRIDGE_GLIBC_FLOOR", "2.17")
        if not want or not sys.platform.startswith("linux"):
            return []
        try:
            if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
                return []
        except (ValueError, OSError):
            return []
        import importlib.util

        spec = importlib.util.spec_from_file_location("_dlbridge_glibc_floor", os.path.join(HERE, "glibc_floor.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        cc = (os.environ.get("CC") or find_cc("libdlbridge.so (cgo)")).split()[0]
        try:
            return mod.write_stubs(os.path.join(os.path.abspath(self.build_temp), "glibc-stubs"),
                                   tuple(int(x) for x in want.split(".")), cc)
        except (mod.FloorError, OSError, subprocess.CalledProcessError) as e:
            print("dlbridge: note: libdlbridge.so is linked against this machine's glibc versions, not "
                  "%s's: %s" % (want, e), flush=True)
            return []


class Sdist(sdist):
    """An sdist that carries the Go module (under _gosrc/) with the modules
    it needs (_gosrc/vendor, `go mod vendor`), so that a wheel builds from
    it alone, with no network (GOPROXY=off)."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = go_root()
        dest = os.path.join(base_dir, "_gosrc")
        try:
            listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True,
                                    capture_output=True).stdout.decode().split("\0")
        except (OSError, subprocess.CalledProcessError):  # an sdist of an sdist
            listed = [os.path.relpath(os.path.join(d, f), root)
                      for d, _, fs in os.walk(root) for f in fs]
        # Every file of the module (embedded files such as cuda/kernels/*.ptx
        # too) but this package, programs and tests.
        skip_dirs = ("pybridge/python/", "bench/", "examples/", "scripts/", "testdata/", ".")
        for rel in listed:
            if not rel or rel.startswith(skip_dirs) or rel.endswith(("_test.go", ".test")) or "/testdata/" in rel:
                continue
            os.makedirs(os.path.dirname(os.path.join(dest, rel)) or dest, exist_ok=True)
            shutil.copy2(os.path.join(root, rel), os.path.join(dest, rel))
        if os.path.isdir(os.path.join(root, "vendor")):  # an sdist of an sdist: copied above
            return
        try:
            subprocess.run([find_go(), "mod", "vendor", "-o", os.path.abspath(os.path.join(dest, "vendor"))],
                           cwd=root, check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit("dlbridge: `go mod vendor` for the sdist failed: %s" % e)
        except BuildError as e:
            sys.exit(str(e))


# What a manylinux wheel may link besides glibc's versioned symbols (PEP 600
# and the manylinux2014 policy of auditwheel): the libraries of glibc itself.
MANYLINUX_LIBS = {"libc.so.6", "libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1",
                  "libgcc_s.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


def _loaderr():
    """dlbridge/_loaderr.py (its ELF reader) loaded by path: the package
    itself is not importable at build time."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_dlbridge_loaderr", os.path.join(HERE, "dlbridge", "_loaderr.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def earned_platform_tag(root, plat):
    """The platform tag the ELF files under root earn: manylinux_2_X_<arch>
    where X is the newest glibc version their symbols need (2.17 at least,
    with its alias manylinux2014), and they link nothing beyond glibc's own
    libraries; else plat as it was (linux_<arch>). The tag is what a check
    of the binaries finds, not a name chosen in advance."""
    if not plat.startswith("linux_"):
        return plat
    arch = plat[len("linux_"):]
    read_elf = _loaderr().read_elf
    need = (2, 17)
    found = False
    for d, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if not f.endswith(".so"):
                continue
            elf = read_elf(os.path.join(d, f))
            found = True
            if elf["machine"] != arch or not set(elf["needed"]) <= MANYLINUX_LIBS:
                return plat
            if any(not re.fullmatch(r"GLIBC_\d+\.\d+(\.\d+)?|GCC_\d+(\.\d+)*", v)
                   for vs in elf["versions"].values() for v in vs):  # GLIBC_PRIVATE, ...
                return plat
            if elf["glibc"] and elf["glibc"] > need:
                need = elf["glibc"]
    if not found:
        return plat
    tag = "manylinux_%d_%d_%s" % (need + (arch,))
    return tag + ".manylinux2014_" + arch if need == (2, 17) else tag


class BdistWheel(bdist_wheel):
    """A wheel tagged manylinux_2_X as its binaries earn (earned_platform_tag)."""

    def get_tag(self):
        impl, abi, plat = super().get_tag()
        return impl, abi, earned_platform_tag(self.bdist_dir, plat)


def extensions():
    try:
        root = go_root()
    except BuildError:
        root = os.path.join(HERE, "_gosrc")  # reported when the library is built
    core = Extension(
        "dlbridge._core",
        sources=["src/_core.c"],
        include_dirs=[os.path.join(root, "pybridge", "capi"), os.path.join(root, "pybridge")],
        depends=[os.path.join(root, "pybridge", "capi", h) for h in ("dlbridge.h", "capi.h")]
        + [os.path.join(root, "pybridge", "pyapi.h"), "src/_exports.h"],
        libraries=["dl"],  # dlopen, in libc itself only from glibc 2.34
        # A function missing from the limited API must fail the build, not
        # the import; -ffile-prefix-map and -s (stripped) keep build paths out.
        extra_compile_args=["-std=c11", "-Werror=implicit-function-declaration",
                            "-ffile-prefix-map=%s=." % HERE, "-ffile-prefix-map=%s=." % root],
        extra_link_args=["-s"],
        define_macros=[("Py_LIMITED_API", ABI3_HEX)] if ABI3 else [],
        py_limited_api=ABI3,
    )
    return [GoLibrary("dlbridge.libdlbridge", "./pybridge/cmd/libdlbridge"), core]


setup(
    packages=["dlbridge"],
    package_data={"dlbridge": ["py.typed", "*.pyi"]},
    # LICENSE links to the repository's; wheel and sdist carry its text.
    license_files=["LICENSE"],
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildExt, "sdist": Sdist, "bdist_wheel": BdistWheel},
    options={"bdist_wheel": {"py_limited_api": ABI3_TAG}} if ABI3 else {},
)
