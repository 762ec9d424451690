"""The README's Python examples run as written: the CPU one wherever NumPy
and PyTorch are installed, the GPU one on a CUDA device or the fake driver
(make pytest-fakecuda)."""

import os
import re
import shutil
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


# ---- the shell and Go blocks of the README and docs/ (make docs-test) ----
#
# Every ```sh and ```go block of README.md, docs/*.md and
# pybridge/python/README.md has a line above it that says how it is tested:
#   <!-- test: checkout -->          run with bash in a scratch copy of the checkout
#   <!-- test: new-module -->        run in a Go user's new module (go mod init)
#   <!-- test: author -->            run in a Go author's folder (its blocks make the module)
#   <!-- test: file CONTEXT:PATH --> a go or python block is the file PATH of that context
#                                    (written before the context's first block runs;
#                                    gofmt-clean, or compiled by py_compile)
#   <!-- test: skip: REASON -->      not run here: a GPU or the network, and why
# A block runs as written, with `bash -e`, offline: HOME is a scratch folder whose
# src/dlbridge is this checkout (the docs' stand-in for a module on the proxy),
# GOPROXY=off (modules from the module cache the checkout's build filled), pip
# without an index, and the interpreter running these tests (the venv that has
# dlbridge) first on PATH. Blocks of one file share their contexts, in order.
# make docs-test sets DLBRIDGE_DOCS_BLOCKS=1; elsewhere they are skipped (the
# marker check runs everywhere).

_MARK = re.compile(r"^<!-- test: (checkout|new-module|author|file (?:checkout|new-module|author):\S+|skip: .+) -->$")
_CONTEXTS = ("checkout", "new-module", "author")


def _repo():
    return os.path.dirname(os.path.abspath(README))


def _doc_files():
    repo = _repo()
    docs = os.path.join(repo, "docs")
    names = ["README.md"] + sorted("docs/" + n for n in os.listdir(docs) if n.endswith(".md")) if os.path.isdir(docs) else ["README.md"]
    names.append("pybridge/python/README.md")
    return [n for n in names if os.path.exists(os.path.join(repo, n))]


def _doc_blocks():
    """(file, line, lang, marker or None, code) of every sh and go block,
    and of every python block with a marker."""
    if not os.path.exists(README):
        return []
    out = []
    for name in _doc_files():
        with open(os.path.join(_repo(), name), encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^```(\w*)$", lines[i])
            if not m or not m.group(1):
                if m:  # an unlabelled block: skip to its end
                    i += 1
                    while i < len(lines) and lines[i] != "```":
                        i += 1
                i += 1
                continue
            lang, start = m.group(1), i
            i += 1
            body = []
            while i < len(lines) and lines[i] != "```":
                body.append(lines[i])
                i += 1
            i += 1
            prev = lines[start - 1] if start > 0 else ""
            mark = prev if prev.startswith("<!-- test:") else None
            # Python blocks are test_readme's examples above, unless a
            # marker makes one a file of a context.
            if lang in ("sh", "go") or lang == "python" and mark:
                out.append((name, start + 1, lang, mark, "\n".join(body) + "\n"))
    return out


@pytest.mark.skipif(not os.path.exists(README), reason="needs the source checkout's README.md")
def test_docs_block_markers():
    """Every sh and go block says how it is tested, in a form the runner knows."""
    blocks = _doc_blocks()
    assert blocks, "no sh or go block found"
    bad = ["%s:%d: ```%s block %s" % (f, ln, lang, "without a <!-- test: ... --> line above it" if mk is None
                                      else "with an unknown marker %r" % mk)
           for f, ln, lang, mk, _ in blocks if mk is None or not _MARK.match(mk)]
    assert not bad, "\n".join(bad)
    # A file block is Go or Python source (gofmt or py_compile checks it);
    # sh blocks run, and a python block's only marker is a file's.
    wrong = ["%s:%d" % (f, ln) for f, ln, lang, mk, _ in blocks
             if mk and (mk.startswith("<!-- test: file ") == (lang == "sh") or lang == "python" and not mk.startswith("<!-- test: file "))]
    assert not wrong, wrong


def _go():
    """The go command: $GO, else go on PATH, else Go's default install."""
    go = shutil.which(os.environ.get("GO") or "go") or shutil.which("/usr/local/go/bin/go")
    if not go:
        pytest.fail("the docs' blocks need the go command (GO=/path/to/go)")
    return go


class _DocSession:
    """The contexts of one documentation file's blocks."""

    def __init__(self, name, root):
        self.name, self.root = name, root
        repo = _repo()
        go = _go()
        vals = subprocess.run([go, "env", "GOCACHE", "GOMODCACHE", "GOPATH"], capture_output=True, text=True, check=True).stdout.split("\n")
        home = os.path.join(root, "home")
        os.makedirs(os.path.join(home, "src"))
        os.symlink(repo, os.path.join(home, "src", "dlbridge"))
        env = {k: v for k, v in os.environ.items()
               if k not in ("DLBRIDGE_LIB", "PYTHONPATH", "GOFLAGS", "GOWORK", "VIRTUAL_ENV")}
        env.update(HOME=home, GOCACHE=vals[0], GOMODCACHE=vals[1], GOPATH=vals[2], GOPROXY="off", GOSUMDB="off",
                   GOTOOLCHAIN="local", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                   PATH=os.pathsep.join([os.path.dirname(sys.executable), os.path.dirname(go), env.get("PATH", "")]))
        self.env = env
        self.dirs = {}
        # The checkout's tracked and new files, without what builds left.
        files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                               capture_output=True, check=True).stdout.decode().split("\0")
        co = self.dirs["checkout"] = os.path.join(root, "checkout")
        for rel in files:
            if rel and os.path.isfile(os.path.join(repo, rel)):
                os.makedirs(os.path.dirname(os.path.join(co, rel)) or co, exist_ok=True)
                shutil.copy2(os.path.join(repo, rel), os.path.join(co, rel))
        mod = self.dirs["new-module"] = os.path.join(root, "app")
        os.makedirs(mod)
        self.run_in(mod, "go mod init example.com/dlbridgeuser")
        self.dirs["author"] = os.path.join(root, "author")
        os.makedirs(self.dirs["author"])
        for _, _, _, mk, code in (b for b in _doc_blocks() if b[0] == name):
            m = re.match(r"<!-- test: file ([a-z-]+):(\S+) -->", mk or "")
            if m:
                path = os.path.join(self.dirs[m.group(1)], m.group(2))
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(code)

    def run_in(self, cwd, code, timeout=900):
        r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=cwd, env=self.env,
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, "in %s:\n%s\nstatus %d\n%s%s" % (cwd, code, r.returncode, r.stdout[-6000:], r.stderr[-6000:])
        return r.stdout


@pytest.fixture(scope="session")
def doc_sessions(tmp_path_factory):
    sessions = {}

    def get(name):
        if name not in sessions:
            sessions[name] = _DocSession(name, str(tmp_path_factory.mktemp("docs-" + name.replace("/", "-"))))
        return sessions[name]
    return get


def _blocks_to_run():
    return [pytest.param(b, id="%s:%d" % (b[0], b[1])) for b in _doc_blocks()]


@pytest.mark.parametrize("block", _blocks_to_run())
def test_docs_block(block, doc_sessions):
    name, line, lang, mk, code = block
    if mk is None or not _MARK.match(mk):
        pytest.fail("%s:%d: no known <!-- test: ... --> marker (test_docs_block_markers)" % (name, line))
    kind = _MARK.match(mk).group(1)
    if kind.startswith("skip: "):
        pytest.skip("%s:%d: %s" % (name, line, kind[len("skip: "):]))
    if not os.environ.get("DLBRIDGE_DOCS_BLOCKS"):
        pytest.skip("runs in make docs-test (DLBRIDGE_DOCS_BLOCKS=1): builds the library and modules")
    s = doc_sessions(name)
    if kind.startswith("file "):
        # Written into its context when the session began; here: well formed.
        path = os.path.join(s.dirs[kind[5:].split(":")[0]], kind.split(":", 1)[1])
        if lang == "go":
            out = s.run_in(os.path.dirname(path), "gofmt -l %s" % os.path.basename(path))
            assert out == "", "%s:%d is not gofmt-clean" % (name, line)
        else:
            r = subprocess.run([sys.executable, "-m", "py_compile", path], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        return
    s.run_in(s.dirs[kind], code)
