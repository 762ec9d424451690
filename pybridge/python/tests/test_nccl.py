"""dlbridge.nccl: Python ranks and Go ranks in one NCCL communicator.

The mixed jobs start four processes joined from the environment as torchrun
starts ranks (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK): Go
ranks are the nccl package's test binary running a scenario of
nccl/rank_test.go (NCCL_TEST_SCENARIO; DLBRIDGE_NCCL_RANK names a built
one, else it is built here with go), Python ranks run nccl_rank.py, which
mirrors those scenarios operation for operation: every operation with
verified data, a killed rank (the survivors fail within the deadline,
naming it, and go on with a rebuilt communicator), a hung one.

Without a GPU the ranks use the fake driver (testdata/fakecuda, as make
pytest-fakecuda runs this suite) and the fake NCCL (testdata/fakenccl,
built here with gcc unless DLBRIDGE_LIBNCCL names one); on the GPU
machine (DLBRIDGE_GPU=1) the real ones, one rank per GPU, and the Python
ranks use PyTorch CUDA tensors.
"""

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

import dlbridge
import dlbridge.nccl as nccl

pytestmark = pytest.mark.gpu

HERE = os.path.dirname(os.path.abspath(__file__))
RANK_SCRIPT = os.path.join(HERE, "nccl_rank.py")
GPU = os.environ.get("DLBRIDGE_GPU") == "1"


def _repo_root():
    d = HERE
    while True:
        if os.path.exists(os.path.join(d, "go.mod")) and os.path.isdir(os.path.join(d, "nccl")):
            return d
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def _fake_driver():
    """Whether dlbridge's driver is the fake (it exports fakecuda_calls)."""
    import ctypes
    path = os.environ.get("DLBRIDGE_LIBCUDA")
    return bool(path) and hasattr(ctypes.CDLL(path), "fakecuda_calls")


@pytest.fixture(scope="module")
def rank_env(tmp_path_factory):
    """The environment of every rank process: the fake NCCL and four fake
    devices without a GPU."""
    env = dict(os.environ)
    if GPU or not _fake_driver():
        return env
    env["FAKECUDA_DEVICES"] = "4"
    if env.get("DLBRIDGE_LIBNCCL"):
        return env
    root, gcc = _repo_root(), shutil.which(os.environ.get("CC", "gcc"))
    if root is None or gcc is None:
        pytest.skip("needs gcc and the repository (or DLBRIDGE_LIBNCCL) for the fake NCCL")
    lib = str(tmp_path_factory.mktemp("fakenccl") / "libnccl.so.2")
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-ffp-contract=off", "-o", lib,
                    os.path.join(root, "testdata", "fakenccl", "fakenccl.c"), "-lpthread", "-ldl"], check=True)
    env["DLBRIDGE_LIBNCCL"] = lib
    return env


@pytest.fixture(scope="module")
def go_rank(tmp_path_factory):
    exe = os.environ.get("DLBRIDGE_NCCL_RANK")
    if exe:
        return exe
    go, root = shutil.which("go"), _repo_root()
    if go is None or root is None:
        pytest.skip("needs go and the repository (or DLBRIDGE_NCCL_RANK) for the Go ranks")
    exe = str(tmp_path_factory.mktemp("nccl") / "nccl.test")
    subprocess.run([go, "test", "-c", "-o", exe, "./nccl"], cwd=root, env=dict(os.environ, CGO_ENABLED="0"),
                   check=True)
    return exe


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _size():
    """Four ranks on the fake's four devices; one per GPU on the GPU machine."""
    return min(4, dlbridge.cuda_device_count()) if GPU else 4


def _job(go_rank, env, scenario, layout, timeout, limit=120, extra=None):
    """Runs one rank process per letter of layout ("g": Go, "p": Python)
    and returns [(rank, kind, exit code, output)]; a job that does not end
    within limit seconds is killed and fails the test (a hang)."""
    port = _free_port()
    procs = []
    for r, kind in enumerate(layout):
        e = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(len(layout)),
                 LOCAL_RANK=str(r), DLBRIDGE_NCCL_TIMEOUT=timeout, **(extra or {}))
        if kind == "g":
            args = [go_rank, "-test.run=^$"]
            e["NCCL_TEST_SCENARIO"] = scenario
        else:
            args = [sys.executable, RANK_SCRIPT, scenario]
        procs.append(subprocess.Popen(args, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + limit
    out = []
    for r, p in enumerate(procs):
        try:
            text, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            texts = [q.communicate()[0] for q in procs]
            pytest.fail("scenario %s (%s): the ranks did not finish within %d s (a hang):\n%s"
                        % (scenario, layout, limit, "\n".join("rank %d:\n%s" % x for x in enumerate(texts))))
        out.append((r, layout[r], p.returncode, text))
    return out


def _report(res):
    return "\n".join("rank %d (%s) exited %d:\n%s" % r for r in res)


def _layouts(n):
    """Go and Python ranks alternating, a Go rank 0 (which hosts the
    rendezvous) and a Python one."""
    return ["gpgp"[:n], "pgpg"[:n]]


@pytest.mark.parametrize("first", [0, 1], ids=["go-hosts", "python-hosts"])
def test_every_operation_go_and_python_ranks(go_rank, rank_env, first):
    n = _size()
    if n < 2:
        pytest.skip("needs 2 devices")
    layout = _layouts(n)[first]
    res = _job(go_rank, rank_env, "ops", layout, "60s")
    for r, kind, code, text in res:
        assert code == 0 and "rank %d ok" % r in text, _report(res)


@pytest.mark.parametrize("victim,extra", [("p", None), ("g", None), ("p", {"FAKENCCL_PEER_CHECK": "1"})],
                         ids=["python-killed", "go-killed", "python-killed-network"])
def test_killed_rank(go_rank, rank_env, victim, extra):
    n = _size()
    if n < 2:
        pytest.skip("needs 2 devices")
    if extra and GPU:
        pytest.skip("FAKENCCL_PEER_CHECK is the fake's")
    layout = next(lay for lay in _layouts(n) if lay[-1] == victim)
    timeout = "20s" if GPU else "3s"
    start = time.monotonic()
    res = _job(go_rank, rank_env, "kill", layout, timeout, extra=extra)
    took = time.monotonic() - start
    for r, kind, code, text in res[:-1]:
        assert code == 0 and "expected failure" in text and "rank %d ok" % r in text, _report(res)
    # The Python victim is killed (SIGKILL); the Go one exits at once.
    assert "ok" not in res[-1][3] and (victim == "g" or res[-1][2] == -9), _report(res)
    assert took < 60, "the job took %.0f s" % took


def test_hung_rank(go_rank, rank_env):
    n = min(_size(), 3)
    if n < 3:
        pytest.skip("needs 3 devices")
    res = _job(go_rank, rank_env, "hang", "gpg"[:n], "20s" if GPU else "2s")
    for r, kind, code, text in res:
        assert code == 0, _report(res)
    for r, kind, code, text in res[:-1]:
        want = "expected failure: NCCLTimeoutError" if kind == "p" else "expected failure"
        assert want in text, _report(res)


def _torchrun(go_rank, env, extra, limit=180):
    """A Go rank 0 and a Python rank 1 started by torchrun itself (its agent
    store holds MASTER_PORT): the ops scenario. Returns (exit code, output)."""
    pytest.importorskip("torch.distributed.run")
    port = _free_port()
    script = ('if [ "$RANK" = 0 ]; then exec "$GO_RANK" -test.run="^$"; '
              'else exec "$PY" "$RANK_SCRIPT" ops; fi')
    e = dict(env, GO_RANK=go_rank, PY=sys.executable, RANK_SCRIPT=RANK_SCRIPT, NCCL_TEST_SCENARIO="ops",
             DLBRIDGE_NCCL_TIMEOUT="60s", **extra)
    # -r 2 -t 2: stderr to torchrun's logs and the console. The default
    # (0, nothing redirected) fails in torch 1.13 under Python 3.11, whose
    # enum iteration leaves out its Std.NONE.
    args = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(port), "-r", "2", "-t", "2", "--no_python", "bash", "-c", script]
    p = subprocess.run(args, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=limit)
    return p.returncode, p.stdout


def test_torchrun_go_and_python_ranks(go_rank, rank_env):
    """torchrun starts a Go rank and a Python rank; its agent's store holds
    MASTER_PORT, so dlbridge's rendezvous takes DLBRIDGE_NCCL_PORT: every
    operation with verified data."""
    if _size() < 2:
        pytest.skip("needs 2 devices")
    code, out = _torchrun(go_rank, rank_env, {"DLBRIDGE_NCCL_PORT": str(_free_port())})
    assert code == 0 and "rank 0 ok" in out and "rank 1 ok" in out, out


def test_torchrun_without_port_says_what_to_set(go_rank, rank_env):
    """Under torchrun without DLBRIDGE_NCCL_PORT, both ranks (Go and
    Python) fail at once naming the variable, not at the deadline. torch 2's
    torchrun ends the other workers (SIGTERM) as soon as one fails, so a
    rank may have been ended before it wrote its message."""
    if _size() < 2:
        pytest.skip("needs 2 devices")
    start = time.monotonic()
    code, out = _torchrun(go_rank, rank_env, {})
    assert code != 0, out
    said = {"go": "rank 0 FromEnv: nccl: FromEnv: started by torchrun" in out,
            "python": "ValueError: dlbridge.nccl: nccl: FromEnv: started by torchrun" in out}
    ended = out.count("Signal 15 (SIGTERM) received")
    assert any(said.values()) and sum(said.values()) + ended >= 2, (said, out)
    assert out.count("DLBRIDGE_NCCL_PORT=29501 torchrun") == sum(said.values()), out
    assert time.monotonic() - start < 50, "took %.0f s" % (time.monotonic() - start)


def test_torch_store_at_master_port(monkeypatch):
    """A torch.distributed TCPStore at MASTER_PORT (a job whose Python
    ranks also call init_process_group): rank 0 cannot listen and another
    rank's hello is hung up on (torch 1's store) or left unanswered (torch
    2's); both say so at once, naming the variable."""
    dist = pytest.importorskip("torch.distributed")
    port = _free_port()
    store = dist.TCPStore("127.0.0.1", port, 2, True, wait_for_workers=False)  # noqa: F841 (held open)
    for k, v in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", DLBRIDGE_NCCL_TIMEOUT="60s").items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("DLBRIDGE_NCCL_PORT", raising=False)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    for rank, want in (("0", "address already in use"), ("1", "not dlbridge's rank 0")):
        monkeypatch.setenv("RANK", rank)
        start = time.monotonic()
        with pytest.raises(nccl.NCCLError, match="DLBRIDGE_NCCL_PORT") as e:
            nccl.from_env()
        assert want in str(e.value) and time.monotonic() - start < 10, (rank, str(e.value))


def test_api_checks(rank_env):
    """One Python rank alone (nccl_rank.py api): the checks of arguments,
    unique ids in CuPy's form, abort and close, no handle left behind."""
    p = subprocess.run([sys.executable, RANK_SCRIPT, "api"], env=dict(rank_env, LOCAL_RANK="0"),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0 and "api ok" in p.stdout, p.stdout


def test_errors_are_classes():
    assert issubclass(nccl.NCCLError, RuntimeError)
    assert issubclass(nccl.NCCLTimeoutError, nccl.NCCLError)
    assert issubclass(nccl.NCCLTimeoutError, TimeoutError)
    e = nccl.NCCLTimeoutError("x", op="all_reduce", missing=[3], timeout=2.0)
    assert (e.op, e.missing, e.timeout, str(e)) == ("all_reduce", [3], 2.0, "x")


def _readme_nccl_block():
    root = _repo_root()
    path = root and os.path.join(root, "README.md")
    if not path or not os.path.exists(path):
        pytest.skip("needs the source checkout's README.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("### Beyond one node: NCCL"):]
    start = section.index("```sh\n") + len("```sh\n")
    return root, section[start:section.index("```", start)]


def test_readme_nccl_block(rank_env):
    """The README's NCCL block as written (a Go rank and a Python rank
    joined from the environment), against the fakes here, with a free port
    for its 29500; docs-test skips it (no GPU, no fakes there)."""
    root, block = _readme_nccl_block()
    if shutil.which("go") is None:
        pytest.skip("needs go")
    assert "examples/nccl/nccl.py" in block and "./examples/nccl" in block, block
    block = block.replace("MASTER_PORT=29500", "MASTER_PORT=%d" % _free_port())
    env = dict(rank_env, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               DLBRIDGE_NCCL_TIMEOUT="60s")
    p = subprocess.run(["bash", "-e", "-c", block], cwd=root, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    out = p.stdout
    assert p.returncode == 0, out
    for want in ("rank 0: all_reduce sum [3 3] (want 3)", "rank 1: all_reduce sum [3.0, 3.0] (want 3)",
                 "rank 0: received [100 101] from rank 1", "rank 1: received [0.0, 1.0] from rank 0"):
        assert want in out, out


# ---- two GPUs (DLBRIDGE_GPU=1): PyTorch and CuPy ranks, slow producers ----

def _two_gpus_with_torch():
    if not GPU:
        pytest.skip("two GPUs with NCCL (DLBRIDGE_GPU=1)")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs PyTorch with two CUDA devices")


@pytest.fixture(scope="module")
def go_example(tmp_path_factory):
    exe = os.environ.get("DLBRIDGE_NCCL_EXAMPLE")
    if exe:
        return exe
    go, root = shutil.which("go"), _repo_root()
    if go is None or root is None:
        pytest.skip("needs go and the repository (or DLBRIDGE_NCCL_EXAMPLE) for examples/nccl")
    exe = str(tmp_path_factory.mktemp("ncclex") / "ncclex")
    subprocess.run([go, "build", "-o", exe, "./examples/nccl"], cwd=root, env=dict(os.environ, CGO_ENABLED="0"),
                   check=True)
    return exe


def test_gpu_go_and_torch_slow_producer(go_example, rank_env):
    """examples/nccl's Go program and a PyTorch rank whose inputs a slow
    kernel writes on a side stream: what the Go rank receives and what the
    all-reduce gives are right only if nothing read them early."""
    _two_gpus_with_torch()
    port = _free_port()
    base = dict(rank_env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", DLBRIDGE_NCCL_TIMEOUT="120s")
    go = subprocess.Popen([go_example], env=dict(base, RANK="0", LOCAL_RANK="0"), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    py = subprocess.Popen([sys.executable, RANK_SCRIPT, "example"], env=dict(base, RANK="1", LOCAL_RANK="1"),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        gout, _ = go.communicate(timeout=300)
        pout, _ = py.communicate(timeout=300)
    finally:
        go.kill()
        py.kill()
    assert go.returncode == 0 and py.returncode == 0 and "rank 1 ok" in pout, gout + "\n" + pout
    assert "rank 0: all_reduce sum [3 3] (want 3)" in gout and "rank 0: received [100 101] from rank 1" in gout, gout


@pytest.mark.parametrize("libs,maker", [(("dlbridge", "cupy"), "dlbridge"), (("cupy", "dlbridge"), "cupy")],
                         ids=["dlbridge-id", "cupy-id"])
def test_gpu_cupy_communicator_joins(rank_env, tmp_path, libs, maker):
    """CuPy's NcclCommunicator and a dlbridge.nccl rank (PyTorch tensors,
    a slow producer) in one communicator, with a unique id that either
    made: all-reduce, broadcast and a grouped exchange of 4 MiB each."""
    _two_gpus_with_torch()
    pytest.importorskip("cupy")
    # NCCL refuses ranks of two versions: the dlbridge rank loads the NCCL
    # CuPy's communicator runs on (found by what a process importing it maps).
    probe = ("import cupy.cuda.nccl; print(next((l.split()[-1] for l in open('/proc/self/maps') "
             "if '/libnccl.so' in l), ''))")
    lib = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120).stdout.strip()
    env = dict(rank_env, DLBRIDGE_LIBNCCL=lib) if lib else rank_env
    path = str(tmp_path / "uid")
    procs = [subprocess.Popen([sys.executable, RANK_SCRIPT, "pair"],
                              env=dict(env, RANK=str(r), NCCL_PAIR_LIB=libs[r], NCCL_PAIR_FILE=path,
                                       NCCL_PAIR_ID=maker),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=300)[0])
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)
    assert "rank 0 ok (%s)" % libs[0] in outs[0] and "rank 1 ok (%s)" % libs[1] in outs[1], "\n".join(outs)
