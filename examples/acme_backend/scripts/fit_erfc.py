"""Derive the coefficients of acme's float32 erfc (kernels/math/vec_math_impl.h, `erfc_`).

    python scripts/fit_erfc.py

erfc is computed in two ranges:
  |x| < 0.5   erfc(x) = 1 - x P(x^2), P ~ erf(x) / x (degree 4 in x^2)
  |x| >= 0.5  erfc(a) = exp(-a^2) H(t), t = 1 / (1 + a), H ~ erfc(a) exp(a^2) (degree 10 in t)
and erfc(x) = 2 - erfc(-x) for x <= -0.5. H is smooth and bounded in t on (0, 2/3],
so one polynomial covers [0.5, 10.1], past which float32 erfc is 0.

Each fit minimizes the largest relative error (Lawson's iteration on weighted least
squares over Chebyshev nodes, reference values from mpmath), and rounds the
coefficients to float32 one at a time from the lowest degree, refitting the rest
after each, so the rounding of one is absorbed by the others. Prints the C++ arrays
and the relative error of each fit in double (the float32 evaluation adds up to ~4 ULP;
tests/test_kernel_accuracy.py measures the kernel itself).
"""

from __future__ import annotations

import mpmath
import numpy as np

mpmath.mp.dps = 30
LARGE_END = 10.1  # erfc(10.06) is below half the smallest float32 subnormal


def _minimax(basis: np.ndarray, target: np.ndarray, iters: int = 80) -> np.ndarray:
    """Coefficients minimizing max |basis @ c - target| / |target|, rounded to float32
    one at a time (lowest first), refitting the higher ones after each."""
    fixed: list[float] = []
    for k in range(basis.shape[1]):
        rest = target - (basis[:, :k] @ np.array(fixed) if fixed else 0.0)
        weights = np.ones(len(target))
        for _ in range(iters):
            w = weights / np.abs(target)
            coef, *_ = np.linalg.lstsq(basis[:, k:] * w[:, None], rest * w, rcond=None)
            err = np.abs((basis[:, k:] @ coef - rest) / target)
            weights = weights * np.sqrt(err / err.max()) + 1e-14
            weights /= weights.max()
        fixed.append(float(np.float32(coef[0])))
    return np.array(fixed)


def _chebyshev_nodes(lo: float, hi: float, n: int) -> np.ndarray:
    k = np.arange(n)
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)


def small_range(n: int = 2000, degree: int = 4) -> tuple[np.ndarray, float]:
    s = _chebyshev_nodes(0.0, 0.25, n)  # s = x^2, |x| < 0.5
    y = np.array([float(mpmath.erf(mpmath.sqrt(v)) / mpmath.sqrt(v)) for v in s])
    coef = _minimax(np.vander(s, degree + 1, increasing=True), y)
    return coef, float(np.abs(np.polyval(coef[::-1], s) / y - 1).max())


def large_range(n: int = 2500, degree: int = 10) -> tuple[np.ndarray, float]:
    t = _chebyshev_nodes(1 / (1 + LARGE_END), 1 / 1.5, n)
    a = 1 / t - 1
    y = np.array([float(mpmath.erfc(v) * mpmath.exp(mpmath.mpf(v) ** 2)) for v in a])
    coef = _minimax(np.vander(t, degree + 1, increasing=True), y)
    return coef, float(np.abs(np.polyval(coef[::-1], t) / y - 1).max())


def _cpp(name: str, coef: np.ndarray) -> str:
    return f"constexpr float {name}[] = {{" + ", ".join(f"{c!r}f" for c in coef.tolist()) + "};"


def main() -> None:
    small, e_small = small_range()
    large, e_large = large_range()
    print(f"// |x| < 0.5, relative error {e_small:.1e}")
    print(_cpp("kErfOverX", small))
    print(f"// |x| >= 0.5, relative error {e_large:.1e}")
    print(_cpp("kErfcScaled", large))


if __name__ == "__main__":
    main()
