"""Fork, spawn and forkserver: the Go runtime in libdlbridge does not survive
fork(). A child forked after the library started must never enter it: the
tensors, exports and capsules it inherits are finalized without a call into
Go, and its first dlbridge call raises RuntimeError naming 'spawn' and
'forkserver' (PyTorch's convention for CUDA). A child forked before the
library started loads it itself and works. Every scenario runs in a fresh
interpreter, with
timeouts: a hang fails the test instead of stalling the suite."""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import dlbridge

PATHS = [pytest.param({}, id="extension")]
CHILDREN = 20


def run_script(tmp_path, body, env_extra, args=(), timeout=120):
    """Run body as a script in a fresh interpreter; its last stdout line is
    JSON. A timeout or a non-zero exit fails the test with the output."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, **env_extra)
    try:
        r = subprocess.run([sys.executable, str(script)] + [str(a) for a in args], env=env,
                           capture_output=True, text=True, timeout=timeout, cwd=str(tmp_path))
    except subprocess.TimeoutExpired as e:
        pytest.fail("the script hung for %ds; output: %s %s" % (timeout, e.stdout, e.stderr))
    assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout[-4000:], r.stderr[-4000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


# The parent of the fork scenarios: waits for a child with a deadline, kills
# it on timeout, and reports how each child ended.
PARENT_HELPERS = """
import json, os, signal, sys, time

def wait_child(pid, deadline_s=20):
    end = time.monotonic() + deadline_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return "signal %d" % os.WTERMSIG(status)
            return "exit %d" % os.WEXITSTATUS(status)
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hung"
        time.sleep(0.002)
"""

BUSY_PARENT = PARENT_HELPERS + """
import gc, threading
import numpy as np
import dlbridge

mode = sys.argv[1]          # how a child ends: "exit" (full finalization) or "_exit"
stop = threading.Event()
errors = []

def busy(k):
    a = np.arange(64, dtype=np.float32)
    try:
        while not stop.is_set():
            t = dlbridge.arange(32, dtype="float32")
            n = np.from_dlpack(t)                            # a live export
            u = dlbridge.from_dlpack(a)                      # a foreign tensor Go holds
            c = t.__dlpack__(max_version=(1, 0), copy=True)  # an export made by Go
            v = dlbridge.from_dlpack(c)
            assert t.sum() == 496 and u.sum() == 2016 and v.sum() == 496 and n[3] == 3
            t.__dlpack__()                                   # dropped unconsumed
            del t, n, u, c, v
    except BaseException as e:  # reported by the parent
        errors.append(repr(e))

threads = [threading.Thread(target=busy, args=(k,), daemon=True) for k in range(4)]
for th in threads:
    th.start()
time.sleep(0.2)

# What every child inherits.
keep_t = dlbridge.arange(8, dtype="int32")
keep_np = np.from_dlpack(keep_t)                              # fast (or Go) export alive in numpy
keep_cap = keep_t.__dlpack__(max_version=(1, 0))              # an unconsumed capsule
keep_gocap = keep_t.__dlpack__(max_version=(1, 0), copy=True) # an unconsumed capsule made by Go
class Cap:  # hands numpy a capsule made by Go (a legacy copy)
    def __init__(self, c): self.c = c
    def __dlpack__(self, **kw): return self.c
    def __dlpack_device__(self): return (1, 0)
keep_go_np = np.from_dlpack(Cap(keep_t.__dlpack__(copy=True)))
keep_foreign = dlbridge.from_dlpack(np.ones(5))               # numpy memory Go holds
keep_view = keep_t[2:]                                        # a second handle

results = []
for i in range(@CHILDREN@):
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            try:
                dlbridge.arange(1)
                code = 10  # must have raised
            except RuntimeError as e:
                if "spawn" not in str(e) or "forkserver" not in str(e):
                    code = 11
            try:
                keep_t.__dlpack__()
                code = 12
            except RuntimeError:
                pass
            try:
                dlbridge.library_path
                code = 13
            except RuntimeError:
                pass
            # Reading what the parent computed needs no Go.
            if keep_np[5] != 5 or keep_t.shape != (8,):
                code = 14
            del keep_np, keep_cap, keep_gocap, keep_go_np, keep_foreign, keep_view
            gc.collect()
        except BaseException as e:
            sys.stderr.write("child: %r\\n" % (e,))
            code = 20
        if mode == "_exit":
            os._exit(code)
        sys.exit(code)  # full finalization: keep_t and the rest are finalized here
    results.append(wait_child(pid))

stop.set()
for th in threads:
    th.join(10)
ok = keep_t.sum() == 28 and keep_np[7] == 7
print(json.dumps({"results": results, "errors": errors, "parent_ok": bool(ok)}))
"""


@pytest.mark.parametrize("mode", ["exit", "_exit"])
@pytest.mark.parametrize("env", PATHS)
def test_fork_in_busy_parent(tmp_path, env, mode):
    pytest.importorskip("numpy")
    out = run_script(tmp_path, BUSY_PARENT.replace("@CHILDREN@", str(CHILDREN)), env, [mode], timeout=240)
    assert out["errors"] == [] and out["parent_ok"]
    assert out["results"] == ["exit 0"] * CHILDREN, out["results"]


FORK_BEFORE_START = PARENT_HELPERS + """
import dlbridge
from dlbridge import _lib

assert not _lib.loaded()
results = []
for i in range(@CHILDREN@):
    pid = os.fork()
    if pid == 0:
        t = dlbridge.arange(4, dtype="int64")
        os._exit(0 if t.sum() == 6 and _lib.loaded() else 1)
    results.append(wait_child(pid))
assert not _lib.loaded()  # the children's loads are theirs
print(json.dumps({"results": results, "parent": dlbridge.arange(5).sum()}))
"""


@pytest.mark.parametrize("env", PATHS)
def test_fork_before_start_works(tmp_path, env):
    n = 10  # each child starts its own Go runtime
    out = run_script(tmp_path, FORK_BEFORE_START.replace("@CHILDREN@", str(n)), env)
    assert out["results"] == ["exit 0"] * n and out["parent"] == 10


POOL = """
import json, multiprocessing as mp, sys
import dlbridge

def work(t):
    # t arrives by value (pickled) and a new tensor goes back the same way
    return t.sum(), dlbridge.arange(len(t), dtype=t.dtype)

def use_dlbridge(n):
    return dlbridge.arange(n).sum()

if __name__ == "__main__":
    method, started = sys.argv[1], sys.argv[2] == "1"
    ctx = mp.get_context(method)
    out = {}
    if started:
        parent_t = dlbridge.arange(10, dtype="float32")  # the library runs in the parent
    with ctx.Pool(2) as pool:
        if method == "fork" and started:
            res = pool.map_async(use_dlbridge, [3, 4, 5])
            try:
                res.get(timeout=60)
                out["raised"] = None
            except RuntimeError as e:
                out["raised"] = str(e)
        else:
            out["sums"] = pool.map_async(use_dlbridge, [3, 4, 5]).get(timeout=60)
            if method != "fork":
                tensors = [dlbridge.arange(n, dtype="float32")[::2] for n in (4, 6, 9)]
                got = pool.map_async(work, tensors).get(timeout=60)
                out["by_value"] = [[s, t.tolist(), t.dtype] for s, t in got]
    print(json.dumps(out))
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("env", PATHS)
def test_pool_start_methods(tmp_path, env, method):
    out = run_script(tmp_path, POOL, env, [method, 1], timeout=180)
    if method == "fork":
        assert "spawn" in out["raised"] and "forkserver" in out["raised"]
    else:
        assert out["sums"] == [3, 6, 10]
        assert out["by_value"] == [[2.0, [0.0, 1.0], "float32"], [6.0, [0.0, 1.0, 2.0], "float32"],
                                   [20.0, [0.0, 1.0, 2.0, 3.0, 4.0], "float32"]]


@pytest.mark.parametrize("env", PATHS)
def test_pool_fork_before_start(tmp_path, env):
    out = run_script(tmp_path, POOL, env, ["fork", 0], timeout=180)
    assert out["sums"] == [3, 6, 10]


AT_EXIT = """
import json, sys, threading
import numpy as np
import dlbridge

keep = []
for dt in ("float32", "int8", "bfloat16"):
    t = dlbridge.arange(16, dtype=dt)
    keep.append(np.from_dlpack(t) if dt != "bfloat16" else t)    # live exports at exit
    keep.append(t.__dlpack__(max_version=(1, 0)))                   # unconsumed capsules
    keep.append(t.__dlpack__(max_version=(1, 0), copy=True))        # ... made by Go
keep.append(dlbridge.from_dlpack(np.arange(7.0)))                   # foreign deleter pending
cycle = [dlbridge.from_dlpack(np.ones(3))]
cycle.append(cycle)                                                 # freed by the final collection
keep.append(dlbridge.asarray(bytearray(b"abc")))                    # a Python object Go holds
if sys.argv[1] == "torch":
    import torch
    keep.append(dlbridge.from_dlpack(torch.arange(5)))
    keep.append(torch.from_dlpack(dlbridge.arange(4)))
stop = threading.Event()
def spin():
    a = np.arange(8.0)
    while not stop.is_set():
        dlbridge.from_dlpack(a).sum()
threading.Thread(target=spin, daemon=True).start()  # still calling into Go at exit
print(json.dumps({"ok": True}))
"""


@pytest.mark.parametrize("peer", ["numpy", "torch"])
@pytest.mark.parametrize("env", PATHS)
def test_exit_with_live_exports_and_pending_deleters(tmp_path, env, peer):
    pytest.importorskip("numpy")
    if peer == "torch":
        pytest.importorskip("torch")
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(AT_EXIT))
    for _ in range(2 if peer == "numpy" else 1):
        try:
            r = subprocess.run([sys.executable, str(script), peer], env=dict(os.environ, **env),
                               capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("the interpreter hung at exit")
        assert r.returncode == 0 and r.stderr == "", (r.returncode, r.stderr[-3000:])


@pytest.mark.parametrize("dtype", ["float32", "int16", "bfloat16", "bool", "complex64", "uint64"])
def test_pickle_by_value(dtype):
    t = dlbridge.arange(12, dtype=dtype)
    for src in (t, t[::3], t[5:6], t[2:2]):
        back = pickle.loads(pickle.dumps(src))
        assert isinstance(back, dlbridge.Tensor)
        assert (back.dtype, back.shape, back.device) == (src.dtype, src.shape, src.device)
        assert back.tolist() == src.tolist()
        if src.size:
            assert back.data_ptr() != src.data_ptr()  # a copy, not shared memory
    import copy

    d = copy.deepcopy(t)
    d.fill_(1)
    assert t.tolist() != d.tolist()


def test_pickle_closed_tensor_refused():
    t = dlbridge.zeros(2)
    t.close()
    with pytest.raises(ValueError, match="closed"):
        pickle.dumps(t)
