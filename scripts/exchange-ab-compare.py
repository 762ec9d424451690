#!/usr/bin/env python3
"""Compares the exchange logs of an A/B device run (scripts/build-ab.sh,
`build/ab/run.sh exchange`): for each cell (and of the ctypes
section that older logs hold), the base rounds, the new rounds and new/base of the means, with
the peers' cells marked so that the machine's drift between rounds shows.

    python3 scripts/exchange-ab-compare.py DIR   (DIR holds base1.exchange.log, new1.exchange.log, ...)
"""
import re,sys,glob,os,statistics as st
d=sys.argv[1]
data={}
for f in sorted(glob.glob(d+'/*.exchange.log')):
    side='base' if os.path.basename(f).startswith('base') else 'new'; mode=None; sec=False
    for line in open(f):
        if line.startswith('dlbridge 0.1.0'):
            # Logs from before the one binding hold a second, ctypes section.
            mode='ctypes' if 'ctypes' in line else 'fast'; sec=True; continue
        if line.startswith('ours'): sec=False
        m=re.match(r'^(\s*\S.*?)\s{2,}([\d.]+)\s*$',line)
        if m and mode and sec:
            data.setdefault((mode,m.group(1).strip()),{}).setdefault(side,[]).append(float(m.group(2)))
for mode in ('fast','ctypes'):
    print(f'== {mode}: base (rounds) new (rounds) new/base(mean)')
    for (md,k),v in data.items():
        if md!=mode: continue
        b,n=v.get('base',[]),v.get('new',[])
        if not b or not n: continue
        peer = not k.lower().startswith(('dlbridge','torch.from_dlpack(dlbridge','cupy.from_dlpack(dlbridge','numpy.from_dlpack(dlbridge','numpy.asarray(dlbridge','torch.as_tensor(dlbridge','cupy.asarray(dlbridge'))
        print(f"{'  peer ' if peer else '  OURS '}{k:45s} {' '.join('%.2f'%x for x in b):12s} {' '.join('%.2f'%x for x in n):12s} {st.mean(n)/st.mean(b):.3f}")
