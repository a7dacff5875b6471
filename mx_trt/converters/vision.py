"""Converters for vision operators (box coding, ROI pooling, resizing, anchors, NMS-like post-processing)."""
from __future__ import annotations

from . import pooling  # noqa: F401  (registers Pooling, adaptive pooling and the resizes)
