"""Go functions for Python (dlbridge.ops): the cases of ops_cases.py, run in
a process of their own against the test library that `make ops-lib` builds
with `dlbridge build` (examples/gofunc and pybridge/pyfunc/pyfunctest),
named by DLBRIDGE_TEST_OPS_LIB. One Go runtime per process: this process
already runs the suite's library, so the cases cannot run here."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def test_ops_cases_in_a_process_of_their_own():
    lib = os.environ.get("DLBRIDGE_TEST_OPS_LIB")
    if not lib:
        if os.environ.get("DLBRIDGE_EXPECT_INSTALLED"):
            pytest.fail("DLBRIDGE_TEST_OPS_LIB is not set: make pytest builds the test library (make ops-lib)")
        pytest.skip("DLBRIDGE_TEST_OPS_LIB names no test library (make ops-lib builds build/libopstest.so)")
    env = dict(os.environ, DLBRIDGE_LIB=lib)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", os.path.join(HERE, "ops_cases.py")],
        env=env, cwd=os.environ.get("TMPDIR", "/tmp"), capture_output=True, text=True, timeout=600)
    print(r.stdout[-20000:])
    print(r.stderr[-5000:], file=sys.stderr)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
    assert " passed" in r.stdout
