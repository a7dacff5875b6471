"""INT8 in one bind: the calibration table checked against the analysed graph, and what each subgraph quantizes.

Stages, in order::

    load_table        the settings' table (a path or a table): CalibrationError if missing or damaged
    check             its graph digest against the bind's graph (export.calibration)
    exclusions        operators kept in float by the settings (int8_exclude_ops / _nodes,
                      int8_keep_output_layer)
    Int8Export        ranges by tensor name + the backend's Q/DQ style, for the exporter
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from mx_trt.builder.backends import Backend
from mx_trt.errors import CalibrationError
from mx_trt.export.calibration import CalibrationTable, activation_inputs, int8_exclusions, load_table
from mx_trt.export.dynamic import Int8Export
from mx_trt.export.int8 import TENSORRT_STYLE
from mx_trt.passes.naming import entry_name
from mx_trt.pipeline.plan import Plan
from mx_trt.settings import Settings


@dataclass
class Int8Setup:
    """The int8 side of one bind.

    Attributes:
        table: The calibration table (checked against the bind's graph).
        export: What the exporter needs (:class:`~mx_trt.export.dynamic.Int8Export`).
        key: sha256 over the table's digest and the exclusions: part of each engine's cache key.
    """

    table: CalibrationTable
    export: Int8Export
    key: str


@dataclass
class SubgraphPrecision:
    """What an int8 bind would quantize in one subgraph (no export needed).

    Attributes:
        precision: ``int8`` when at least one operator is quantized, else the float precision.
        quantized: MXNet node names of the operators that would run in int8.
        kept_float: MXNet node name -> why a quantizable operator stays in float.
    """

    precision: str
    quantized: List[str] = field(default_factory=list)
    kept_float: Dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        if self.precision != "int8":
            return self.precision + (f" ({len(self.kept_float)} quantizable op(s) kept in float)" if self.kept_float else "")
        text = f"int8 ({len(self.quantized)} op(s) quantized"
        return text + (f", {len(self.kept_float)} kept in float)" if self.kept_float else ")")


def int8_setup(plan: Plan, settings: Settings, backend: Optional[Backend]) -> Optional[Int8Setup]:
    """The int8 setup of a bind, or ``None`` when the settings do not ask for int8.

    Raises:
        CalibrationError: no table, an unreadable or damaged one, or another graph's.
    """
    if not settings.int8:
        return None
    if settings.calibration is None:
        raise CalibrationError("int8 engines need a calibration table (MXNET_TENSORRT_CALIBRATION or the "
                               "calibration option); make one with mx_trt.calibrate")
    table = load_table(settings.calibration)
    ranges = table.ranges(plan.graph)
    inside = [n for s in plan.partition.subgraphs for n in s.nodes]
    excl = int8_exclusions(plan.graph, inside, settings.int8_exclude_ops, settings.int8_exclude_nodes,
                           settings.int8_keep_output_layer)
    exclude = {plan.graph.nodes[nid].name: why for nid, why in excl.items()}
    style = backend.int8_style if backend is not None else TENSORRT_STYLE
    key = hashlib.sha256(json.dumps([table.digest, sorted(exclude.items())]).encode()).hexdigest()
    return Int8Setup(table=table, export=Int8Export(ranges=ranges, style=style, exclude=exclude), key=key)


def subgraph_precisions(plan: Plan, settings: Settings) -> Dict[str, SubgraphPrecision]:
    """Per subgraph, the precision its engine is built in and, for int8, what is quantized.

    Reads the table (same errors as :func:`int8_setup`). An operator is counted as
    quantized when every activation input has a range in the table and no
    exclusion names it; the export decides finally (it also folds BatchNorm and
    looks through reshapes), so this is the plan the report shows.
    """
    out: Dict[str, SubgraphPrecision] = {}
    setup = int8_setup(plan, settings, None)
    g = plan.graph
    for sg in plan.partition.subgraphs:
        if setup is None:
            out[sg.name] = SubgraphPrecision(settings.precision)
            continue
        sp = SubgraphPrecision("fp32")
        for nid, acts in sorted(activation_inputs(g, sg.nodes, plan.weights).items()):
            name = g.nodes[nid].name
            missing = [entry_name(g, e) for e in acts if entry_name(g, e) not in setup.export.ranges]
            if name in setup.export.exclude:
                sp.kept_float[name] = setup.export.exclude[name]
            elif missing:
                sp.kept_float[name] = f"no calibrated range for {', '.join(missing)}"
            else:
                sp.quantized.append(name)
        if sp.quantized:
            sp.precision = "int8"
        out[sg.name] = sp
    return out
