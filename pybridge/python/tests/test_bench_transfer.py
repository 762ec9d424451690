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
