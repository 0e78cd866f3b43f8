# Span medians (us) of the gpu_worker (pid 2) in a profile-bench trace: step and the products.
import collections, json, sys
trace = json.load(open(sys.argv[1]))
events = trace['traceEvents'] if isinstance(trace, dict) else trace
spans = collections.defaultdict(list)
for e in events:
    if e.get('ph') == 'X' and e.get('pid') == 2:
        spans[e['name']].append(e['dur'])
med = lambda v: sorted(v)[len(v) // 2]
names = ['step', 'qkv', 'o_proj', 'router', 'shared_experts', 'logits', 'kv_write']
print(' '.join(sys.argv[2:]), ' '.join('%s=%.0f' % (k, med(spans[k])) for k in names if spans[k]))
