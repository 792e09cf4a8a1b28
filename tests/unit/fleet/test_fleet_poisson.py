"""Incomplete gamma, Poisson / chi-square tails and the Garwood interval against closed forms,
published table values and (where installed) SciPy."""

from __future__ import annotations

import math

import pytest

from trainguard.errors import FleetError
from trainguard.fleet.poisson import (
    chi2_sf,
    gamma_p,
    gamma_q,
    gamma_quantile,
    garwood_interval,
    poisson_pmf,
    poisson_sf_at_least,
    poisson_top_k_mean,
)


@pytest.mark.parametrize(("k", "low", "high"), [
    # Exact 95 % Poisson limits as tabulated (e.g. Garwood 1936; Ulm 1990).
    (0, 0.0, 3.689),
    (1, 0.0253, 5.572),
    (5, 1.623, 11.668),
    (10, 4.795, 18.390),
    (20, 12.217, 30.888),
])
def test_garwood_matches_table(k: int, low: float, high: float) -> None:
    got_low, got_high = garwood_interval(k)
    assert got_low == pytest.approx(low, abs=6e-4)
    assert got_high == pytest.approx(high, abs=6e-4)


def test_garwood_zero_upper_is_minus_log_alpha_half() -> None:
    # P(1, x) = 1 - exp(-x): the upper limit for 0 events is -ln(0.025) exactly.
    assert garwood_interval(0)[1] == pytest.approx(-math.log(0.025), rel=1e-10)
    assert garwood_interval(0, confidence=0.9)[1] == pytest.approx(-math.log(0.05), rel=1e-10)


@pytest.mark.parametrize("x", [0.001, 0.3, 1.0, 2.5, 7.0, 40.0])
def test_incomplete_gamma_closed_forms(x: float) -> None:
    assert gamma_p(1.0, x) == pytest.approx(1 - math.exp(-x), rel=1e-12)
    assert gamma_q(0.5, x) == pytest.approx(math.erfc(math.sqrt(x)), rel=1e-10)
    assert gamma_p(3.0, x) + gamma_q(3.0, x) == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize(("k", "mu"), [(1, 0.5), (3, 0.2), (7, 1.2), (12, 3.0), (40, 35.5)])
def test_poisson_tail_equals_brute_force_sum(k: int, mu: float) -> None:
    below = math.fsum(math.exp(-mu) * mu**j / math.factorial(j) for j in range(k))
    assert poisson_sf_at_least(k, mu) == pytest.approx(1 - below, rel=1e-9)


def test_poisson_tail_edges() -> None:
    assert poisson_sf_at_least(0, 4.0) == 1.0
    assert poisson_sf_at_least(2, 0.0) == 0.0
    with pytest.raises(FleetError):
        poisson_sf_at_least(-1, 1.0)


@pytest.mark.parametrize("x", [0.5, 3.0, 30.0, 90.0])
def test_chi2_df2_is_exponential(x: float) -> None:
    assert chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-10)


def test_quantile_inverts_p() -> None:
    for a in (0.5, 1.0, 4.0, 63.0):
        for p in (0.001, 0.025, 0.5, 0.975):
            assert gamma_p(a, gamma_quantile(p, a)) == pytest.approx(p, rel=1e-9)


def test_against_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for a in (0.5, 2.0, 11.0, 120.0):
        for p in (0.025, 0.3, 0.975):
            assert gamma_quantile(p, a) == pytest.approx(float(stats.gamma.ppf(p, a)), rel=1e-9)
    for df in (1, 10, 62):
        for x in (0.5, 20.0, 150.0):
            assert chi2_sf(x, df) == pytest.approx(float(stats.chi2.sf(x, df)), rel=1e-9)


def test_bad_arguments_raise() -> None:
    with pytest.raises(FleetError):
        garwood_interval(-1)
    with pytest.raises(FleetError):
        garwood_interval(3, confidence=1.0)
    with pytest.raises(FleetError):
        gamma_quantile(0.0, 2.0)
    with pytest.raises(FleetError):
        gamma_p(0.0, 1.0)
    with pytest.raises(FleetError):
        chi2_sf(1.0, 0)


def test_poisson_pmf_closed_form() -> None:
    assert poisson_pmf(0, 2.0) == pytest.approx(math.exp(-2.0), rel=1e-14)
    assert poisson_pmf(3, 2.0) == pytest.approx(8 / 6 * math.exp(-2.0), rel=1e-14)
    assert (poisson_pmf(0, 0.0), poisson_pmf(2, 0.0)) == (1.0, 0.0)
    assert math.fsum(poisson_pmf(k, 7.5) for k in range(80)) == pytest.approx(1.0, rel=1e-13)
    with pytest.raises(FleetError):
        poisson_pmf(-1, 1.0)


def top_k_by_enumeration(n: int, mu: float, k: int, cut: int = 30) -> float:
    """E[sum of the k largest] over every outcome of n counts in 0..cut-1 (the rest is below
    double precision for the means used here)."""
    import itertools

    pmf = [math.exp(x * math.log(mu) - mu - math.lgamma(x + 1)) for x in range(cut)]
    total = 0.0
    for xs in itertools.product(range(cut), repeat=n):
        p = math.prod(pmf[x] for x in xs)
        total += p * sum(sorted(xs, reverse=True)[:k])
    return total


@pytest.mark.parametrize(("n", "mu", "k"), [(2, 1.0, 1), (3, 0.4, 1), (3, 2.5, 2), (4, 1.0, 3)])
def test_poisson_top_k_mean_matches_enumeration(n: int, mu: float, k: int) -> None:
    cut = 30 if n <= 3 else 18
    assert poisson_top_k_mean(n, mu, k) == pytest.approx(top_k_by_enumeration(n, mu, k, cut),
                                                         rel=1e-10)


def test_poisson_top_k_mean_edges() -> None:
    # The expected maximum of two Poisson(1): 1 + sum_x Pr(X >= x)^2 ... checked by its pieces:
    # E[max] = sum_{x >= 1} (1 - Pr(X < x)^2).
    cdf = 0.0
    expected = 0.0
    for x in range(1, 60):
        cdf += math.exp(-1.0) / math.factorial(x - 1)
        expected += 1.0 - cdf**2
    assert poisson_top_k_mean(2, 1.0, 1) == pytest.approx(expected, rel=1e-12)
    assert poisson_top_k_mean(5, 3.0, 5) == 15.0  # all nodes: the whole expected total
    assert poisson_top_k_mean(5, 3.0, 9) == 15.0
    assert poisson_top_k_mean(5, 0.0, 2) == 0.0
    assert poisson_top_k_mean(1, 4.0, 1) == 4.0
    with pytest.raises(FleetError):
        poisson_top_k_mean(0, 1.0, 1)
    with pytest.raises(FleetError):
        poisson_top_k_mean(3, 1.0, 0)
