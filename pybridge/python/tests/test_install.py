"""The package as users get it: import starts nothing (no library, no Go
runtime, one thread), the library loads at the first call that needs it,
and, where CI installed the wheel (DLBRIDGE_EXPECT_INSTALLED=1, `make
pytest`), the tests run against that installed package with no environment
variable. Also the build's messages when a tool is missing."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

import dlbridge

HERE = os.path.dirname(os.path.abspath(__file__))
SETUP = os.path.join(HERE, os.pardir, "setup.py")
INSTALLED = os.environ.get("DLBRIDGE_EXPECT_INSTALLED") == "1"


STATE = """
import json, os
def state():
    from dlbridge import _lib
    core = _lib._core.bound()
    return {"threads": len(os.listdir("/proc/self/task")), "loaded": _lib.loaded(), "bound": core,
            "mapped": "libdlbridge" in open("/proc/self/maps").read()}
"""


def py(code, env_extra=None, cwd="/"):
    env = dict(os.environ)
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, "-c", STATE + textwrap.dedent(code)], env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])




def test_import_starts_nothing():
    env = {}
    out = py("""
    before = len(os.listdir("/proc/self/task"))
    import dlbridge
    after_import = state()
    fast = dlbridge.Tensor  # needs no library
    after_fast = state()
    s = dlbridge.arange(3).sum()
    print(json.dumps({"before": before, "import": after_import, "fast": after_fast, "sum": s,
                      "used": state()}))
    """, env)
    assert out["before"] == 1
    idle = {"threads": 1, "loaded": False, "bound": False, "mapped": False}
    assert out["import"] == idle and out["fast"] == idle
    assert out["sum"] == 3
    used = out["used"]
    assert used["loaded"] and used["mapped"] and used["threads"] > 1  # Go's threads
    assert used["bound"] is True


def test_first_call_through_the_extension_loads_the_library():
    pytest.importorskip("numpy")
    out = py("""
    import numpy as np
    import dlbridge
    t = dlbridge.from_dlpack(np.arange(4.0))  # _core.take is the first call into the library
    print(json.dumps({"sum": t.sum(), "state": state()}))
    """)
    assert out["sum"] == 6.0 and out["state"]["loaded"] and out["state"]["bound"]


def test_library_path_loads_on_demand():
    out = py("""
    import dlbridge
    p = dlbridge.library_path
    print(json.dumps({"path": p, "state": state()}))
    """)
    assert out["path"].endswith(".so") and out["state"]["loaded"]
    assert os.path.exists(out["path"])


@pytest.mark.skipif(not INSTALLED, reason="runs where CI installed the wheel (make pytest)")
def test_runs_against_the_installed_wheel():
    pkg = os.path.dirname(os.path.abspath(dlbridge.__file__))
    source = os.path.normpath(os.path.join(HERE, os.pardir))  # pybridge/python
    assert not pkg.startswith(source + os.sep), pkg  # not the source tree's package
    assert pkg.startswith(sys.prefix) and "site-packages" in pkg, (pkg, sys.prefix)  # the venv's
    assert "DLBRIDGE_LIB" not in os.environ and "PYTHONPATH" not in os.environ
    assert os.path.dirname(dlbridge.library_path) == pkg
    (core,) = [os.path.join(pkg, f) for f in os.listdir(pkg) if f.startswith("_core.") and f.endswith(".so")]
    free_threaded = sysconfig.get_config_var("Py_GIL_DISABLED")
    if sys.version_info >= (3, 10) and not free_threaded:
        assert core.endswith(".abi3.so"), core
    # The check, from /, no environment variable.
    r = subprocess.run([sys.executable, "-c", "import dlbridge; print(dlbridge.Tensor is not None, dlbridge.arange(3).sum())"],
                       cwd="/", capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if not k.startswith("DLBRIDGE")})
    assert r.stdout.split() == ["True", "3"], r.stdout + r.stderr
    # A platform wheel (not pure), tagged abi3 where it is.
    from importlib import metadata

    wheel = metadata.distribution("dlbridge").read_text("WHEEL")
    assert "Root-Is-Purelib: false" in wheel
    tag = [line.split(": ", 1)[1] for line in wheel.splitlines() if line.startswith("Tag: ")]
    # The manylinux tag setup.py's check of the binaries gave it: the newest
    # glibc any of them needs (manylinux2014 too at 2.17).
    import platform
    import re

    from dlbridge import _loaderr

    arch = platform.machine()
    need = max([(2, 17)] + [_loaderr.read_elf(os.path.join(pkg, f))["glibc"] or (2, 17)
                            for f in os.listdir(pkg) if f.endswith(".so")])
    plat = "manylinux_%d_%d_%s" % (need + (arch,))
    if need == (2, 17):
        plat += ".manylinux2014_" + arch
    assert tag and all(re.fullmatch(r"cp3\d+-(abi3|cp3\d+t?)-[a-z0-9_]+", t) for t in tag), tag
    if sys.version_info >= (3, 10) and not free_threaded:
        assert {t.rsplit("-", 1)[0] for t in tag} == {"cp310-abi3"}, tag
    assert sorted(t.rsplit("-", 1)[1] for t in tag) == sorted(plat.split(".")), (tag, plat)


@pytest.mark.skipif(not os.path.exists(SETUP), reason="needs the package's source (setup.py)")
@pytest.mark.parametrize("var, tool", [("GO", "Go toolchain"), ("CC", "C compiler")])
def test_build_says_which_tool_is_missing(tmp_path, var, tool):
    setuptools = pytest.importorskip("setuptools")
    assert setuptools
    if var != "GO" and not shutil.which(os.environ.get("GO", "go")):
        # The build looks for Go first: without it, the C compiler is never reached.
        pytest.skip("needs the Go toolchain to reach the C compiler check")
    env = dict(os.environ, **{var: "/nonexistent/" + var.lower()})
    r = subprocess.run([sys.executable, SETUP, "-q", "build_ext", "-b", str(tmp_path / "b"), "-t",
                        str(tmp_path / "t")], cwd=os.path.dirname(SETUP), env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "%s=/nonexistent/%s is not an executable" % (var, var.lower()) in r.stderr, r.stderr[-2000:]
    assert tool in r.stderr
