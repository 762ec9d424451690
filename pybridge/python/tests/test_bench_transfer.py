"""The transfer benchmark measures what it says: its cells interleave the
libraries' batches and keep each library's own best and last result, and a
short run checks every cell against the source (the fake driver in CI, the
real one on the GPU machine)."""

import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "bench")
pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "bench_transfer.py")),
                                reason="needs the benchmark scripts beside the tests")


@pytest.fixture
def bench(monkeypatch):
    pytest.importorskip("numpy")
    monkeypatch.syspath_prepend(BENCH)
    import bench_transfer

    monkeypatch.setattr(bench_transfer, "sync", lambda: None)
    return bench_transfer


def _libs(order):
    def make(name, value):
        def fn():
            order.append(name)
            return value
        return fn
    return {"a": make("a", 1), "b": make("b", 2)}


def test_cell_interleaves_rounds(bench):
    order = []
    out = bench.cell(_libs(order), reps=3)
    # Warm-up (three calls each, one library after the other), then rounds:
    # every library's batch once a round, in the same order.
    assert order[:6] == ["a"] * 3 + ["b"] * 3
    timed = order[6:]
    k_a = timed.index("b")
    assert k_a >= 1 and timed[:k_a] == ["a"] * k_a
    k_b = len(timed) // 3 - k_a
    assert timed == (["a"] * k_a + ["b"] * k_b) * 3
    assert out["a"][1] == 1 and out["b"][1] == 2
    assert 0 < out["a"][0] < 1 and 0 < out["b"][0] < 1


def test_cell_sequential_keeps_the_old_order(bench):
    order = []
    bench.cell(_libs(order), reps=3, interleave=False)
    first_b = order.index("b")
    assert set(order[:first_b]) == {"a"} and set(order[first_b:]) == {"b"}


def test_cell_restores_the_collector(bench):
    import gc

    assert gc.isenabled()
    seen = []
    bench.cell({"x": lambda: seen.append(gc.isenabled())}, reps=2)
    assert seen and not any(seen)
    assert gc.isenabled()


@pytest.mark.gpu
def test_short_run_checks_every_cell(tmp_path):
    pytest.importorskip("numpy")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(
        os.path.abspath(sys.modules["dlbridge"].__file__))), env.get("PYTHONPATH", "")] if p)
    r = subprocess.run([sys.executable, os.path.join(BENCH, "bench_transfer.py"), "--max-mib", "1", "--reps", "2"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cells checked: 0 wrong" in r.stdout, r.stdout
    for direction in ("h2d", "h2d-into", "d2h", "d2h-into", "d2d"):
        assert "\n%s\n" % direction in r.stdout, r.stdout


def test_cell_leaves_out_a_library_that_raises(bench):
    calls = {"ok": 0, "bad": 0}

    def ok():
        calls["ok"] += 1
        return "r"

    def bad():
        calls["bad"] += 1
        if calls["bad"] > 4:  # passes the warm-up, fails in the rounds
            raise ValueError("broken")

    out = bench.cell({"bad": bad, "ok": ok}, reps=3)
    assert out["ok"][0] > 0 and out["ok"][1] == "r"
    t, e = out["bad"]
    assert t is None and isinstance(e, ValueError)
    assert calls["bad"] == 5  # never called again after it raised


SAMPLE = """bench_transfer: NVIDIA H200 x2; python 3.12.3, numpy 2.5.2, torch 2.11.0+cu130, cupy 14.2.0
GB/s, best of 5 (1 GB = 1e9 bytes); ratio = dlbridge / best peer

h2d
      size   dlbridge      torch       cupy    ratio     dlb us    peer us
     4 KiB       %s       0.26       0.20     1.04       15.0       15.6
    16 MiB      24.24      14.52       8.96     1.67      692.1     1155.7

d2d
      size   dlbridge      torch       cupy    ratio     dlb us    peer us
     1 GiB    2057.49    2050.00          -     1.00       20.0       20.0

cells checked: 0 wrong
"""


def test_compare_transfers_takes_each_sides_best(tmp_path, monkeypatch):
    """compare_transfers.py reads dlbridge's column of every base and new
    log, compares each cell's best, and fails on a slower cell or a WRONG
    one."""
    monkeypatch.syspath_prepend(BENCH)
    import compare_transfers

    assert compare_transfers.parse(SAMPLE % "0.27") == {
        ("h2d", "4 KiB"): 0.27, ("h2d", "16 MiB"): 24.24, ("d2d", "1 GiB"): 2057.49}
    for name, v in (("base1", "0.30"), ("base2", "0.20"), ("new1", "0.25"), ("new2", "0.29")):
        (tmp_path / ("%s.transfer.log" % name)).write_text(SAMPLE % v)
    script = os.path.join(BENCH, "compare_transfers.py")
    r = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr  # 0.29 / 0.30 = 0.967, under the default bar 0.97
    r = subprocess.run([sys.executable, script, str(tmp_path), "--bar", "0.95"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "3 cells, 0 below" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, script, str(tmp_path), "--bar", "0.99"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "0.967   0.30 0.20 | 0.25 0.29  slower" in r.stdout, r.stdout
    (tmp_path / "new3.transfer.log").write_text(SAMPLE % "WRONG")
    r = subprocess.run([sys.executable, script, str(tmp_path), "--bar", "0.5"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "new3.transfer.log" in r.stdout, r.stdout
