"""The README's Python examples run as written: the CPU one wherever NumPy
and PyTorch are installed, the GPU one on a CUDA device or the fake driver
(make pytest-fakecuda)."""

import os
import re
import subprocess
import sys

import pytest

import dlbridge

# The checkout's README beside these tests, or the one DLBRIDGE_README names
# (the GPU machine runs a copy of the tests under build/gpu: scripts/gpu-run.sh).
README = os.environ.get("DLBRIDGE_README") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir, "README.md")


def _python_blocks():
    if not os.path.exists(README):
        return []
    with open(README, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def _run(code):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.skipif(not os.path.exists(README), reason="needs the source checkout's README.md")
def test_readme_has_both_examples():
    blocks = _python_blocks()
    assert any("from_pointer" in b for b in blocks) and any("torch.from_dlpack" in b for b in blocks)


@pytest.mark.skipif(not os.path.exists(README), reason="needs the source checkout's README.md")
def test_readme_cpu_example():
    pytest.importorskip("numpy")
    pytest.importorskip("torch")
    (code,) = [b for b in _python_blocks() if "torch.from_dlpack" in b]
    assert "30.0" in _run(code)


@pytest.mark.skipif(not os.path.exists(README), reason="needs the source checkout's README.md")
def test_readme_gpu_example():
    pytest.importorskip("numpy")
    if dlbridge.cuda_device_count() == 0:
        pytest.skip("needs a CUDA device or the fake driver (make pytest-fakecuda)")
    (code,) = [b for b in _python_blocks() if "from_pointer" in b]
    out = _run(code).splitlines()
    assert "allocation" in out[0], out       # the refusal names the allocation
    assert out[1] == "True [0. 1. 2. 3.]", out
    assert out[2] == "1048576.0", out


# ---- the section for Go authors: its Go package is built for real ----

def _section(title):
    with open(README, encoding="utf-8") as f:
        text = f.read()
    start = text.index("\n## " + title + "\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _author_blocks(lang):
    return re.findall(r"```" + lang + r"\n(.*?)```", _section("Shipping Go functions to Python"), re.S)


@pytest.fixture(scope="module")
def author_dir(tmp_path_factory):
    """A folder whose build/libmylib.so is the README's Go package and
    examples/gofunc linked by dlbridge build, as the README's sh block says;
    DLBRIDGE_README_LIB names one built elsewhere (the GPU machine has no Go)."""
    if not os.path.exists(README):
        pytest.skip("needs the source checkout's README.md")
    wd = tmp_path_factory.mktemp("author")
    (wd / "build").mkdir()
    lib = wd / "build" / "libmylib.so"
    prebuilt = os.environ.get("DLBRIDGE_README_LIB")
    if prebuilt:
        os.symlink(prebuilt, lib)
        return wd
    repo = os.path.dirname(os.path.abspath(README))
    import shutil
    if not shutil.which("go") or not os.path.isdir(os.path.join(repo, "cmd", "dlbridge")):
        if os.environ.get("DLBRIDGE_EXPECT_INSTALLED"):
            pytest.fail("the README's Go package needs the go command and the checkout to build")
        pytest.skip("needs the go command and the checkout (or DLBRIDGE_README_LIB)")
    (go,) = _author_blocks("go")
    pkg = os.path.join(repo, "build", "_readme", "mylib")  # "_": outside ./... patterns
    os.makedirs(pkg, exist_ok=True)
    with open(os.path.join(pkg, "mylib.go"), "w", encoding="utf-8") as f:
        f.write(go)
    (sh,) = _author_blocks("sh")
    assert "dlbridge build -o build/libmylib.so ./mylib ./examples/gofunc" in sh
    r = subprocess.run(["go", "run", "./cmd/dlbridge", "build", "-o", str(lib), "./build/_readme/mylib", "./examples/gofunc"],
                       cwd=repo, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return wd


def _run_in(wd, code):
    env = {k: v for k, v in os.environ.items() if k != "DLBRIDGE_LIB"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=str(wd), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_readme_go_author_host_example(author_dir):
    pytest.importorskip("numpy")
    (code,) = [b for b in _author_blocks("python") if "mylib.clip" in b]
    out = _run_in(author_dir, code).splitlines()
    assert out[0] == "[0.  0.5 1.5] 2.5", out
    assert out[1].startswith("mylib.dot: argument y: want float32 [N] C cpu (N=3 from x); got float32 [4]"), out
    text = "\n".join(out)
    assert "clip(x, lo=0.0, hi=1.0, *, stream=None, result_type=None)" in text, text
    assert "Clip limits every element of x to [lo, hi], in place." in text, text


def test_readme_go_author_cuda_example(author_dir):
    pytest.importorskip("numpy")
    if dlbridge.cuda_device_count() == 0:
        pytest.skip("needs a CUDA device or the fake driver (make pytest-fakecuda)")
    (code,) = [b for b in _author_blocks("python") if "dlbridge.Stream" in b]
    assert _run_in(author_dir, code).splitlines() == ["[6. 6. 6. 6. 6. 6. 6. 6.]"]


def test_readme_go_author_torch_example(author_dir):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs PyTorch with a CUDA device")
    (code,) = [b for b in _author_blocks("python") if "torch.cuda.Stream" in b]
    assert _run_in(author_dir, code).splitlines() == ["ok"]
