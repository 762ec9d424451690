"""Checks a bench_transfer.py log against the H100 transfer targets and prints one line per log:
    python3 bench/transfer/figures.py bench/results/transfer-h100/transfer-*.log
h2d/h2d-into: >= 40 GB/s at 1 GiB and >= 4x the best peer from 64 MiB; d2h: >= 30 GB/s at 1 GiB and
>= 8x torch; d2h-into: >= 40 GB/s at 1 GiB; every direction at 4 and 64 KiB: time <= 1.2x the best peer's
(GB/s ratio >= 1/1.2); no cell WRONG."""
import re, sys

def parse(path):
    cells, d = {}, None
    for line in open(path):
        if re.match(r"^[a-z][a-z0-9-]*$", line.strip()) and not line.startswith(" "):
            d = line.strip(); continue
        m = re.match(r"^\s+(\d+ (?:KiB|MiB|GiB))\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", line)
        if m and d:
            f = lambda x: float(x) if re.match(r"^[\d.]+$", x) else None  # noqa: E731
            cells[(d, m.group(1))] = dict(dlb=f(m.group(2)), torch=f(m.group(3)), cupy=f(m.group(4)), ratio=f(m.group(5)))
    return cells

def check(path):
    c, miss = parse(path), []
    if "WRONG" in open(path).read():
        miss.append("a WRONG cell")
    for d in ("h2d", "h2d-into"):
        x = c.get((d, "1 GiB"))
        if x and x["dlb"] < 40:
            miss.append("%s 1 GiB %.1f GB/s" % (d, x["dlb"]))
        for s in ("64 MiB", "256 MiB", "1 GiB"):
            x = c.get((d, s))
            if x and (x["ratio"] or 0) < 4:
                miss.append("%s %s %.2fx" % (d, s, x["ratio"] or 0))
    x = c.get(("d2h", "1 GiB"))
    if x and (x["dlb"] < 30 or x["dlb"] < 8 * (x["torch"] or 0)):
        miss.append("d2h 1 GiB %.1f GB/s (torch %.2f)" % (x["dlb"], x["torch"] or 0))
    x = c.get(("d2h-into", "1 GiB"))
    if x and x["dlb"] < 40:
        miss.append("d2h-into 1 GiB %.1f GB/s" % x["dlb"])
    for (d, s), x in c.items():
        if s in ("4 KiB", "64 KiB") and x["ratio"] is not None and x["ratio"] < 1 / 1.2:
            miss.append("%s %s %.2fx time" % (d, s, 1 / x["ratio"]))
    return miss

for p in sys.argv[1:]:
    m = check(p)
    print("%-60s %s" % (p, "every figure met" if not m else "missed: " + "; ".join(m)))
