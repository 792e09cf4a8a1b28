"""Exact Poisson and chi-square tails without SciPy (not a dependency of trainguard).

Everything rests on the regularized incomplete gamma functions ``P(a, x)`` and
``Q(a, x) = 1 - P(a, x)``, computed the classic way: the power series of ``P`` when
``x < a + 1`` and the (modified Lentz) continued fraction of ``Q`` otherwise, each to double
precision, so that small tails are not lost to ``1 - P``. From them:

- Poisson upper tail ``Pr(X >= k | mu) = P(k, mu)`` for ``k >= 1`` (1 for ``k = 0``);
- chi-square survival ``Pr(chi2_df > x) = Q(df / 2, x / 2)``;
- the gamma quantile (the ``x`` with ``P(a, x) = p``) by bisection, to a relative 1e-12;
- the Garwood exact interval for a Poisson count ``k``: ``[G(alpha/2; k), G(1 - alpha/2; k + 1)]``
  with ``G(p; a)`` the gamma(a, 1) quantile (0 as lower bound when ``k = 0``);
- the expected sum of the ``k`` largest of ``n`` independent Poisson(mu) counts, exactly:
  ``E[X_(1) + ... + X_(k)] = sum_{x >= 1} E[min(B_x, k)]`` with ``B_x ~ Binomial(n, Pr(X >= x))``
  the number of counts at or above ``x`` (each of the top ``k`` contributes one for every level
  ``x`` it reaches).

    >>> round(garwood_interval(0)[1], 3)
    3.689
"""

from __future__ import annotations

import math

from trainguard.errors import FleetError

_EPS = 1e-16
_MAX_ITER = 10_000


def _series_p(a: float, x: float) -> float:
    term = total = 1.0 / a
    ap = a
    for _ in range(_MAX_ITER):
        ap += 1.0
        term *= x / ap
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _fraction_q(a: float, x: float) -> float:
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, _MAX_ITER):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return h * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _check(a: float, x: float) -> None:
    if not a > 0 or not x >= 0 or not math.isfinite(a) or math.isnan(x):
        raise FleetError(f"incomplete gamma needs a > 0 and x >= 0, got a={a}, x={x}")


def gamma_p(a: float, x: float) -> float:
    """Regularized lower incomplete gamma ``P(a, x)``."""
    _check(a, x)
    if x == 0:
        return 0.0
    if math.isinf(x):
        return 1.0
    return _series_p(a, x) if x < a + 1.0 else 1.0 - _fraction_q(a, x)


def gamma_q(a: float, x: float) -> float:
    """Regularized upper incomplete gamma ``Q(a, x) = 1 - P(a, x)``, accurate in the tail."""
    _check(a, x)
    if x == 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    return 1.0 - _series_p(a, x) if x < a + 1.0 else _fraction_q(a, x)


def gamma_quantile(p: float, a: float) -> float:
    """The ``x`` with ``P(a, x) = p`` (the gamma(shape a, scale 1) quantile), by bisection."""
    if not 0.0 < p < 1.0:
        raise FleetError(f"a quantile needs 0 < p < 1, got {p}")
    lo, hi = 0.0, max(1.0, a)
    while gamma_p(a, hi) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(400):
        mid = 0.5 * (lo + hi)
        if gamma_p(a, mid) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


def poisson_sf_at_least(k: int, mu: float) -> float:
    """``Pr(X >= k)`` for ``X ~ Poisson(mu)``."""
    if k < 0 or not mu >= 0:
        raise FleetError(f"Poisson tail needs k >= 0 and mu >= 0, got k={k}, mu={mu}")
    if k == 0:
        return 1.0
    if mu == 0:
        return 0.0
    return gamma_p(float(k), mu)


def chi2_sf(x: float, df: int) -> float:
    """``Pr(chi2_df > x)``."""
    if df < 1:
        raise FleetError(f"chi-square needs df >= 1, got {df}")
    return gamma_q(df / 2.0, max(x, 0.0) / 2.0)


def garwood_interval(k: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Garwood) two-sided interval for the mean of a Poisson count ``k``."""
    if k < 0:
        raise FleetError(f"a count cannot be negative, got {k}")
    if not 0.0 < confidence < 1.0:
        raise FleetError(f"confidence must be between 0 and 1, got {confidence}")
    alpha = 1.0 - confidence
    low = 0.0 if k == 0 else gamma_quantile(alpha / 2.0, float(k))
    return low, gamma_quantile(1.0 - alpha / 2.0, float(k + 1))


def poisson_pmf(k: int, mu: float) -> float:
    """``Pr(X = k)`` for ``X ~ Poisson(mu)``."""
    if k < 0 or not mu >= 0 or not math.isfinite(mu):
        raise FleetError(f"Poisson probability needs k >= 0 and mu >= 0, got k={k}, mu={mu}")
    if mu == 0:
        return 1.0 if k == 0 else 0.0
    return math.exp(k * math.log(mu) - mu - math.lgamma(k + 1.0))


def _expected_min(n: int, q: float, k: int) -> float:
    """``E[min(B, k)]`` for ``B ~ Binomial(n, q)``: ``sum_{j < k} Pr(B > j)``."""
    if k >= n:
        return n * q
    below = 0.0  # sum_{j < k} (k - j) Pr(B = j)
    for j in range(k):
        below += (k - j) * math.comb(n, j) * q**j * (1.0 - q) ** (n - j)
    return max(0.0, k - below)


def poisson_top_k_mean(n: int, mu: float, k: int) -> float:
    """Expected sum of the ``k`` largest of ``n`` independent Poisson(``mu``) counts (module
    docstring); ``n x mu`` when ``k >= n``."""
    if n < 1 or k < 1 or not mu >= 0 or not math.isfinite(mu):
        raise FleetError(f"top-k mean needs n >= 1, k >= 1 and mu >= 0, got n={n}, k={k}, "
                         f"mu={mu}")
    if k >= n or mu == 0:
        return n * mu
    total, x = 0.0, 1
    while True:
        term = _expected_min(n, poisson_sf_at_least(x, mu), k)
        total += term
        if x > mu and term <= total * 1e-16:
            return total
        x += 1


__all__ = [
    "chi2_sf",
    "gamma_p",
    "gamma_q",
    "gamma_quantile",
    "garwood_interval",
    "poisson_pmf",
    "poisson_sf_at_least",
    "poisson_top_k_mean",
]
