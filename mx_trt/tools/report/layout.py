"""Where the drawing's boxes go: a layered layout with routed long edges."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from mx_trt.tools.report.units import Unit

_CHAR_W = 6.4  # average glyph width at 11 px (sans-serif)
LINE_H = 14.0
_PAD_X = 10.0
PAD_Y = 7.0
_GAP_X = 22.0
_GAP_Y = 34.0
_DUMMY_W = 6.0
#: Most bend points routed for long edges; past it the longest edges are drawn straight.
_MAX_DUMMIES = 50_000


def text_width(text: str, bold: bool = False) -> float:
    """Approximate rendered width of ``text`` at 11 px in a sans-serif font."""
    w = 0.0
    for ch in text:
        if ch in "il.,:;|!'()[] ":
            w += 3.4
        elif ch.isupper() or ch in "mwMW_%@":
            w += 8.0
        else:
            w += _CHAR_W
    return w * (1.08 if bold else 1.0)


@dataclass
class Layout:
    """Box positions plus the route of every edge.

    Attributes:
        width / height: Extent of the drawing.
        routes: Per edge ``(a, b)``, the points it passes through
            (``x, y_top, y_bottom`` of each bend), in order.
    """

    width: float
    height: float
    routes: Dict[Tuple[int, int], List[Tuple[float, float, float]]]


def layout(units: List[Unit], edges: List[Tuple[int, int]]) -> Layout:
    """A layered (Sugiyama-style) layout.

    1. Layer = longest path from a source (units come in topological order).
    2. Edges spanning several layers get one small bend point per crossed
       layer, so they run in their own lane instead of behind boxes.
    3. Order within layers: barycentre sweeps, down, up, down.
    4. Coordinates: each box goes under the mean of its parents, overlaps
       resolved by a left and a right packing pass, averaged.

    Complexity: O((U + B) log U) per sweep, B = bend points (capped by
    :data:`_MAX_DUMMIES`).
    """
    n_units = len(units)
    preds0: List[List[int]] = [[] for _ in units]
    for a, b in edges:
        preds0[b].append(a)
    for i, u in enumerate(units):
        u.layer = 1 + max((units[p].layer for p in preds0[i]), default=-1)
        u.width = max(90.0, max(text_width(t, k == 0) for k, t in enumerate(u.lines)) + 2 * _PAD_X)
        u.height = len(u.lines) * LINE_H + 2 * PAD_Y

    # Augmented graph: units, then bend points.
    layer_of = [u.layer for u in units]
    width_of = [u.width for u in units]
    preds: List[List[int]] = [[] for _ in units]
    succs: List[List[int]] = [[] for _ in units]
    chains: Dict[Tuple[int, int], List[int]] = {}
    budget = _MAX_DUMMIES
    for a, b in sorted(edges, key=lambda e: (layer_of[e[1]] - layer_of[e[0]], e)):
        span = layer_of[b] - layer_of[a]
        chain = [a]
        if 1 < span <= budget + 1:
            budget -= span - 1
            for lvl in range(layer_of[a] + 1, layer_of[b]):
                d = len(layer_of)
                layer_of.append(lvl)
                width_of.append(_DUMMY_W)
                preds.append([])
                succs.append([])
                chain.append(d)
        chain.append(b)
        for src, dst in zip(chain, chain[1:]):
            preds[dst].append(src)
            succs[src].append(dst)
        chains[(a, b)] = chain
    total = len(layer_of)
    n_layers = max(layer_of, default=-1) + 1
    layers: List[List[int]] = [[] for _ in range(n_layers)]
    for i in range(total):
        layers[layer_of[i]].append(i)

    pos = [0.0] * total
    for layer in layers:
        for k, i in enumerate(layer):
            pos[i] = float(k)

    def sweep(order: Sequence[int], nbrs: List[List[int]]) -> None:
        for li in order:
            layer = layers[li]
            keyed = []
            for i in layer:
                ps = nbrs[i]
                keyed.append((sum(pos[p] for p in ps) / len(ps) if ps else pos[i], pos[i], i))
            keyed.sort()
            layer[:] = [i for _, _, i in keyed]
            for k, i in enumerate(layer):
                pos[i] = float(k)

    down = range(n_layers)
    up = range(n_layers - 1, -1, -1)
    sweep(down, preds)
    sweep(up, succs)
    sweep(down, preds)

    # Coordinates (box centres).
    xc = [0.0] * total

    def place(layer: List[int], desired: List[float]) -> None:
        left: List[float] = []
        for k, i in enumerate(layer):
            lo = desired[k] - width_of[i] / 2
            if k:
                prev = layer[k - 1]
                lo = max(lo, left[-1] + width_of[prev] + _GAP_X)
            left.append(lo)
        right = [0.0] * len(layer)
        for k in range(len(layer) - 1, -1, -1):
            i = layer[k]
            hi = desired[k] - width_of[i] / 2
            if k < len(layer) - 1:
                hi = min(hi, right[k + 1] - _GAP_X - width_of[i])
            right[k] = hi
        for k, i in enumerate(layer):
            xc[i] = (left[k] + right[k]) / 2 + width_of[i] / 2

    def packed(layer: List[int]) -> List[float]:
        w = sum(width_of[i] for i in layer) + _GAP_X * max(0, len(layer) - 1)
        x = -w / 2
        out = []
        for i in layer:
            out.append(x + width_of[i] / 2)
            x += width_of[i] + _GAP_X
        return out

    for li, layer in enumerate(layers):
        base = packed(layer)
        desired = []
        for k, i in enumerate(layer):
            ps = preds[i]
            desired.append(sum(xc[p] for p in ps) / len(ps) if ps and li else base[k])
        place(layer, desired)
    # Sources (graph inputs) sit above the mean of what they feed.
    for li in range(n_layers - 1, -1, -1):
        layer = layers[li]
        if any(not preds[i] and succs[i] for i in layer):
            desired = [sum(xc[s] for s in succs[i]) / len(succs[i]) if not preds[i] and succs[i] else xc[i]
                       for i in layer]
            place(layer, desired)

    min_x = min((xc[i] - width_of[i] / 2 for i in range(total)), default=0.0)
    max_x = max((xc[i] + width_of[i] / 2 for i in range(total)), default=0.0)
    heights = [max((units[i].height for i in layer if i < n_units), default=0.0) for layer in layers]
    tops = []
    y = 0.0
    for h in heights:
        tops.append(y)
        y += h + _GAP_Y
    for i, u in enumerate(units):
        h = heights[u.layer]
        u.x = xc[i] - u.width / 2 - min_x
        u.y = tops[u.layer] + (h - u.height) / 2
    routes: Dict[Tuple[int, int], List[Tuple[float, float, float]]] = {}
    for key, chain in chains.items():
        routes[key] = [(xc[d] - min_x, tops[layer_of[d]], tops[layer_of[d]] + heights[layer_of[d]])
                       for d in chain[1:-1]]
    return Layout(max_x - min_x, max(0.0, y - _GAP_Y), routes)
