"""CPU time from /proc, for the transfer probes (cells.py, h2d_probe.py): per thread of this
process, and the steal time (CPU time the VM's host took away, all vCPUs). Linux only."""
import os

TICK = os.sysconf("SC_CLK_TCK")


def cpu_by_thread():
    """{thread id: (name, user + system clock ticks)} for this process's threads."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                s = f.read()
        except OSError:
            continue
        rest = s[s.rindex(")") + 2:].split()
        out[tid] = (s[s.index("(") + 1:s.rindex(")")], int(rest[11]) + int(rest[12]))
    return out


def busiest(before, after):
    """[(CPU seconds, thread id, name)] between two cpu_by_thread snapshots, busiest first."""
    rows = [((t - before.get(tid, (name, 0))[1]) / TICK, tid, name) for tid, (name, t) in after.items()]
    return sorted(rows, reverse=True)


def steal():
    """The machine's steal time so far, in clock ticks (/proc/stat)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])
