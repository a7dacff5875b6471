"""The detection check of ``tests/models/compare.py`` on small candidate sets with known suppressions.

``suppression_problems`` must accept MXNet's own ``box_nms`` output and any other
greedy order of tied scores, and reject wrong scores, boxes, thresholds and
orders; otherwise the detector tests could pass a wrong engine.
"""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

from tests.models.compare import Suppression, detection_problems, suppression_problems


def _supp(rows, overlap=0.45, per_class=True):
    rows = np.asarray(rows, np.float64)
    return Suppression(rows=rows.reshape(rows.shape[0], -1, rows.shape[-1]), id_index=0, score_index=1,
                       coord_start=2, overlap=overlap, valid_thresh=0.01, background_id=-1, per_class=per_class,
                       center_in=False, center_out=False)


def _dets(rows, n=None):
    """``(ids, scores, boxes)`` of detection rows ``[id, score, x1, y1, x2, y2]`` padded with -1 to ``n``."""
    rows = np.asarray(rows, np.float32).reshape(-1, 6)
    n = n or len(rows)
    out = -np.ones((1, n, 6), np.float32)
    out[0, :len(rows)] = rows
    return out[..., 0:1], out[..., 1:2], out[..., 2:6]


def _mx_nms(rows, overlap=0.45):
    out = mx.nd.contrib.box_nms(mx.nd.array(np.asarray(rows, np.float32)[None]), overlap_thresh=overlap,
                                valid_thresh=0.01, topk=-1, id_index=0, score_index=1, coord_start=2,
                                force_suppress=False).asnumpy()[0]
    return [r for r in out if r[0] >= 0]


def _row(cls, score, x, y=0.0, size=10.0):
    return [cls, score, x, y, x + size, y + size]


#: Three boxes of class 0 in a row, 3 px apart (IoU of neighbours 0.54, of the two ends 0.25):
#: the middle one suppresses both ends, an end one only the middle one.
CHAIN = [_row(0, 0.9, 0), _row(0, 0.9, 3), _row(0, 0.9, 6), _row(1, 0.5, 0), _row(0, 0.3, 40)]


def test_mxnet_box_nms_output_is_valid():
    rng = np.random.RandomState(0)
    rows = [_row(int(rng.randint(3)), float(rng.uniform(0.02, 1)), float(rng.uniform(0, 60)),
                 float(rng.uniform(0, 60)), float(rng.uniform(5, 30))) for _ in range(200)]
    kept = _mx_nms(rows)
    assert 10 < len(kept) < 200
    assert suppression_problems(_dets(kept, 200), _supp([rows])) == []


def test_another_order_of_tied_scores_is_valid():
    # Ties of the middle box first (MXNet keeps the first of equal scores: the left end) ...
    supp = _supp([CHAIN[1:2] + CHAIN[:1] + CHAIN[2:]])
    middle_first = [CHAIN[1], CHAIN[3], CHAIN[4]]
    ends_first = [CHAIN[0], CHAIN[2], CHAIN[3], CHAIN[4]]
    assert suppression_problems(_dets(middle_first, 5), supp) == []
    assert suppression_problems(_dets(ends_first, 5), supp) == []
    # ... and a count within 5% is then required as well: 3 against 4 is not.
    assert detection_problems(_dets(ends_first, 5), _dets(middle_first, 5), supp) == ["3 detections against native's 4"]


def test_a_detection_not_among_candidates():
    supp = _supp([CHAIN])
    shifted = [list(CHAIN[1]), CHAIN[3], CHAIN[4]]
    shifted[0][1] += 0.01
    assert any("not candidates" in p for p in suppression_problems(_dets(shifted, 5), supp))
    moved = [list(CHAIN[1]), CHAIN[3], CHAIN[4]]
    moved[0][2] += 1.0
    assert any("not candidates" in p for p in suppression_problems(_dets(moved, 5), supp))


def test_two_overlapping_detections_kept():
    supp = _supp([CHAIN])
    assert any("overlap by more than" in p for p in suppression_problems(_dets([CHAIN[0], CHAIN[1]] + CHAIN[3:], 5), supp))
    # Other classes do not suppress each other, unless the suppression ignores classes.
    other = [CHAIN[1], _row(1, 0.8, 3)]
    assert suppression_problems(_dets(other, 4), _supp([other])) == []
    assert suppression_problems(_dets(other, 4), _supp([other], per_class=False)) != []


def test_a_higher_candidate_neither_kept_nor_suppressed():
    supp = _supp([CHAIN])
    # The class-1 box dropped: it scores above the lowest detection and nothing overlaps it.
    assert any("neither kept" in p for p in suppression_problems(_dets([CHAIN[1], CHAIN[4]], 5), supp))


def test_wrong_threshold_or_order_is_caught():
    rng = np.random.RandomState(1)
    rows = [_row(0, float(rng.uniform(0.02, 1)), float(rng.uniform(0, 40)), float(rng.uniform(0, 40)), 12.0)
            for _ in range(100)]
    supp = _supp([rows])
    for overlap in (0.3, 0.6):  # suppresses too much, too little
        assert suppression_problems(_dets(_mx_nms(rows, overlap), 100), supp) != [], overlap
    ascending = sorted(rows, key=lambda r: r[1])
    kept = []
    for r in ascending:  # greedy from the lowest score up
        if all(_iou1(r, k) <= 0.45 for k in kept):
            kept.append(r)
    assert suppression_problems(_dets(kept, 100), supp) != []


def _iou1(a, b):
    w = max(0.0, min(a[4], b[4]) - max(a[2], b[2]))
    h = max(0.0, min(a[5], b[5]) - max(a[3], b[3]))
    inter = w * h
    return inter / ((a[4] - a[2]) * (a[5] - a[3]) + (b[4] - b[2]) * (b[5] - b[3]) - inter)


def test_rows_per_class_joined_after_the_suppression():
    # Faster R-CNN: one suppression row per class, (classes, N, 6), outputs reshaped to (1, classes * N).
    per_class = [[_row(0, 0.9, 0), _row(0, 0.8, 2), _row(0, 0.7, 30)], [_row(1, 0.6, 0), _row(1, 0.5, 30), _row(1, 0.4, 60)]]
    supp = _supp(per_class)
    kept = np.concatenate([np.asarray(_mx_nms(r) + [[-1] * 6] * (3 - len(_mx_nms(r))), np.float32) for r in per_class])
    ids, scores, boxes = kept[None, :, 0:1], kept[None, :, 1:2], kept[None, :, 2:6]
    assert suppression_problems((ids, scores, boxes), supp) == []
    scores = scores.copy()
    scores[0, 3, 0] = 0.2  # class 1's first detection with another score
    assert any(p.startswith("batch 1") for p in suppression_problems((ids, scores, boxes), supp))


@pytest.mark.parametrize("n_got", [0, 1])
def test_native_detections_must_exist(n_got):
    rows = [CHAIN[4]]
    supp = _supp([rows])
    none = _dets([], 2)
    got = _dets(rows[:n_got], 2)
    assert any("detections against native's 0" in p for p in detection_problems(none, got, supp))
