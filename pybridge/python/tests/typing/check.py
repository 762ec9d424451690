"""Runs mypy --strict on a user's script and on a script of mistakes
against an installed dlbridge (its py.typed and stubs), and compares:
user_script.py must be clean and each reveal_type must show the type its
"# R:" comment names; user_errors.py must have exactly the errors its
"# E: code" comments name, line by line.

    python3 check.py [--python-executable PYTHON]   (mypy's own option)
"""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def mypy(path, extra):
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                        "--config-file", os.devnull, "--show-error-codes", "--python-version", "3.10"]
                       + extra + [path], cwd=HERE, capture_output=True, text=True)
    got = {}
    for line in r.stdout.splitlines():
        m = re.match(r"[^:]+:(\d+): (error|note): (.*)", line)
        if m:
            got.setdefault(int(m.group(1)), []).append((m.group(2), m.group(3)))
    return r, got


def marks(path, tag):
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            m = re.search(r"# %s: (.*)$" % tag, line)
            if m:
                out[n] = m.group(1).strip()
    return out


def main(extra):
    bad = []
    script = os.path.join(HERE, "user_script.py")
    r, got = mypy(script, extra)
    want = marks(script, "R")
    for n, items in sorted(got.items()):
        for kind, text in items:
            if kind == "error":
                bad.append("user_script.py:%d: %s" % (n, text))
            elif text.startswith("Revealed type is"):
                seen = text[len('Revealed type is "'):-1]
                if want.get(n) != seen:
                    bad.append("user_script.py:%d: revealed %s, want %s" % (n, seen, want.get(n)))
    for n in sorted(set(want) - set(got)):
        bad.append("user_script.py:%d: no reveal_type output (mypy said: %s)" % (n, r.stdout[-500:]))
    errors = os.path.join(HERE, "user_errors.py")
    r, got = mypy(errors, extra)
    want = marks(errors, "E")
    codes = {n: {re.search(r"\[([a-z-]+)\]$", t).group(1) for k, t in items if k == "error"}
             for n, items in got.items()}
    for n in sorted(set(want) | set(codes)):
        if want.get(n) not in codes.get(n, set()):
            bad.append("user_errors.py:%d: want error [%s], mypy said %s" % (n, want.get(n), got.get(n)))
    if bad:
        print("typing check failed:\n  " + "\n  ".join(bad))
        return 1
    print("typing check: user_script.py clean, %d revealed types as expected; user_errors.py: %d errors "
          "as expected" % (len(marks(script, "R")), len(want)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
