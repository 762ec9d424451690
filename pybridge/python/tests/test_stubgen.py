"""dlbridge.stubgen on descriptions as dlb_func_describe gives them (no
library needed): every kind of parameter and result, and, where mypy is
installed, mypy's view of calls through the stub. The stub of a real
library (examples/gofunc) is checked by make gofunc-wheel-test."""

import ast
import os
import shutil
import subprocess
import sys

import pytest

from dlbridge import stubgen


def _param(name, kind, go_type, default_src=None, spec=None):
    p = {"name": name, "kind": kind, "go_type": go_type, "has_default": default_src is not None}
    if default_src is not None:
        p["default_src"] = default_src
        p["default"] = ast.literal_eval(default_src)
    if spec is not None:
        p["spec"] = spec
    return p


DESCRIPTIONS = [
    {"name": "demo.mix", "index": 0, "doc": 'Mix does """everything""".\nSecond line \\ with a backslash.',
     "schema": "demo.mix(x: float32 [N], n, flag=True, mode='fast', ratio=0.5, big=7)",
     "go_name": "example.com/demo.Mix", "stream": True,
     "params": [_param("x", "tensor", "*zerocopy.View", spec="float32 [N]"), _param("n", "int", "int"),
                _param("flag", "bool", "bool", "True"), _param("mode", "str", "string", "'fast'"),
                _param("ratio", "float", "float64", "0.5"), _param("big", "uint", "uint64", "7")],
     "results": [{"kind": "tensor", "go_type": "*zerocopy.View"}, {"kind": "float", "go_type": "float64"},
                 {"kind": "str", "go_type": "string"}]},
    {"name": "demo.count", "index": 1, "doc": "", "schema": "demo.count(x)", "go_name": "example.com/demo.Count",
     "stream": False, "params": [_param("x", "tensor", "*zerocopy.View")],
     "results": [{"kind": "int", "go_type": "int"}]},
    {"name": "demo.none", "index": 2, "doc": "", "schema": "demo.none(lambda)", "go_name": "example.com/demo.None",
     "stream": False, "params": [_param("lambda", "float", "float32")], "results": []},
    {"name": "other.f", "index": 3, "doc": "", "schema": "other.f()", "go_name": "example.com/other.F",
     "stream": False, "params": [], "results": []},
]


def test_stub_text():
    text = stubgen.stub(DESCRIPTIONS, "demo", "demo", "/x/libdemo.so")
    tree = ast.parse(text)
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert sorted(funcs) == ["count", "mix", "none"]  # other.f is another namespace
    assert "__all__ = ['mix', 'count', 'none']" in text
    assert "def mix(\n    x: _TensorLike,\n    n: SupportsIndex,\n    flag: bool = True,\n    mode: str = 'fast',\n" in text
    assert "    ratio: SupportsFloat = 0.5,\n    big: SupportsIndex = 7,\n    *,\n    stream: object = None,\n" in text
    assert ") -> tuple[Any, float, str]:" in text
    assert ") -> int:" in text and ") -> None:" in text
    assert "lambda_: SupportsFloat" in text  # a Python keyword as a name
    doc = ast.get_docstring(funcs["mix"])
    assert doc.startswith('Mix does """everything""".\nSecond line \\ with a backslash.')
    assert "x: tensor, float32 [N]" in doc and "mode: Go string (default 'fast')" in doc
    assert "registered as ``demo.mix(x: float32 [N]" in doc
    assert "Returns: tensor (the caller's type), Go float64, Go string" in doc


def test_stub_unknown_namespace():
    with pytest.raises(SystemExit, match="registers no function in namespace 'nope' .it has: demo, other"):
        stubgen.stub(DESCRIPTIONS, "nope", "nope", "/x/libdemo.so")


def test_main_needs_the_library(tmp_path, capsys):
    with pytest.raises(SystemExit):
        stubgen.main([str(tmp_path / "missing.so"), "-m", "demo"])
    assert "no file" in capsys.readouterr().err


@pytest.mark.skipif(not shutil.which("mypy"), reason="mypy is not installed")
def test_mypy_reads_the_stub(tmp_path):
    pkg = tmp_path / "demo"
    pkg.mkdir()
    (pkg / "__init__.pyi").write_text(stubgen.stub(DESCRIPTIONS, "demo", "demo", "libdemo.so"))
    (tmp_path / "use.py").write_text(
        "import array\n"
        "import demo\n"
        "t, r, s = demo.mix(b'abcd', 3, mode='slow', ratio=1, result_type='numpy')\n"
        "n: int = demo.count(bytearray(4), stream=None)\n"
        "demo.none(2.0)\n"
        "demo.count(array.array('f', [1.0]))\n"
        "demo.mix(b'abcd', 3.5)\n"              # line 7: a float for an int
        "demo.mix(b'abcd', 3, flag='yes')\n"    # line 8: a str for a bool
        "demo.count(b'x', strem=None)\n"        # line 9: no such keyword
        "s2: int = demo.mix(b'', 1)[2]\n")      # line 10: the third result is a str
    r = subprocess.run(["mypy", "--python-executable", sys.executable, "--no-incremental", "--cache-dir", os.devnull,
                        "--no-error-summary", "use.py"], cwd=tmp_path, capture_output=True, text=True)
    lines = sorted({int(ln.split(":")[1]) for ln in r.stdout.splitlines() if ": error:" in ln})
    assert lines == [7, 8, 9, 10], r.stdout + r.stderr
