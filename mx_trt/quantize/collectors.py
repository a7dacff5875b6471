"""Range collectors of INT8 calibration: minmax, percentile and entropy (KL divergence).

Each collector sees the values of one tensor batch after batch (:meth:`update`)
and gives a :class:`~mx_trt.export.calibration.TensorRange` at the end
(:meth:`result`). The histogram collectors count ``|x|`` in
:data:`DEFAULT_BINS` equal bins over ``[0, top]``; when a batch exceeds ``top``,
``top`` doubles and neighbouring bins merge, so no pass over the data is
repeated and memory stays constant.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from mx_trt.errors import CalibrationError
from mx_trt.export.calibration import METHODS, TensorRange

DEFAULT_BINS = 2048
#: Quantized levels on one side of zero (int8: 127 steps plus zero).
LEVELS = 128


class MinMaxCollector:
    """The extremes seen; ``amax = max(|min|, |max|)`` (no clipping). O(n) per update."""

    def __init__(self) -> None:
        self.lo = math.inf
        self.hi = -math.inf

    def update(self, x: np.ndarray) -> None:
        if x.size == 0:
            return
        lo, hi = float(np.min(x)), float(np.max(x))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise CalibrationError("a calibrated tensor holds NaN or infinity: the model or the data is broken")
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)

    def seen(self) -> bool:
        return self.lo <= self.hi

    def result(self) -> TensorRange:
        if not self.seen():
            return TensorRange(0.0, 0.0, 0.0)
        return TensorRange(self.lo, self.hi, max(abs(self.lo), abs(self.hi)))


class HistogramCollector(MinMaxCollector):
    """A histogram of the nonzero ``|x|`` with a range that doubles as needed, for percentile and entropy.

    O(n) per update plus O(bins) per doubling.
    """

    def __init__(self, bins: int = DEFAULT_BINS) -> None:
        super().__init__()
        if bins < 2 * LEVELS:
            raise ValueError(f"bins must be at least {2 * LEVELS}")
        self.bins = bins
        self.hist = np.zeros(bins, np.int64)
        self.top = 0.0
        #: Exact zeros are counted apart: int8 holds them exactly, and a ReLU's spike at
        #: zero would otherwise pull the entropy threshold down.
        self.zeros = 0

    def update(self, x: np.ndarray) -> None:
        super().update(x)
        a = np.abs(np.asarray(x, np.float32)).reshape(-1)
        nonzero = a[a != 0]
        self.zeros += a.size - nonzero.size
        a = nonzero
        if a.size == 0:
            return
        m = float(a.max())
        if self.top == 0.0:
            self.top = m if m > 0 else 0.0
        while m > self.top > 0:
            half = self.hist.reshape(-1, 2).sum(axis=1)
            self.hist = np.concatenate([half, np.zeros(self.bins - half.size, np.int64)])
            self.top *= 2
        idx = np.minimum((a * (self.bins / self.top)).astype(np.int64), self.bins - 1)
        self.hist += np.bincount(idx, minlength=self.bins)

    def _range(self, amax: float) -> TensorRange:
        r = super().result()
        return TensorRange(r.min, r.max, min(amax, r.amax))

    def percentile(self, pct: float) -> TensorRange:
        """``amax`` at the upper edge of the bin where ``pct`` percent of ``|x|`` lies below."""
        total = int(self.hist.sum()) + self.zeros
        if total == self.zeros or self.top == 0.0:
            return super().result()
        cdf = np.cumsum(self.hist) + self.zeros
        k = min(int(np.searchsorted(cdf, total * pct / 100.0)), self.bins - 1)
        return self._range((k + 1) * self.top / self.bins)

    def entropy(self, stride: Optional[int] = None) -> TensorRange:
        """TensorRT-style calibration: the threshold whose 128-level quantization of the clipped
        histogram loses the least information (KL divergence to the unquantized one).

        Candidates are every ``stride``-th bin from 128 to ``bins`` (default: about 240
        candidates). O(candidates x bins).
        """
        if int(self.hist.sum()) == 0 or self.top == 0.0:
            return super().result()
        stride = stride or max(1, (self.bins - LEVELS) // 240)
        hist = self.hist.astype(np.float64)
        last = int(np.nonzero(hist)[0].max()) + 1
        best_i, best_kl = self.bins, math.inf
        for i in range(LEVELS, self.bins + 1, stride):
            kl = _kl_for_threshold(hist, i)
            if kl < best_kl:
                best_kl, best_i = kl, i
            if i >= last + stride:
                break  # every count is inside the range: larger thresholds only lose resolution
        return self._range(best_i * self.top / self.bins)


def _kl_for_threshold(hist: np.ndarray, i: int) -> float:
    """KL(P || Q): P the first ``i`` bins with the outliers added to the last, Q its 128-level quantization."""
    p = hist[:i].copy()
    p[i - 1] += hist[i:].sum()
    nonzero = hist[:i] != 0
    group = np.arange(i) * LEVELS // i
    sums = np.bincount(group, weights=hist[:i], minlength=LEVELS)
    counts = np.bincount(group, weights=nonzero.astype(np.float64), minlength=LEVELS)
    q = np.where(nonzero, sums[group] / np.maximum(counts[group], 1.0), 0.0)
    ps, qs = _smooth(p), _smooth(q)
    if ps is None or qs is None:
        return math.inf
    return float(np.sum(ps * np.log(ps / qs)))


def _smooth(d: np.ndarray, eps: float = 1e-4) -> Optional[np.ndarray]:
    """``d`` normalized, with a little mass moved to its zero bins so that KL stays finite."""
    total = d.sum()
    if total <= 0:
        return None
    d = d / total
    zero = d == 0
    nz = int((~zero).sum())
    if nz == 0:
        return None
    # A bin smaller than the mass moved would turn negative: keep every bin positive.
    return np.maximum(d + eps * zero - eps * int(zero.sum()) / nz * (~zero), 1e-12)


def make_collector(method: str) -> MinMaxCollector:
    """A collector for ``method`` (one of :data:`~mx_trt.export.calibration.METHODS`)."""
    if method not in METHODS:
        raise CalibrationError(f"calibration method {method!r} is not one of {', '.join(METHODS)}")
    return MinMaxCollector() if method == "minmax" else HistogramCollector()


def collector_range(c: MinMaxCollector, method: str, percentile: float) -> TensorRange:
    """The range ``method`` chooses from what ``c`` collected."""
    if isinstance(c, HistogramCollector):
        return c.entropy() if method == "entropy" else c.percentile(percentile)
    return c.result()
