#!/usr/bin/env python3
"""Fits the coefficients of the float32 tanh in src/backend/cpu/simd_math-inl.h (TanhF32Coefs).

Relative minimax polynomials by Lawson's iteration: weighted least squares, each point's weight
multiplied by its error after every solve; the best of the iterates is kept. 50 digits (mpmath,
Debian's python3-mpmath). About 30 s.
  small: tanh(a) / a = 1 + c1 s + ... + c5 s^5, s = a^2, a in [0, 0.625]
  exp:   exp(r)      = 1 + c1 r + ... + c6 r^6,        r in [-ln 2 / 2, ln 2 / 2]
The kernel itself is then checked on every float32 (tests/backend/simd_math_test.cpp samples
every 61st).
"""
import mpmath as mp

mp.mp.dps = 50


def lawson(points, f, basis, degree, iterations):
    """c1..c_degree minimising max |(1 + sum c_j basis(x)^j) / f(x) - 1| over the points."""
    values = [f(x) for x in points]
    rows = [[basis(x) ** j / v for j in range(1, degree + 1)] for x, v in zip(points, values)]
    rhs = [(v - 1) / v for v in values]  # the residual of the fixed 1, to be cancelled
    weights = [mp.mpf(1)] * len(points)
    best = None
    for _ in range(iterations):
        m = mp.matrix(degree, degree)
        b = mp.matrix(degree, 1)
        for row, r, w in zip(rows, rhs, weights):
            for i in range(degree):
                b[i] += w * row[i] * r
                for j in range(degree):
                    m[i, j] += w * row[i] * row[j]
        c = mp.lu_solve(m, b)
        errors = [abs(sum(c[j] * row[j] for j in range(degree)) - r) for row, r in zip(rows, rhs)]
        worst = max(errors)
        if best is None or worst < best[0]:
            best = (worst, [c[j] for j in range(degree)])
        total = mp.fsum(w * e for w, e in zip(weights, errors))
        weights = [w * e / total for w, e in zip(weights, errors)]
    return best


def chebyshev(lo, hi, n):
    return [lo + (hi - lo) * (1 + mp.cos(mp.pi * (2 * i + 1) / (2 * n))) / 2 for i in range(n)]


def show(name, fit):
    worst, coefs = fit
    print(f"{name}: max relative error {float(worst):.3e} ({float(worst * 2**24):.3f} ulp)")
    print("  1.0, " + ", ".join(mp.nstr(c, 10) for c in coefs))


cut = mp.mpf("0.625")
small_points = chebyshev(0, cut, 900) + [cut * i / 900 for i in range(1, 900)]
show("small", lawson(small_points, lambda a: mp.tanh(a) / a, lambda a: a * a, 5, 20))
half_ln2 = mp.log(2) / 2
show("exp", lawson(chebyshev(-half_ln2, half_ln2, 800), mp.exp, lambda r: r, 6, 40))
