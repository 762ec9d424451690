"""Compares the transfer logs of an A/B run (scripts/build-ab.sh: base and
new alternate, one process each, since one process holds one Go runtime):
every base<i>.transfer.log against every new<i>.transfer.log in a folder,
dlbridge's column of bench_transfer.py's tables. The machine's speed drifts
between runs as much as two builds differ (bench/results/onepath-h100), so
each cell's best over a side's runs is compared, with every run's figure
beside it to show the spread. A cell of new below --bar times base's is
listed as slower; the exit status is 1 when any is, or when a log has a
WRONG cell or no table.

    python3 pybridge/python/bench/compare_transfers.py $OUT [--bar 0.97]
"""

import argparse
import glob
import os
import re
import sys

ROW = re.compile(r"^\s*(\d+ [KMG]iB)\s+([\d.]+|WRONG|-)\s")
DIRECTION = re.compile(r"^[a-z][a-z2-]*$")


def parse(text):
    """{(direction, size): dlbridge's GB/s (0.0 for WRONG)} of one log."""
    cells, direction = {}, None
    for line in text.splitlines():
        if DIRECTION.match(line):
            direction = line
            continue
        m = ROW.match(line)
        if direction and m and m.group(2) != "-":
            cells[(direction, m.group(1))] = 0.0 if m.group(2) == "WRONG" else float(m.group(2))
    return cells


def side(folder, name):
    """Every run's cells of one side, in run order, and the logs that failed."""
    runs, bad = [], []
    logs = glob.glob(os.path.join(folder, "%s*.transfer.log" % name))
    for log in sorted(logs, key=lambda p: int(re.search(r"(\d+)\.transfer\.log$", p).group(1))):
        with open(log) as f:
            cells = parse(f.read())
        runs.append(cells)
        if not cells or 0.0 in cells.values():
            bad.append(os.path.basename(log))
    return runs, bad


def compare(base, new, bar):
    """The table's lines and the cells of new below bar times base's."""
    lines = ["%-10s %8s %8s %8s %7s   %s" % ("direction", "size", "base", "new", "ratio", "each run's GB/s: base | new")]
    slower = []
    keys = []
    for run in base:
        keys += [k for k in run if k not in keys]
    for k in keys:
        xs = [r[k] for r in base if k in r]
        ys = [r[k] for r in new if k in r]
        x, y = max(xs), max(ys, default=0.0)
        ratio = y / x if x else 0.0
        if ratio < bar:
            slower.append(k)
        lines.append("%-10s %8s %8.2f %8.2f %7.3f   %s | %s%s" % (k[0], k[1], x, y, ratio, " ".join("%.2f" % v for v in xs),
                                                           " ".join("%.2f" % v for v in ys), "  slower" if ratio < bar else ""))
    return lines, slower


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="where build-ab's run.sh wrote base<i>.transfer.log and new<i>.transfer.log")
    ap.add_argument("--bar", type=float, default=0.97, help="new/base below this is slower (default 0.97)")
    args = ap.parse_args()
    base, bad = side(args.folder, "base")
    new, bad_new = side(args.folder, "new")
    if not base or not new:
        print("compare_transfers: no base*.transfer.log or new*.transfer.log in %s" % args.folder)
        return 1
    lines, slower = compare(base, new, args.bar)
    print("best GB/s of %d base and %d new runs; ratio = new / base" % (len(base), len(new)))
    print("\n".join(lines))
    print("\n%d cells, %d below %.2fx; logs without a table or with a WRONG cell: %s"
          % (len(lines) - 1, len(slower), args.bar, ", ".join(bad + bad_new) or "none"))
    return 1 if slower or bad or bad_new else 0


if __name__ == "__main__":
    sys.exit(main())
