"""Two builds of dlbridge against each other on bench_transfer.py's cells:
runs of the two alternate (A B A B ...; one process each, as one process
holds one Go runtime), dlbridge's cells alone (--libs dlbridge), and each
cell's best GB/s over a build's runs is compared. The machine's speed
drifts between runs as much as the builds differ (bench/results/onepath-h100),
so alternating runs and the best of each is what makes a few percent mean
something. A cell of B below --bar times A's is listed as slower; the exit
status is 1 when any is, or when a run fails or prints WRONG.

    python3 pybridge/python/bench/transfer_ab.py --runs 3 \\
        A=build/gpu-base/libdlbridge.so:build/gpu-base/py B=build/gpu/libdlbridge.so:build/gpu/py \\
        -- --max-mib 1024 --reps 5
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROW = re.compile(r"^\s*(\d+ [KMG]iB)\s+([\d.]+|WRONG)\s")


def parse(out):
    """{(direction, size): GB/s} of dlbridge's column in one run's tables."""
    cells, direction = {}, None
    for line in out.splitlines():
        if re.match(r"^[a-z][a-z2-]*$", line.strip()) and not line.startswith(" "):
            direction = line.strip()
            continue
        m = ROW.match(line)
        if direction and m:
            cells[(direction, m.group(1))] = 0.0 if m.group(2) == "WRONG" else float(m.group(2))
    return cells


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each build (default 3)")
    ap.add_argument("--bar", type=float, default=0.97, help="B/A below this is slower (default 0.97)")
    ap.add_argument("builds", nargs=2, metavar="NAME=LIB:PYTHONPATH")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then bench_transfer.py's options")
    args = ap.parse_args()
    builds = []
    for b in args.builds:
        name, _, paths = b.partition("=")
        lib, _, py = paths.partition(":")
        if not (name and os.path.exists(lib) and os.path.isdir(py)):
            ap.error("%s: want NAME=LIB:PYTHONPATH with an existing library and package folder" % b)
        builds.append((name, os.path.abspath(lib), os.path.abspath(py)))
    rest = [a for a in args.rest if a != "--"]
    seen = {name: {} for name, _, _ in builds}  # every run's GB/s per cell
    failed = 0
    for run in range(args.runs):
        for name, lib, py in builds:
            env = dict(os.environ, DLBRIDGE_LIB=lib, PYTHONPATH=py)
            p = subprocess.run([sys.executable, os.path.join(HERE, "bench_transfer.py"), "--libs", "dlbridge"] + rest,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=900)
            cells = parse(p.stdout)
            bad = p.returncode != 0 or not cells or "WRONG" in p.stdout
            failed += bad
            print("run %d %s: %d cells%s" % (run + 1, name, len(cells), " FAILED (exit %d)" % p.returncode if bad else ""))
            if bad:
                print(p.stdout[-2000:])
            for k, v in cells.items():
                seen[name].setdefault(k, []).append(v)
    best = {name: {k: max(v) for k, v in cells.items()} for name, cells in seen.items()}
    (a, _, _), (b, _, _) = builds
    print("\nbest GB/s of %d runs each; ratio = %s / %s" % (args.runs, b, a))
    print("%-10s %8s %10s %10s %7s   %s" % ("direction", "size", a, b, "ratio", "each run's GB/s (%s | %s)" % (a, b)))
    slower = []
    for k in best[a]:
        x, y = best[a][k], best[b].get(k, 0.0)
        r = y / x if x else 0.0
        mark = "  slower" if r < args.bar else ""
        if mark:
            slower.append(k)
        runs = " | ".join(" ".join("%.2f" % v for v in seen[n].get(k, [])) for n in (a, b))
        print("%-10s %8s %10.2f %10.2f %7.3f   %s%s" % (k[0], k[1], x, y, r, runs, mark))
    print("\n%d cells, %d below %.2fx, %d failed runs" % (len(best[a]), len(slower), args.bar, failed))
    return 1 if slower or failed else 0


if __name__ == "__main__":
    sys.exit(main())
