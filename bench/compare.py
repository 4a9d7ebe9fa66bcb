#!/usr/bin/env python3
"""Summarises bench/run.sh's JSON lines: per workload, the median and best of adjoint and
libtorch runs, and the ratio adjoint/libtorch (below 1 means adjoint is faster).
Usage: compare.py RESULTS.jsonl  (stdlib only)."""
import json
import statistics
import sys
from collections import defaultdict

# The headline metric of each workload: (field, unit).
METRIC = {"op-overhead": ("ns_per_op", "ns/op"), "mlp": ("ms_per_step", "ms/step"),
          "deep-mlp": ("ms_per_step", "ms/step"), "hvp": ("hvp_over_grad", "x grad"),
          "gpt-tiny": ("ms_per_step", "ms/step")}


def main(path):
    runs = defaultdict(list)  # (workload, impl) -> records
    order = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            key = (rec["workload"], rec["impl"])
            if rec["workload"] not in order:
                order.append(rec["workload"])
            runs[key].append(rec)

    def med(w, impl, field):
        vals = [r[field] for r in runs.get((w, impl), []) if r.get(field) is not None]
        return statistics.median(vals) if vals else None

    def fmt(v, spec=None):
        if v is None:
            return "-"
        if spec is None:  # 3 significant digits, but never exponent notation
            spec = ".0f" if abs(v) >= 100 else ".3g"
        return format(v, spec)

    head = f"{'workload':<12} {'metric':<8} {'adjoint':>10} {'libtorch':>10} {'ratio':>7}" \
           f"   {'adj best':>9} {'lt best':>9}  runs"
    print(head)
    print("-" * len(head))
    for w in order:
        field, unit = METRIC.get(w, ("ms_per_step", "ms/step"))
        a, t = med(w, "adjoint", field), med(w, "libtorch", field)
        best_field = field if field != "ms_per_step" else "ms_per_step_min"
        ab = min((r[best_field] for r in runs.get((w, "adjoint"), []) if best_field in r),
                 default=None)
        tb = min((r[best_field] for r in runs.get((w, "libtorch"), []) if best_field in r),
                 default=None)
        ratio = a / t if a is not None and t else None
        n = f"{len(runs.get((w, 'adjoint'), []))}+{len(runs.get((w, 'libtorch'), []))}"
        print(f"{w:<12} {unit:<8} {fmt(a):>10} {fmt(t):>10} {fmt(ratio, '.2f'):>7}"
              f"   {fmt(ab):>9} {fmt(tb):>9}  {n}")
    print()
    # Phase medians and checks, where both sides report them.
    for w in order:
        parts = []
        for field in ("fwd_ms", "bwd_ms", "opt_ms", "free_ms"):
            a, t = med(w, "adjoint", field), med(w, "libtorch", field)
            if a is not None and t is not None:
                parts.append(f"{field} {a:.3g} vs {t:.3g}")
        for field in ("loss", "grad_x0"):
            a, t = med(w, "adjoint", field), med(w, "libtorch", field)
            if a is not None or t is not None:
                parts.append(f"{field} {fmt(a, '.6g')} vs {fmt(t, '.6g')}")
        if w == "hvp":
            parts.append("ms per hvp "
                         f"{fmt(med(w, 'adjoint', 'ms_per_hvp'))} vs "
                         f"{fmt(med(w, 'libtorch', 'ms_per_hvp'))}; adjoint forward over reverse "
                         f"{fmt(med(w, 'adjoint', 'fwd_over_rev_ms_per_hvp'))} ms = "
                         f"{fmt(med(w, 'adjoint', 'fwd_over_rev_hvp_over_grad'))} x grad")
        if w == "jacobian":
            rec = runs.get((w, "adjoint"), [])
            for key in sorted(k for r in rec[:1] for k in r if k.startswith("jacrev_ms_")):
                tag = key[len("jacrev_ms"):]
                parts.append(f"{tag[1:]}: jacrev {fmt(med(w, 'adjoint', key))} ms, jacfwd "
                             f"{fmt(med(w, 'adjoint', 'jacfwd_ms' + tag))} ms")
        if w == "ode-adjoint":
            for m in ("backprop", "adjoint", "checkpoint"):
                parts.append(f"{m} {fmt(med(w, 'adjoint', m + '_ms_per_grad'))} ms, saved peak "
                             f"{fmt(med(w, 'adjoint', m + '_saved_peak_mib'))} MiB")
        if w == "deep-mlp":
            parts.append("fwd growth MiB (expected 16): adjoint storage "
                         f"{fmt(med(w, 'adjoint', 'fwd_storage_peak_growth_mib'))}, "
                         f"libtorch malloc {fmt(med(w, 'libtorch', 'fwd_malloc_peak_growth_mib'))}")
        if parts:
            print(f"{w} (adjoint vs libtorch): " + "; ".join(parts))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
