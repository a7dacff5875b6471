"""Range collectors on known distributions: minmax exact, percentile at the right quantile, entropy sane."""
from __future__ import annotations

import numpy as np
import pytest

from mx_trt.errors import CalibrationError
from mx_trt.quantize.collectors import DEFAULT_BINS, HistogramCollector, MinMaxCollector, collector_range, make_collector


def test_minmax_is_exact_over_batches():
    rng = np.random.RandomState(0)
    batches = [rng.normal(size=(4, 7)).astype(np.float32) for _ in range(5)]
    c = MinMaxCollector()
    for b in batches:
        c.update(b)
    allv = np.concatenate([b.ravel() for b in batches])
    r = c.result()
    assert (r.min, r.max) == (float(allv.min()), float(allv.max()))
    assert r.amax == max(-r.min, r.max)


def test_minmax_refuses_nan():
    with pytest.raises(CalibrationError, match="NaN"):
        MinMaxCollector().update(np.array([1.0, np.nan], np.float32))


def test_histogram_range_doubling_keeps_every_count():
    c = HistogramCollector()
    c.update(np.full(100, 0.5, np.float32))
    c.update(np.full(50, 3.7, np.float32))  # top 0.5 -> 4.0 (three doublings)
    c.update(np.zeros(10, np.float32))
    assert c.top == pytest.approx(4.0) and int(c.hist.sum()) == 150 and c.zeros == 10
    width = c.top / DEFAULT_BINS
    assert c.hist[int(0.5 / width) - 1: int(0.5 / width) + 1].sum() == 100  # 0.5 lands at a bin edge after merging


@pytest.mark.parametrize("pct", [90.0, 99.0, 99.99])
def test_percentile_of_a_uniform_distribution(pct):
    rng = np.random.RandomState(1)
    c = HistogramCollector()
    for _ in range(4):
        c.update(rng.uniform(-1, 1, 250_000).astype(np.float32))
    r = c.percentile(pct)
    # |x| is uniform on [0, 1]: the p-th percentile is p / 100, within one bin and sampling noise
    assert r.amax == pytest.approx(pct / 100, abs=2 / DEFAULT_BINS + 2e-3)


def test_percentile_ignores_rare_outliers():
    rng = np.random.RandomState(2)
    x = rng.normal(size=1_000_000).astype(np.float32)
    x[:10] = 100.0
    c = HistogramCollector()
    c.update(x)
    assert 3.0 < c.percentile(99.99).amax < 4.5  # the normal's 99.99th percentile of |x| is 3.89
    assert c.result().amax == 100.0


def test_entropy_is_sane_on_known_distributions():
    rng = np.random.RandomState(3)
    gauss = rng.normal(size=400_000).astype(np.float32)
    relu = np.maximum(gauss, 0)
    uniform = rng.uniform(-1, 1, 400_000).astype(np.float32)
    amax = {}
    for name, x in (("gauss", gauss), ("relu", relu), ("uniform", uniform)):
        c = HistogramCollector()
        c.update(x)
        amax[name] = c.entropy().amax
        assert amax[name] <= np.abs(x).max()
    # a bell curve is clipped in its tail (2.5 to 4.5 sigma), a ReLU's spike at zero does not
    # pull the threshold down, and a flat distribution is not clipped at all
    assert 2.5 < amax["gauss"] < 4.5 and 2.5 < amax["relu"] < 4.5
    assert amax["uniform"] > 0.97


def test_all_zero_tensor():
    c = HistogramCollector()
    c.update(np.zeros(100, np.float32))
    for method in ("entropy", "percentile"):
        r = collector_range(c, method, 99.9)
        assert (r.min, r.max, r.amax) == (0.0, 0.0, 0.0)


def test_make_collector():
    assert type(make_collector("minmax")) is MinMaxCollector
    assert type(make_collector("entropy")) is HistogramCollector
    with pytest.raises(CalibrationError, match="not one of"):
        make_collector("kl")
