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
