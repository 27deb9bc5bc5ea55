#!/usr/bin/env python3
"""Fits the erfc of the CUDA kernels' erf gelu (kf_gelu_erf in core/templates/gemm.cpp) and
checks it in simulated float arithmetic. Prints the constants the template uses. Checks the
tanh gelu of the same kernels (kf_gelu_tanh, and kf_gelu_tanh2, two at once) the same way.

gelu(x) = x Phi(x) = max(x, 0) - |x| h(|x|), h(a) = erfc(a / sqrt 2) / 2, and
erfc(z) = t 2^(Q(t) - log2(e) z^2) with t = 1 / (1 + p z): Q(t) = log2(erfc(z) e^(z^2) / t) is
smooth on t in (0, 1], so a polynomial of low degree fits it. For each p the fit minimizes the
largest error of Q (which is the relative error of erfc, over ln 2) on z in [0, 11.5] by
Lawson's iteration (iteratively reweighted least squares) on Chebyshev nodes in t; p is then
chosen on a grid. The check evaluates the kernel's sequence of float operations (fused
multiply-adds rounded once; rcp and ex2 correctly rounded, where the GPU's approx forms are
within an ulp or two) against x Phi(x) in double, and the erff formula the reference uses.

Usage: /usr/bin/python3 bench/gelu_fit.py [--degree 6]   (numpy only)
"""
import argparse
import math

import numpy as np

F = np.float32
LOG2E_HALF = 0.72134752044448170  # log2(e) / 2: 2^(-LOG2E_HALF a^2) = e^(-a^2 / 2)
CLAMP = 16.0  # |x| beyond which the ex2 is 0 in float


def fit(p, degree, zmax=11.5, iters=300):
    t = 0.5 - 0.5 * np.cos(np.pi * np.linspace(0, 1, 12000))
    t = t[(t >= 1 / (1 + p * zmax)) & (t <= 1.0)]
    z = (1 / t - 1) / p
    q = np.array([math.log2(math.erfc(v) * math.exp(v * v)) for v in z]) - np.log2(t)
    v = np.vander(t, degree + 1, increasing=True)
    w = np.ones_like(t) / len(t)
    for _ in range(iters):
        c, *_ = np.linalg.lstsq(v * np.sqrt(w)[:, None], q * np.sqrt(w), rcond=None)
        e = np.abs(v @ c - q)
        w = np.maximum(w * e / (w * e).sum(), 1e-14)
    return float(np.abs(v @ c - q).max() * math.log(2)), c


def fma(a, b, c):
    return F(np.float64(a) * np.float64(b) + np.float64(c))


def kernel_gelu(x, p, c):
    """kf_gelu_erf's operations, in order, in float. c: Q's coefficients, constant term first,
    already less 1 (so that the ex2 gives erfc / 2)."""
    a = np.minimum(np.abs(x), F(CLAMP))
    t = F(1.0 / fma(a, F(p / math.sqrt(2)), F(1)).astype(np.float64))
    q = F(c[-1])
    for k in range(len(c) - 2, -1, -1):
        q = fma(q, t, F(c[k]))
    e = F(np.exp2(fma(a, F(a * F(-LOG2E_HALF)), q).astype(np.float64)))
    return fma(-a, F(t * e), np.maximum(x, F(0)))


def erff_gelu(x):
    erf = F(np.array([math.erf(v) for v in (x * F(0.7071067811865476)).astype(np.float64)]))
    return F(F(F(0.5) * x) * F(F(1) + erf))


# kf_gelu_tanh's constants: -2u log2(e) = x (C1 + C3 x^2), u = sqrt(2 / pi) (x + 0.044715 x^3).
TANH_C1 = -2 * math.sqrt(2 / math.pi) * math.log2(math.e)
TANH_C3 = 0.044715 * TANH_C1


def kernel_gelu_tanh(x):
    """kf_gelu_tanh's operations, in order, in float: x / (1 + 2^(x (C1 + C3 x^2))), ftz."""
    with np.errstate(over="ignore", invalid="ignore"):  # x = -inf: -inf * 0
        e = F(np.exp2(F(x * fma(F(x * x), F(TANH_C3), F(TANH_C1))).astype(np.float64)))
        d = F(e + F(1))
        r = F(1.0 / d.astype(np.float64))
        r[np.abs(r) < np.finfo(F).tiny] = 0  # rcp.approx.ftz flushes a subnormal result
        return F(x * r)


def ftz(v):
    v = F(v)
    v[np.abs(v) < np.finfo(F).tiny] = 0
    return v


def kernel_gelu_tanh2(x, y):
    """kf_gelu_tanh2's operations, in order, in float: one rcp for the pair (x, y)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # np.fmin, as fminf: a NaN t gives 127
        ex = F(np.exp2(np.fmin(F(x * fma(F(x * x), F(TANH_C3), F(TANH_C1))), F(127)).astype(np.float64)))
        ey = F(np.exp2(np.fmin(F(y * fma(F(y * y), F(TANH_C3), F(TANH_C1))), F(127)).astype(np.float64)))
        dx, dy = F(ex + F(1)), fma(ey, F(2.0 ** -126), F(2.0 ** -126))
        q = ftz(F(1.0 / F(dx * dy).astype(np.float64)))
        rx, ry = ftz(F(dy * q)), ftz(F(F(dx * q) * F(2.0 ** -126)))
        return F(x * rx), F(y * ry)


def tanhf_gelu(x):
    """The reference's 0.5 x (1 + tanhf(sqrt(2 / pi) (x + 0.044715 x^3))) in float."""
    u = F(F(0.7978845608028654) * fma(F(F(F(0.044715) * x) * x), x, x))
    return F(F(F(0.5) * x) * F(F(1) + F(np.tanh(u.astype(np.float64)))))


def report(name, x, y, exact, parts):
    rel = np.abs(y.astype(np.float64) - exact) / np.maximum(np.abs(exact), 1e-300)
    print(f"{name:30s}", "  ".join(f"{k}: {rel[m].max():.2g}" for k, m in parts.items()),
          f"  largest absolute error {np.abs(y - exact).max():.2g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--degree", type=int, default=6)
    args = ap.parse_args()
    best = min((fit(p, args.degree, iters=60)[0], p) for p in np.linspace(0.2, 1.2, 101))
    fits = [(*fit(p, args.degree), p) for p in np.linspace(best[1] - 0.01, best[1] + 0.01, 21)]
    err, c, p = min(fits, key=lambda f: f[0])
    c = list(c)
    c[0] -= 1
    print(f"degree {args.degree}: p = {p:.4f} (t = 1 / (1 + {p / math.sqrt(2):.9e} |x|)), largest relative error of the fit {err:.3g}")
    print("Q - 1, highest power first:", ", ".join(f"{v:.9e}f" for v in reversed(c)))
    x = np.concatenate([np.linspace(-16, 16, 400001), np.linspace(-1e-3, 1e-3, 2001)]).astype(F)
    x = x[x != 0]
    exact = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    tiny = np.abs(exact) > 1e-30
    parts = {"x > 0": x > 0, "[-5, 0)": (x < 0) & (x >= -5), "[-12, -5)": (x < -5) & (x >= -12) & tiny}
    for name, y in (("kf_gelu_erf", kernel_gelu(x, p, c)), ("0.5 x (1 + erff(x / sqrt 2))", erff_gelu(x))):
        report(name, x, y, exact, parts)
    print("kf_gelu_erf(inf, -inf, nan) =", kernel_gelu(np.array([np.inf, -np.inf, np.nan], F), p, c))
    # The tanh form (gelu with "approximate": "tanh"): no fit, only its constants and the check.
    # Its exact value falls under float's smallest normal (2^-126) at x = -10.4; below 2^-120 the
    # kernel may give 0.
    print(f"tanh form: C1 = {TANH_C1:.9e}f, C3 = {TANH_C3:.9e}f")
    xd = x.astype(np.float64)
    exact = xd / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))  # no cancellation
    normal = np.abs(exact) > 2.0 ** -120
    parts = {"x > 0": x > 0, "[-5, 0)": (x < 0) & (x >= -5), "[-10, -5)": (x < -5) & (x >= -10) & normal}
    for name, y in (("kf_gelu_tanh", kernel_gelu_tanh(x)), ("0.5 x (1 + tanhf(u))", tanhf_gelu(x))):
        report(name, x, y, exact, parts)
    print("kf_gelu_tanh(inf, -inf, nan) =", kernel_gelu_tanh(np.array([np.inf, -np.inf, np.nan], F)))
    # The pair form, x in either slot, its partners from every part of the range (x reversed, and
    # shifted by a third) and the most negative (-16); then inf, -inf and NaN beside 1 and -9.
    partners = (("reversed", x[::-1]), ("shifted", np.roll(x, len(x) // 3)), ("-16", np.full_like(x, -16)))
    for name, partner in partners:
        report(f"kf_gelu_tanh2 (x, {name})", x, kernel_gelu_tanh2(x, partner)[0], exact, parts)
        report(f"kf_gelu_tanh2 ({name}, x)", x, kernel_gelu_tanh2(partner, x)[1], exact, parts)
    specials = np.array([np.inf, -np.inf, np.nan], F)
    for v in (1, -9):
        other = np.full(3, v, F)
        print(f"kf_gelu_tanh2(inf, -inf, nan; {v}) =", kernel_gelu_tanh2(specials, other)[0], "and", kernel_gelu_tanh2(other, specials)[1],
              f"in the second slot; their partner {v} gives", kernel_gelu_tanh2(specials, other)[1], "and",
              kernel_gelu_tanh2(other, specials)[0], f"(alone {kernel_gelu_tanh(np.full(1, v, F))[0]:.9g})")


if __name__ == "__main__":
    main()
