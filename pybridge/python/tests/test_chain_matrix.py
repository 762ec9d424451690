"""The chain matrix's judge (bench/chain_matrix.py's Control): which WRONG
cells are dlbridge's and which the direct control explains."""

import os

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "bench")
pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "chain_matrix.py")),
                                reason="needs the benchmark scripts beside the tests")

# The direct table of a run on two H200s: torch-cai read CuPy's write stale
# (which cupy-cai and numba-cai read right) and numba's right, by chance.
DIRECT = """\
torch     WRONG WRONG OK WRONG WRONG OK ERR
cupy      OK    WRONG WRONG OK OK OK WRONG
numba     -     OK    -  OK OK -  -
jax       OK    ERR   OK WRONG WRONG OK OK
cuda.core WRONG -     WRONG - - WRONG WRONG
dlbridge  OK    WRONG OK OK OK OK OK
"""


@pytest.fixture
def control(monkeypatch):
    pytest.importorskip("numpy")
    monkeypatch.syspath_prepend(BENCH)
    import chain_matrix

    cons = ("torch-dlpack", "torch-cai", "cupy-dlpack", "cupy-cai", "numba-cai", "jax-dlpack", "cuda.core")
    direct = {}
    for line in DIRECT.splitlines():
        p, *cells = line.split()
        direct.update({(p, c): r for c, r in zip(cons, cells)})
    return chain_matrix.Control(direct)


def test_a_consumer_that_reads_an_honest_producer_stale_is_excused(control):
    # torch-cai read CuPy stale while cupy-cai read it right: torch-cai's own fault.
    assert not control.consumer_honest("torch-cai")
    assert control.excused("dlbridge", "cai", "torch-cai")
    # cuda.core read CuPy stale while torch-dlpack read it right.
    assert not control.consumer_honest("cuda.core")


def test_dlbridge_stays_counted_where_the_consumer_is_honest(control):
    # torch -> torch-dlpack is one library with itself: no evidence against
    # torch-dlpack, which reads CuPy and JAX right.
    assert control.consumer_honest("torch-dlpack")
    assert not control.excused("dlbridge", "dlpack", "torch-dlpack")
    assert control.consumer_honest("cupy-cai") and not control.excused("dlbridge", "cai", "cupy-cai")
