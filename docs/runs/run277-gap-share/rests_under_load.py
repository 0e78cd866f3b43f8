# The two read modes' rests (contention-steps.csv's rest_split_ms, rest_gpu_only_ms), medians
# over the last 3 s before each load and the last 3 s of it, per load of writescope:
#   python3 rests_under_load.py docs/runs/h100-run257-contention docs/runs/h200-run22[015]* ...
import gzip,csv,sys,statistics as st
# For each load: the rests before (last 3 s), at the end of the load (its last 3 s), per mode.
for d in sys.argv[1:]:
    import glob
    for sf in glob.glob(d+'/**/contention-steps.csv*', recursive=True):
        ef=sf.replace('steps','events')
        op=lambda f: gzip.open(f,'rt') if f.endswith('.gz') else open(f)
        rows=[r for r in csv.DictReader(op(sf)) if r['policy']=='writescope']
        evs=[e for e in csv.DictReader(op(ef)) if e['policy']=='writescope']
        starts=[float(e['unix_s']) for e in evs if e['event']=='load start']
        ends=[float(e['unix_s']) for e in evs if e['event']=='load end']
        def val(x):
            try: v=float(x); return v if v==v else None
            except: return None
        for s,e in zip(starts,ends):
            def win(a,b,k):
                vs=[val(r[k]) for r in rows if a<=float(r['unix_s'])<b and val(r[k]) is not None]
                return st.median(vs) if vs else float('nan')
            bs,bg=win(s-3,s,'rest_split_ms'),win(s-3,s,'rest_gpu_only_ms')
            ls,lg=win(e-3,e,'rest_split_ms'),win(e-3,e,'rest_gpu_only_ms')
            print("%s load@%.0f: split %.1f -> %.1f (+%.1f), gpu-only %.1f -> %.1f (+%.1f), ratio %.2f" % (sf.split('/')[2], s, bs, ls, ls-bs, bg, lg, lg-bg, (ls-bs)/(lg-bg) if lg!=bg else float('nan')))
