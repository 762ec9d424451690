"""Builds the wheel of gofunc: the Python package gofunc and libgofunc.so,
one c-shared library with dlbridge's C ABI and the Go package of this
example (the folder above), linked by `dlbridge build`.

    pip wheel --no-build-isolation --no-deps -w dist ./examples/gofunc/python

Copy this folder next to your own Go package to ship yours: change NAME,
GO_PACKAGE and the package folder (NAME/__init__.py re-exports
dlbridge.ops.<your namespace>'s functions), and regenerate the stub:

    python3 -m dlbridge.stubgen build/lib*/NAME/libNAME.so -m NAME -o NAME/__init__.pyi

The build needs Go (GO names the go command) and a C compiler for cgo.
DLBRIDGE names a dlbridge command to use; without it the build runs
`go run github.com/dlbridge/dlbridge/cmd/dlbridge` from the Go package's
module, so that the dlbridge your go.mod requires builds the library. The
wheel runs without Go; it depends on the dlbridge package for the Python
side.
"""

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # setuptools >= 70 carries its own
    from setuptools.command.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "gofunc"
# The Go package(s) linked into the library, relative to this folder.
GO_PACKAGE = os.path.join(HERE, os.pardir)


class GoLibrary(Extension):
    """lib<NAME>.so, built by `dlbridge build` (not a Python extension)."""

    def __init__(self, name, packages):
        super().__init__(name, sources=[])
        self.go_packages = packages


def dlbridge_command():
    cmd = os.environ.get("DLBRIDGE")
    if cmd:
        return shlex.split(cmd)
    go = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    if not shutil.which(go):
        sys.exit("%s: building lib%s.so needs the Go toolchain (go on PATH, or GO=/path/to/go), "
                 "or DLBRIDGE=/path/to/dlbridge" % (NAME, NAME))
    return [go, "run", "github.com/dlbridge/dlbridge/cmd/dlbridge"]


class BuildExt(build_ext):
    def get_ext_filename(self, fullname):
        if isinstance(self.ext_map.get(fullname), GoLibrary):
            parts = fullname.split(".")
            return os.path.join(*parts[:-1], parts[-1] + ".so")
        return super().get_ext_filename(fullname)

    def build_extension(self, ext):
        if not isinstance(ext, GoLibrary):
            return super().build_extension(ext)
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        pkgs = [os.path.abspath(p) for p in ext.go_packages]
        cmd = dlbridge_command() + ["build", "-ldflags", "-s -w", "-o", out] + pkgs
        print(" ".join(shlex.quote(c) for c in cmd), flush=True)
        try:
            # From the Go package's folder: `go run` takes dlbridge at the
            # version its module requires.
            subprocess.run(cmd, cwd=pkgs[0], check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit("%s: dlbridge build failed: %s" % (NAME, e))


class BdistWheel(bdist_wheel):
    """A platform wheel for any Python 3: the library is Go and C, with no
    Python extension in it."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(
    packages=[NAME],
    package_data={NAME: ["py.typed", "*.pyi"]},
    ext_modules=[GoLibrary(NAME + ".lib" + NAME, [GO_PACKAGE])],
    cmdclass={"build_ext": BuildExt, "bdist_wheel": BdistWheel},
)
