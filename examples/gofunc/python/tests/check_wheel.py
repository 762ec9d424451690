"""Checks the installed gofunc wheel as its users have it (make gofunc-wheel-test):
run with the Python of a fresh virtual environment holding the dlbridge and
gofunc wheels, from outside the source tree, without DLBRIDGE_LIB or
PYTHONPATH.

- import gofunc loads the library inside the wheel, and its functions work
  on NumPy arrays;
- the wheel's stub (__init__.pyi) is what dlbridge.stubgen writes for the
  library, and mypy (with this environment's Python) passes a script that
  calls gofunc rightly and finds each mistake of one that calls it wrongly;
- one Go runtime per process: a process that runs another Go-built library
  first refuses gofunc's, or gofunc's refuses the other, with both paths in
  a RuntimeError, and goes on.

Prints one line per check; exits 1 at the first failure.
"""

import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg):
    print("check_wheel: FAIL: " + msg)
    sys.exit(1)


def ok(msg):
    print("check_wheel: ok: " + msg, flush=True)


def check_installed():
    for k in ("DLBRIDGE_LIB", "PYTHONPATH"):
        if os.environ.get(k):
            fail("%s is set (%s): the check is of the installed wheels alone" % (k, os.environ[k]))
    import numpy

    import dlbridge
    import gofunc

    site = os.path.realpath(sys.prefix)
    for m in (dlbridge, gofunc):
        if not os.path.realpath(m.__file__).startswith(site + os.sep):
            fail("%s comes from %s, not from this environment (%s)" % (m.__name__, m.__file__, site))
    lib = os.path.join(os.path.dirname(os.path.realpath(gofunc.__file__)), "libgofunc.so")
    if os.path.realpath(dlbridge.library_path) != lib:
        fail("dlbridge.library_path is %s, want the wheel's %s" % (dlbridge.library_path, lib))
    ok("import gofunc loaded %s" % lib)

    x = numpy.arange(16, dtype=numpy.float32)
    out = numpy.zeros_like(x)
    if gofunc.scale(out, x, 2.0) is not None or not numpy.array_equal(out, x * 2):
        fail("scale(out, x, 2.0): out = %s" % out)
    gofunc.scale(out, x)  # the default factor, 2.0
    if not numpy.array_equal(out, x * 2):
        fail("scale(out, x): out = %s" % out)
    gofunc.scale(out=out, x=x, factor=0.5)
    if not numpy.array_equal(out, x * 0.5):
        fail("scale(out=out, x=x, factor=0.5): out = %s" % out)
    ok("scale on NumPy float32 arrays: out == x*2, x*0.5")

    m = numpy.array([[3, 4, 0], [0, 0, 0], [1, 2, 2]], dtype=numpy.float32)
    norms = gofunc.normalize_rows(m)
    if type(norms) is not numpy.ndarray or norms.dtype != numpy.float32 or norms.tolist() != [5, 0, 3]:
        fail("normalize_rows: norms %r" % (norms,))
    want = numpy.array([[0.6, 0.8, 0], [0, 0, 0], [1 / 3, 2 / 3, 2 / 3]], dtype=numpy.float32)
    if not numpy.allclose(m, want):
        fail("normalize_rows: rows %s" % m)
    ok("normalize_rows: rows of unit length in place, the norms as a NumPy array")

    try:
        gofunc.scale(out[:15], x)
    except ValueError as e:
        if "gofunc.scale" not in str(e):
            fail("scale with lengths 15 and 16: %s" % e)
    else:
        fail("scale with lengths 15 and 16 raised nothing")
    ok("scale with lengths 15 and 16: ValueError")


def check_stub():
    import dlbridge
    import gofunc
    from dlbridge import stubgen
    from dlbridge._ops import _describe_all

    lib = dlbridge.library_path
    fresh = stubgen.stub(_describe_all(), "gofunc", "gofunc", lib)
    shipped_path = os.path.join(os.path.dirname(gofunc.__file__), "__init__.pyi")
    with open(shipped_path) as f:
        shipped = f.read()
    if shipped != fresh:
        import difflib
        diff = "".join(difflib.unified_diff(shipped.splitlines(True), fresh.splitlines(True), "shipped", "fresh"))
        fail("the wheel's stub is not what dlbridge.stubgen writes for its library: regenerate "
             "examples/gofunc/python/gofunc/__init__.pyi (make gofunc-stub):\n" + diff)
    if not os.path.exists(os.path.join(os.path.dirname(gofunc.__file__), "py.typed")):
        fail("the wheel has no gofunc/py.typed")
    ok("the wheel's __init__.pyi is dlbridge.stubgen's for its library, with py.typed")

    mypy = shutil.which("mypy")
    if not mypy:
        fail("mypy is not installed (apt-get install mypy)")
    base = [mypy, "--python-executable", sys.executable, "--no-incremental", "--cache-dir", os.devnull,
            "--no-error-summary", "--hide-error-context", "--show-error-codes"]
    good = os.path.join(HERE, "typecheck", "good.py")
    r = subprocess.run(base + [good], capture_output=True, text=True)
    if r.returncode != 0:
        fail("mypy finds errors in %s:\n%s%s" % (good, r.stdout, r.stderr))
    ok("mypy passes typecheck/good.py")
    bad = os.path.join(HERE, "typecheck", "bad.py")
    r = subprocess.run(base + [bad], capture_output=True, text=True)
    lines = {}
    for line in r.stdout.splitlines():
        mt = re.match(r".*bad\.py:(\d+): error: (.*)", line)
        if mt:
            lines.setdefault(int(mt.group(1)), []).append(mt.group(2))
    want = {
        9: 'Unexpected keyword argument "fctor" for "scale"',
        10: 'Argument 3 to "scale" has incompatible type "str"; expected "SupportsFloat"',
        11: 'Too many positional arguments for "scale"',
        12: 'Argument 1 to "normalize_rows" has incompatible type "List[float]"',
        13: 'Argument "result_type" to "axpy" has incompatible type "int"',
        14: 'Module has no attribute "no_such_function"',
    }
    for n, text in want.items():
        if not any(text.lower() in e.lower() for e in lines.get(n, [])):
            fail("mypy does not report %r at bad.py:%d; it reported:\n%s%s" % (text, n, r.stdout, r.stderr))
    extra = sorted(set(lines) - set(want))
    if r.returncode != 1 or extra:
        fail("mypy on bad.py: status %d, errors on lines %s beyond those expected:\n%s" % (r.returncode, extra, r.stdout))
    ok("mypy reports each of the %d mistakes in typecheck/bad.py" % len(want))


def run_child(code, env=None):
    """Runs code in a fresh interpreter of this environment; returns
    (status, stdout+stderr)."""
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, cwd="/")
    return r.returncode, r.stdout + r.stderr


REFUSED = """
import sys
try:
    {second}
except RuntimeError as e:
    print("REFUSED:", e)
    {after}
    print("WENT ON")
    sys.exit(0)
print("LOADED BOTH")
sys.exit(3)
"""


def check_refusals():
    import dlbridge
    import gofunc
    gofunc_lib = os.path.realpath(dlbridge.library_path)
    plain_lib = os.path.join(os.path.dirname(os.path.realpath(dlbridge.__file__)), "libdlbridge.so")
    if not os.path.exists(plain_lib):
        fail("the dlbridge wheel has no libdlbridge.so at %s" % plain_lib)
    cases = [
        ("dlbridge's own library first, then import gofunc",
         "import dlbridge; dlbridge.arange(3)",
         "import gofunc",
         "print(dlbridge.arange(3).tolist())",
         None),
        ("another Go library loaded with ctypes.CDLL first, then import gofunc",
         "import ctypes; ctypes.CDLL(%r)" % plain_lib,
         "import gofunc",
         "print(sum(range(3)))",
         None),
        ("gofunc's library loaded with ctypes.CDLL first, then dlbridge's first use",
         "import ctypes; ctypes.CDLL(%r); import dlbridge" % gofunc_lib,
         "dlbridge.arange(3)",
         "print(sum(range(3)))",
         None),
        ("DLBRIDGE_LIB naming dlbridge's own library, then import gofunc",
         "",
         "import gofunc",
         "import dlbridge; print(dlbridge.arange(3).tolist())",
         {"DLBRIDGE_LIB": plain_lib}),
    ]
    for what, first, second, after, env in cases:
        code = first + "\n" + REFUSED.format(second=second, after=after)
        status, out = run_child(code, env)
        if status != 0 or "WENT ON" not in out:
            fail("%s: status %d (want a RuntimeError and the process going on):\n%s" % (what, status, out))
        msg = out.split("REFUSED:", 1)[1]
        for p in (gofunc_lib, plain_lib):
            if p not in msg:
                fail("%s: the RuntimeError does not name %s:\n%s" % (what, p, out))
        if "one Go runtime per process" not in msg:
            fail("%s: the RuntimeError does not say why:\n%s" % (what, out))
        ok("refused, both paths named, the process went on: " + what)


def main():
    check_installed()
    check_stub()
    check_refusals()
    print("check_wheel: PASS")


if __name__ == "__main__":
    main()
