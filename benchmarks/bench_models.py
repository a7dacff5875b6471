"""GluonCV and GluonNLP models at their real input sizes: partition, and native against accelerated.

For each model, in one process, with seeded random weights: the partition
(operators in engines, number of engines, operators left native and why) and
the median forward latency of

* ``native``: MXNet alone (what "never make an engine" gives), its default threads;
* ``native, equal threads``: MXNet with ``OMP_NUM_THREADS`` set to the engines'
  thread count, in a worker process (``mx_trt.tools.native_process``) timed in
  the same rounds (models with custom operators of this process cannot run there);
* ``measured, equal threads``: the pass with the shipped rule in a second worker
  process with that ``OMP_NUM_THREADS``: its native operators and the MXNet
  timings its rule compares with run at that thread count;
* ``measured``: the pass with the shipped rule (each engine timed against MXNet
  running its subgraph at bind, kept when faster; a fresh plan cache);
* ``cost``: the pass with the cost estimate (``passes/cost.py``: a subgraph
  becomes an engine when its estimated saving beats an engine's run cost);
* ``always``: the pass making an engine of every subgraph, one operator or more
  (``MXNET_TENSORRT_ENGINE_RULE=always``, ``MXNET_TENSORRT_MIN_SUBGRAPH_SIZE=1``).

The executors are bound first, each run untimed once, and an accelerated one
more until its run-time check has probed every side once (its twin's bind and
first forward are one-time costs, as native MXNet's first forward is; the row's
``check_warmup`` holds what they took). Then they are timed in rounds that rotate
their order, so that load on the machine, and MXNet's OpenMP threads still
spinning after a native forward, fall on all of them alike. Each takes one
sample a round: the mean of as many forwards as span :data:`SAMPLE_MS` of
native MXNet's forward time (one for slow models). With ``busy``, the
same executors are timed again while a helper process keeps one core busy
(``benchmarks/busy.py``), as a machine that gets busy after the bind. Other
batch sizes than 1 (``batches``) scale dimension 0 of every input; a model that
MXNet itself cannot bind at that batch (a batch of 1 built into the graph) is
reported and skipped.
"""
from __future__ import annotations

import gc
import logging
import math
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

logger = logging.getLogger("benchmarks.models")

#: name -> (builder, input description). Real sizes, batch 1.
def _builders() -> Dict[str, Tuple[Callable[[], Any], str]]:
    from tests.models.thirdparty import bert_model, gluoncv_model

    return {
        "ssd_512_resnet50_v1_voc": (lambda: gluoncv_model("ssd_512_resnet50_v1_voc", "detection", (512, 512)), "1x3x512x512"),
        "ssd_512_mobilenet1.0_voc": (lambda: gluoncv_model("ssd_512_mobilenet1.0_voc", "detection", (512, 512)), "1x3x512x512"),
        "yolo3_darknet53_voc": (lambda: gluoncv_model("yolo3_darknet53_voc", "detection", (416, 416)), "1x3x416x416"),
        "yolo3_mobilenet1.0_voc": (lambda: gluoncv_model("yolo3_mobilenet1.0_voc", "detection", (416, 416)), "1x3x416x416"),
        "faster_rcnn_resnet50_v1b_voc": (lambda: gluoncv_model("faster_rcnn_resnet50_v1b_voc", "detection", (480, 640)),
                                         "1x3x480x640"),
        "faster_rcnn_fpn_resnet50_v1b_coco": (lambda: gluoncv_model("faster_rcnn_fpn_resnet50_v1b_coco", "detection",
                                                                    (480, 640)), "1x3x480x640"),
        "fcn_resnet50_voc": (lambda: gluoncv_model("fcn_resnet50_voc", "segmentation", (480, 480), aux=False,
                                                   base_size=480, crop_size=480), "1x3x480x480"),
        "psp_resnet50_ade": (lambda: gluoncv_model("psp_resnet50_ade", "segmentation", (480, 480), aux=False,
                                                   base_size=480, crop_size=480), "1x3x480x480"),
        "deeplab_resnet50_ade": (lambda: gluoncv_model("deeplab_resnet50_ade", "segmentation", (480, 480), aux=False,
                                                       base_size=480, crop_size=480), "1x3x480x480"),
        "simple_pose_resnet18_v1b": (lambda: gluoncv_model("simple_pose_resnet18_v1b", "pose", (256, 192)), "1x3x256x192"),
        "i3d_resnet50_v1_kinetics400": (lambda: gluoncv_model("i3d_resnet50_v1_kinetics400", "video", (224, 224), video=8),
                                        "1x3x8x224x224"),
        "bert_12_768_12": (lambda: bert_model(seq_len=128), "1x128 tokens"),
        "islands (synthetic)": (_islands, "1x256"),
    }


def _islands() -> Any:
    """Where the rule matters: 24 small compatible islands of 4 cheap ops between a user's custom ops.

    Every island is a valid subgraph; an engine for each costs more than it saves.
    """
    import mxnet as mx
    import numpy as np

    from tests.harness import userops
    from tests.models.thirdparty import Model

    x = mx.sym.var("data")
    for i in range(24):
        x = userops.square(x, f"sq{i}")
        x = mx.sym.tanh(mx.sym.relu(x * 0.5 + 0.1, name=f"r{i}"), name=f"t{i}")
    shapes = {"data": (1, 256)}
    inputs = {"data": np.random.RandomState(0).uniform(-1, 1, (1, 256)).astype("float32")}
    return Model("islands", x, {}, {}, shapes, {"data": "float32"}, inputs, "synthetic")


QUICK = ("simple_pose_resnet18_v1b", "ssd_512_mobilenet1.0_voc")
#: Timed rounds per model: a multiple of the number of variants, so each leads equally often.
RUNS = 6

VARIANTS: Dict[str, Optional[Dict[str, Optional[str]]]] = {
    "native": None,
    "measured": {"MXNET_TENSORRT_ENGINE_RULE": "measured", "MXNET_TENSORRT_MIN_SUBGRAPH_SIZE": None},
    "cost": {"MXNET_TENSORRT_ENGINE_RULE": "cost", "MXNET_TENSORRT_MIN_SUBGRAPH_SIZE": None},
    "always": {"MXNET_TENSORRT_ENGINE_RULE": "always", "MXNET_TENSORRT_MIN_SUBGRAPH_SIZE": "1"},
}
#: Native MXNet with OMP_NUM_THREADS = the engines' threads, in a worker process (mx_trt.tools.native_process).
EQUAL = "native, equal threads"
#: The pass (measured rule) in a worker process with OMP_NUM_THREADS = the engines' threads.
EQUAL_MEASURED = "measured, equal threads"
#: The A/A control (``control``): native MXNet bound a second time, in this process and in a third worker.
CONTROL = "native control"
EQUAL_CONTROL = "native control, equal threads"
CONDITIONS = ("quiet", "one core busy")
#: Native MXNet forward time a timed sample spans at least (ms): a fast model's sample is the mean of several
#: forwards in one turn, so that a dozen samples' median is not moved by single forwards' luck. (It does not
#: narrow what differs from turn to turn: the islands graph's identical executors spread 5-30% either way.)
SAMPLE_MS = 30.0
#: Forwards per sample at most.
MAX_PER_SAMPLE = 16


def forwards_per_sample(native_ms: float) -> int:
    """Forwards averaged into one timed sample, for a model whose native forward takes ``native_ms``."""
    if not native_ms > 0:
        return 1
    return max(1, min(MAX_PER_SAMPLE, math.ceil(SAMPLE_MS / native_ms)))


def at_batch(model: Any, batch: int) -> Any:
    """``model`` with dimension 0 of every input scaled to ``batch`` (inputs tiled); the model itself at 1."""
    import dataclasses

    import numpy as np

    if batch == 1:
        return model
    shapes = {k: (v[0] * batch, *v[1:]) for k, v in model.shapes.items()}
    inputs = {k: np.concatenate([v] * batch, axis=0) for k, v in model.inputs.items()}
    return dataclasses.replace(model, shapes=shapes, inputs=inputs)


def _bind(model: Any, env: Optional[Mapping[str, Optional[str]]], cache: str = "") -> Tuple[Any, Any]:
    import mxnet as mx

    import mx_trt
    from mx_trt.frontends.hook import disabled
    from envscope import env_override

    if env is None:
        with disabled():
            exe = model.sym.simple_bind(mx.cpu(), grad_req="null", type_dict=model.dtypes, **model.shapes)
        exe.copy_params_from(model.args, model.aux, allow_extra_params=True)
        info = None
    else:
        with env_override({"MXNET_USE_TENSORRT": "1", "MXNET_TENSORRT_STRICT": "1", "MXNET_TENSORRT_CACHE_DIR": cache,
                           **env}):
            exe = model.sym.simple_bind(mx.cpu(), grad_req="null", type_dict=model.dtypes,
                                        shared_buffer=model.params, **model.shapes)
        info = mx_trt.bind_info(exe)
    for k, v in model.inputs.items():
        exe.arg_dict[k][:] = v
    return exe, info


def _forward(exe: Any) -> float:
    t = time.perf_counter()
    exe.forward(is_train=False)
    for o in exe.outputs:
        o.wait_to_read()
    return (time.perf_counter() - t) * 1e3


def _short(why: str, width: int = 110) -> str:
    """The first clause of a reason, for a table cell."""
    first = why.split(": ", 1)[-1] if why.startswith("_") else why
    first = first.split(";")[0]
    return first if len(first) <= width else first[:width - 3] + "..."


def _native_reasons(info: Any, limit: int = 6) -> List[str]:
    g = info.plan.graph
    by_op: Dict[str, Tuple[int, str]] = {}
    for v, why in info.plan.partition.native.items():
        op = g.nodes[v].op
        n, first = by_op.get(op, (0, why))
        by_op[op] = (n + 1, first)
    rows = [f"{op} x{n}: {_short(why)}" for op, (n, why) in sorted(by_op.items(), key=lambda kv: -kv[1][0])]
    return rows[:limit] + ([f"... {len(rows) - limit} more op types"] if len(rows) > limit else [])


def bench_models(names: Sequence[str], runs: int, warmup: int = 1, batches: Sequence[int] = (1,),
                 busy: bool = False, control: bool = False) -> List[Dict[str, Any]]:
    """One row per model and batch; see the module docstring. With ``control``, native MXNet bound a second
    time is timed in the same rounds, at both thread counts (:data:`CONTROL`, :data:`EQUAL_CONTROL`): an A/A
    control, whose ratios to native MXNet are in each condition's ``ratios`` (``A/A ...``)."""
    builders = _builders()
    rows: List[Dict[str, Any]] = []
    for name in names:
        build, desc = builders[name]
        t0 = time.perf_counter()
        base = build()
        logger.info("%s (%s) built in %.1f s", name, desc, time.perf_counter() - t0)
        for b in batches:
            row = _bench_one(name, at_batch(base, b), b, desc, runs, warmup, busy, control)
            if row is not None:
                rows.append(row)
        del base
        gc.collect()
    return rows


def _bench_one(name: str, model: Any, batch: int, desc: str, runs: int, warmup: int,
               busy: bool, control: bool = False) -> Optional[Dict[str, Any]]:
    from busy import BusyCore, deadline_for

    from mx_trt.builder import engines
    from mx_trt.runtime.twin import served_shares
    from mx_trt.tools.cli.timing import SETTLE_S, measure, warm_check

    exes: Dict[str, Any] = {}
    infos: Dict[str, Any] = {}
    bind_s: Dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="mx_trt_bench_models_") as cache:
        for variant, env in VARIANTS.items():
            t = time.perf_counter()
            try:
                # The measured rule keeps its decisions in a plan cache (fresh: this bind times the engines).
                exes[variant], infos[variant] = _bind(model, env, cache if variant == "measured" else "")
            except Exception as exc:  # noqa: BLE001 - reported in the results, the run goes on
                if variant != "native":
                    raise
                logger.warning("%s at batch %d: MXNet itself does not bind it (%s); skipped", name, batch,
                               str(exc).splitlines()[0][:200])
                return None
            bind_s[variant] = time.perf_counter() - t
        if control:
            exes[CONTROL], _ = _bind(model, None)
        workers = _equal_threads(model, cache, control)
        check_warmup: Dict[str, Any] = {}
        for v, exe in exes.items():
            for _ in range(warmup):
                _forward(exe)
            # The run-time check's first probes (its twin's bind and first forward) are left out of the timed
            # samples, as MXNet's first forward is; what they took is in the row.
            n, secs = warm_check(lambda: _forward(exe), exe)
            if n:
                check_warmup[v] = {"forwards": n, "seconds": secs}
        per = forwards_per_sample(statistics.median(_forward(exes["native"]) for _ in range(3)))
        # A timed sample (the mean of ``per`` forwards) after untimed forwards (one at least, and more until
        # they took SETTLE_S): the first forwards of a turn pay for what ran before it (MXNet's spinning
        # OpenMP threads, in any process).
        def in_process(exe: Any) -> Callable[[], float]:
            return lambda: statistics.fmean(measure(lambda: _forward(exe), per, 1, settle_s=SETTLE_S))

        def in_worker(worker: Any) -> Callable[[], float]:
            return lambda: statistics.fmean(worker.run(per, 1, SETTLE_S))

        runners: Dict[str, Callable[[], float]] = {v: in_process(exe) for v, exe in exes.items()}
        for key, worker in workers.items():
            worker.run(0, warmup)
            n, secs = worker.warm_check()
            if n:
                check_warmup[key] = {"forwards": n, "seconds": secs}
            runners[key] = in_worker(worker)
        by_condition: Dict[str, Dict[str, float]] = {}
        busy_throughout: Optional[bool] = None
        order = list(runners)
        quiet_s = 0.0
        try:
            for cond in (CONDITIONS if busy else CONDITIONS[:1]):
                helper = BusyCore(seconds=deadline_for(quiet_s)) if cond == "one core busy" else None
                if helper is not None:
                    helper.start()
                    time.sleep(0.3)
                times: Dict[str, List[float]] = {v: [] for v in order}
                t0 = time.perf_counter()
                try:
                    for r in range(runs):
                        # Rotate the order: MXNet's OpenMP threads spin for a while after a native
                        # forward and slow whatever runs next, so no variant always follows another.
                        for v in order[r % len(order):] + order[:r % len(order)]:
                            times[v].append(runners[v]())
                finally:
                    if helper is not None:
                        busy_throughout = helper.stop(f"{name} batch {batch}")
                quiet_s = quiet_s or time.perf_counter() - t0
                by_condition[cond] = {v: statistics.median(ts) for v, ts in times.items()}
            served = {"default": served_shares(exes["measured"]),
                      "equal threads": workers[EQUAL_MEASURED].served_shares() if EQUAL_MEASURED in workers else None}
        finally:
            for worker in workers.values():
                worker.close()
    med = by_condition["quiet"]
    info = infos["cost"]
    inside, total = info.plan.op_counts()
    acc_w = workers.get(EQUAL_MEASURED)
    row = {
        "model": name, "batch": batch, "input": desc if batch == 1 else f"{batch}x " + desc,
        "ops": total, "ops_in_engines": inside,
        "engines": {v: len(infos[v].engines) for v in VARIANTS if infos[v] is not None},
        "partitions": {v: [list(p) for p in sorted(sg.nodes for sg in infos[v].plan.partition.subgraphs)]
                       for v in VARIANTS if infos[v] is not None},
        "native_ops": _native_reasons(info),
        "median_ms": med, "by_condition": by_condition, "bind_s": bind_s, "forwards_per_sample": per,
        "native/cost": med["native"] / med["cost"], "always/cost": med["always"] / med["cost"],
        "native/measured": med["native"] / med["measured"],
        "native_equal_threads/measured": med[EQUAL] / med["measured"] if EQUAL in med else None,
        "ratios": {cond: _four_ratios(m) for cond, m in by_condition.items()},
        "threads": next(iter(workers.values())).threads if workers else 0,
        "measured_engines": len(infos["measured"].engines),
        "measured_engines_equal_threads": acc_w.engines if acc_w is not None else None,
        "kept": {"default": infos["measured"].kept_engines(), "equal threads": acc_w.backends if acc_w is not None else None},
        "decisions": {k: d.text for k, d in infos["measured"].decisions.items()},
        "served": served,
        "check_warmup": check_warmup,
        "busy_throughout": busy_throughout,
    }
    logger.info("%s batch %d: %d/%d ops in %d engines; %s", name, batch, inside, total, row["engines"]["cost"],
                "; ".join(f"{c}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items() if v is not None)
                          for c, r in row["ratios"].items()))
    del exes, infos
    engines.clear_pool()
    gc.collect()
    return row


def _four_ratios(med: Mapping[str, float]) -> Dict[str, Optional[float]]:
    """native/accelerated at MXNet's default threads and at equal threads (both sides in worker processes), and
    where the A/A control ran, native MXNet over itself bound again at each (``A/A default threads``, ...)."""
    eq, acc_eq = med.get(EQUAL), med.get(EQUAL_MEASURED)
    out = {"default threads": med["native"] / med["measured"],
           "equal threads": eq / acc_eq if eq and acc_eq else None}
    if CONTROL in med:
        out["A/A default threads"] = med["native"] / med[CONTROL]
    if eq and med.get(EQUAL_CONTROL):
        out["A/A equal threads"] = eq / med[EQUAL_CONTROL]
    return out


def _equal_threads(model: Any, cache: str, control: bool = False) -> Dict[str, Any]:
    """Native MXNet and the pass with the engines' thread count in worker processes (those that can run there),
    and with ``control`` native MXNet again (:data:`EQUAL_CONTROL`)."""
    from mx_trt.settings import Settings
    from mx_trt.tools.native_process import equal_thread_workers

    by_side, _ = equal_thread_workers(model.sym, model.params, model.shapes, model.inputs, model.dtypes,
                                      threads=Settings.from_env().ort_threads, cache_dir=cache, control=control)
    names = {"native": EQUAL, "accelerated": EQUAL_MEASURED, "native control": EQUAL_CONTROL}
    return {names[side]: w for side, w in by_side.items()}


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown tables: the partition, and the three rules side by side."""
    from mx_trt.tools.cli.bench import served_cell

    out = ["| model | input | ops in engines | engines | left native (reason) | native ms | accelerated ms | native/accelerated |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    first = [r for r in rows if r.get("batch", 1) == 1] or list(rows)
    conds = [c for c in CONDITIONS if any(c in r.get("ratios", {}) for r in rows)]
    for r in first:
        native = "<br>".join(r["native_ops"]) or "none"
        m = r["median_ms"]
        out.append(f"| {r['model']} | {r['input']} | {r['ops_in_engines']} of {r['ops']} | {r['engines']['cost']} | "
                   f"{native} | {m['native']:.1f} | {m['cost']:.1f} | {r['native/cost']:.2f} |")
    threads = max((r.get("threads") or 0 for r in rows), default=0)
    head = " | ".join(f"{c}: native / measured, default threads | {c}: native {threads}t / measured {threads}t"
                      for c in conds)
    out += ["", f"| model | batch | native ms | native {threads}t ms | measured ms | measured {threads}t ms | "
                f"engines kept (default / {threads}t) | {head} |",
            "| --- | --- | --- | --- | --- | --- | --- |" + " --- |" * (2 * len(conds))]

    def cell(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:.2f}"

    def ms(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:.1f}"

    for r in rows:
        m = r["median_ms"]
        kept = r.get("kept") or {}
        kept_txt = " / ".join(("native" if v == [] else "-" if v is None else ", ".join(v)) + served_cell(r, k)
                              for k, v in ((k, kept.get(k)) for k in ("default", "equal threads")))
        ratios = r.get("ratios", {})
        early = " (busy helper ended early)" if r.get("busy_throughout") is False else ""
        out.append(f"| {r['model']}{early} | {r.get('batch', 1)} | {ms(m['native'])} | {ms(m.get(EQUAL))} | "
                   f"{ms(m['measured'])} | {ms(m.get(EQUAL_MEASURED))} | {kept_txt} | "
                   + " | ".join(f"{cell(ratios.get(c, {}).get('default threads'))} | "
                                f"{cell(ratios.get(c, {}).get('equal threads'))}" for c in conds) + " |")
    out += ["", "| model | never (native) ms | always: engines, ms | cost rule: engines, ms | best |",
            "| --- | --- | --- | --- | --- |"]
    for r in first:
        m, e = r["median_ms"], r["engines"]
        if r["partitions"]["always"] == r["partitions"]["cost"]:
            best = "same partition"
        else:
            rules = {"native": "never", "cost": "cost rule", "always": "always"}
            best = rules[min(rules, key=m.get)]
        out.append(f"| {r['model']} | {m['native']:.1f} | {e['always']}, {m['always']:.1f} | {e['cost']}, {m['cost']:.1f} | "
                   f"{best} |")
    line = _control_line(rows, conds)
    if line:
        out += ["", line]
    return "\n".join(out)


def _control_line(rows: Sequence[Mapping[str, Any]], conds: Sequence[str]) -> Optional[str]:
    """``report.control_summary`` of the rows' ratios and their A/A controls (:func:`_four_ratios`), grouped by
    condition and thread count, or ``None`` without a control. O(rows)."""
    from report import control_summary

    groups: Dict[str, Tuple[List[float], List[float]]] = {}
    for c in conds:
        for label in ("default threads", "equal threads"):
            ratios, controls = groups.setdefault(f"{c}, {label}", ([], []))
            for r in rows:
                got = r.get("ratios", {}).get(c, {})
                if got.get(label):
                    ratios.append(got[label])
                if got.get(f"A/A {label}"):
                    controls.append(got[f"A/A {label}"])
    return control_summary(groups)
