#!/usr/bin/env python3
"""What DistributedDataParallel's bucket schedule would do for gpt-tiny at 2, 8 and 64 ranks.

A simulation, not a measurement: gradients become final during backward in reverse parameter
order, at times proportional to the work done so far (the matmul FLOPs of a parameter are
proportional to its size, so cumulative bytes stand in for time); buckets are formed as
src/distributed/ddp.cpp forms them (the first capped at 1 MiB, the rest at BUCKET_MB), each is
launched when its last gradient is final and the previous bucket has been launched, and one
all-reduce runs at a time. A ring all-reduce of M bytes over N ranks takes
    T(M, N) = 2 (N - 1) alpha + 2 (N - 1) / N * M / beta
(2(N-1) steps, each sending M/N bytes to the next rank). The exposed time is how long the end
of backward waits for the last all-reduce.

    bench/bucket_schedule.py [--backward-ms 200] [--alpha-us 5] [--beta-gbs 12.5]
"""
import argparse

MIB = 1 << 20


def gpt_tiny_parameters(vocab=256, ctx=128, d=256, layers=4):
    """(name, bytes) in registration order, float32; the output head is tied to the embedding."""
    p = [("tok_emb", vocab * d), ("pos_emb", ctx * d)]
    for i in range(layers):
        p += [(f"h{i}.ln1.w", d), (f"h{i}.ln1.b", d),
              (f"h{i}.attn.qkv.w", 3 * d * d), (f"h{i}.attn.qkv.b", 3 * d),
              (f"h{i}.attn.proj.w", d * d), (f"h{i}.attn.proj.b", d),
              (f"h{i}.ln2.w", d), (f"h{i}.ln2.b", d),
              (f"h{i}.mlp.fc.w", 4 * d * d), (f"h{i}.mlp.fc.b", 4 * d),
              (f"h{i}.mlp.proj.w", 4 * d * d), (f"h{i}.mlp.proj.b", d)]
    p += [("ln_f.w", d), ("ln_f.b", d)]
    return [(n, 4 * k) for n, k in p]


def buckets(sizes, first_cap, cap):
    """Indices into `sizes` (already in ready order), grouped as the reducer groups them."""
    out, cur, total = [], [], 0
    for i, b in enumerate(sizes):
        cur.append(i)
        total += b
        if total >= (first_cap if not out else cap):
            out.append(cur)
            cur, total = [], 0
    if cur:
        out.append(cur)
    return out


def ring_ms(nbytes, n, alpha_us, beta_gbs):
    if n == 1:
        return 0.0
    return (2 * (n - 1) * alpha_us * 1e-3) + 2 * (n - 1) / n * nbytes / (beta_gbs * 1e9) * 1e3


def simulate(n, bucket_mb, backward_ms, alpha_us, beta_gbs):
    sizes = [b for _, b in reversed(gpt_tiny_parameters())]
    total = sum(sizes)
    ready, acc = [], 0
    for b in sizes:  # the time each gradient becomes final
        acc += b
        ready.append(backward_ms * acc / total)
    groups = buckets(sizes, MIB, bucket_mb * MIB)
    comm_free, launches, comm = 0.0, [], 0.0
    for g in groups:
        nbytes = sum(sizes[i] for i in g)
        start = max(ready[g[-1]], comm_free)
        t = ring_ms(nbytes, n, alpha_us, beta_gbs)
        comm += t
        comm_free = start + t
        launches.append((nbytes, t))
    exposed = max(0.0, comm_free - backward_ms)
    return groups, launches, comm, exposed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backward-ms", type=float, default=200.0)
    ap.add_argument("--alpha-us", type=float, default=5.0, help="per-message latency")
    ap.add_argument("--beta-gbs", type=float, default=12.5, help="link bandwidth, GB/s")
    a = ap.parse_args()
    print(f"gpt-tiny: {sum(b for _, b in gpt_tiny_parameters()) / MIB:.2f} MiB of float32 "
          f"gradients; backward {a.backward_ms:g} ms, alpha {a.alpha_us:g} us, "
          f"beta {a.beta_gbs:g} GB/s\n")
    print(f"{'ranks':>5} {'bucket':>7} {'buckets (MiB)':<34} {'latency':>8} {'bandwidth':>10} "
          f"{'comm':>7} {'exposed':>8}")
    for n in (2, 8, 64):
        for mb in (25, 4, 1):
            groups, launches, comm, exposed = simulate(n, mb, a.backward_ms, a.alpha_us, a.beta_gbs)
            lat = len(groups) * 2 * (n - 1) * a.alpha_us * 1e-3
            sizes = ", ".join(f"{nb / MIB:.1f}" for nb, _ in launches)
            if len(sizes) > 34:
                sizes = sizes[:31] + "..."
            print(f"{n:>5} {mb:>5}MB {sizes:<34} {lat:>6.2f}ms {comm - lat:>8.2f}ms "
                  f"{comm:>5.2f}ms {exposed:>6.2f}ms")


if __name__ == "__main__":
    main()
