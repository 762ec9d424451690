"""check-dist.py checks dlbridge's release files (`make dist` runs it):

    python3 scripts/check-dist.py dist/dlbridge-*.tar.gz dist/dlbridge-*.whl

Each wheel: its file name and WHEEL tags agree; it is a platform wheel; its
manylinux tag is one its binaries earn: every ELF file in it is built for
the tag's architecture, needs no glibc symbol version newer than the tag's
(read from the files' version-needs sections) and links only glibc's own
libraries; it carries LICENSE (the repository's text), py.typed, the stubs,
both native files, and metadata that says Apache-2.0 and Python >= 3.10.
Each sdist: LICENSE, the Go module with vendor/modules.txt, py.typed and
the stubs, setup.py. Prints one line per file; exit status 1 on a problem.
"""

import email.parser
import importlib.util
import os
import re
import sys
import tarfile
import tempfile
import zipfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
PKG = os.path.join(ROOT, "pybridge", "python")
STUBS = ["__init__.pyi", "_tensor.pyi", "_stream.pyi", "_pointer.pyi", "_types.pyi", "py.typed"]
ALLOWED_LIBS = {"libc.so.6", "libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1",
                "libgcc_s.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


def loaderr():
    spec = importlib.util.spec_from_file_location("_loaderr", os.path.join(PKG, "dlbridge", "_loaderr.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def license_text():
    with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
        return f.read()


def check_wheel(path, problems):
    name = os.path.basename(path)
    m = re.fullmatch(r"dlbridge-([^-]+)-(cp3\d+)-(abi3|cp3\d+t?)-([a-z0-9_.]+)\.whl", name)
    if not m:
        problems.append("%s: not a dlbridge platform wheel name" % name)
        return
    version, impl, abi, plats = m.groups()
    z = zipfile.ZipFile(path)
    names = set(z.namelist())
    info = "dlbridge-%s.dist-info/" % version
    wheel = z.read(info + "WHEEL").decode()
    tags = sorted(line.split(": ", 1)[1] for line in wheel.splitlines() if line.startswith("Tag: "))
    want_tags = sorted("%s-%s-%s" % (impl, abi, p) for p in plats.split("."))
    if tags != want_tags:
        problems.append("%s: WHEEL tags %s, file name says %s" % (name, tags, want_tags))
    if "Root-Is-Purelib: false" not in wheel:
        problems.append("%s: not a platform wheel (Root-Is-Purelib)" % name)
    meta = email.parser.Parser().parsestr(z.read(info + "METADATA").decode())
    if meta["Requires-Python"] != ">=3.10":
        problems.append("%s: Requires-Python is %r" % (name, meta["Requires-Python"]))
    if meta["License"] != "Apache-2.0":
        problems.append("%s: License is %r" % (name, meta["License"]))
    if info + "LICENSE" not in names or z.read(info + "LICENSE") != license_text():
        problems.append("%s: no LICENSE in %s, or not the repository's" % (name, info))
    for f in STUBS + ["libdlbridge.so"]:
        if "dlbridge/" + f not in names:
            problems.append("%s: no dlbridge/%s" % (name, f))
    if not any(re.fullmatch(r"dlbridge/_core\.(abi3|cpython-[\w-]+)\.so", n) for n in names):
        problems.append("%s: no dlbridge/_core extension" % name)
    # The binaries against each platform tag.
    read_elf = loaderr().read_elf
    binaries = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sorted(names):
            data = z.read(n)
            if data[:4] != b"\x7fELF":
                continue
            p = os.path.join(tmp, n.replace("/", "_"))
            with open(p, "wb") as f:
                f.write(data)
            binaries[n] = read_elf(p)
    if not binaries:
        problems.append("%s: no ELF files" % name)
    for plat in plats.split("."):
        pm = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)|manylinux2014_(\w+)|linux_(\w+)", plat)
        if not pm:
            problems.append("%s: unknown platform tag %s" % (name, plat))
            continue
        if pm.group(1):
            floor, arch = (int(pm.group(1)), int(pm.group(2))), pm.group(3)
        elif pm.group(4):
            floor, arch = (2, 17), pm.group(4)
        else:
            floor, arch = None, pm.group(5)
        for n, elf in binaries.items():
            if elf["machine"] != arch:
                problems.append("%s: %s is built for %s, the tag %s says %s" % (name, n, elf["machine"], plat, arch))
            if floor is None:
                continue
            if elf["glibc"] and elf["glibc"] > floor:
                problems.append("%s: %s needs glibc %d.%d, the tag %s promises %d.%d"
                                % ((name, n) + elf["glibc"] + (plat,) + floor))
            extra = set(elf["needed"]) - ALLOWED_LIBS
            if extra:
                problems.append("%s: %s links %s, which %s does not allow" % (name, n, sorted(extra), plat))
            private = [v for vs in elf["versions"].values() for v in vs
                       if not re.fullmatch(r"GLIBC_\d+\.\d+(\.\d+)?|GCC_\d+(\.\d+)*", v)]
            if private:
                problems.append("%s: %s needs symbol versions %s" % (name, n, private))
    floors = ", ".join("%s glibc %s" % (os.path.basename(n), "%d.%d" % e["glibc"] if e["glibc"] else "-")
                       for n, e in sorted(binaries.items()))
    print("check-dist: %s: tags %s; %s; LICENSE, py.typed, stubs present" % (name, " ".join(tags), floors))


def check_sdist(path, problems):
    name = os.path.basename(path)
    t = tarfile.open(path)
    members = {m.name.split("/", 1)[1]: m for m in t.getmembers() if "/" in m.name}
    need = ["LICENSE", "setup.py", "pyproject.toml", "PKG-INFO", "src/_core.c", "src/_exports.h",
            "_gosrc/pybridge/capi/dlbridge.h", "_gosrc/go.mod",
            "_gosrc/go.sum", "_gosrc/vendor/modules.txt", "_gosrc/pybridge/cmd/libdlbridge"] + \
        ["dlbridge/" + s for s in STUBS]
    for n in need:
        if n not in members and not any(k.startswith(n + "/") for k in members):
            problems.append("%s: no %s" % (name, n))
    lic = members.get("LICENSE")
    if lic is not None and t.extractfile(lic).read() != license_text():
        problems.append("%s: LICENSE is not the repository's" % name)
    mods = members.get("_gosrc/vendor/modules.txt")
    text = t.extractfile(mods).read().decode() if mods is not None else ""
    vendored = [line.split()[1] + "@" + line.split()[2] for line in text.splitlines()
                if line.startswith("# ") and len(line.split()) >= 3]
    print("check-dist: %s: %d files, Go modules vendored from %s" % (name, len(members), ", ".join(vendored)))


def main(paths):
    problems = []
    if not any(p.endswith(".whl") for p in paths) or not any(p.endswith(".tar.gz") for p in paths):
        problems.append("want at least one wheel and one sdist, got %s" % paths)
    for p in paths:
        (check_wheel if p.endswith(".whl") else check_sdist)(p, problems)
    if problems:
        print("check-dist: problems:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
