"""The benchmark results as text and pictures: the tables printed by ``benchmarks/run.py`` and pasted into
benchmarks/README.md between a block's markers (``--update-readme``), and its plot (needs matplotlib).

Nothing here measures: every function reads the ``results.json`` dictionary that ``run.py`` builds.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

logger = logging.getLogger("benchmarks.run")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The accelerated executor's time over the whole-model engine's, at most (the fused node's overhead).
TARGET_ACCEL_OVER_WHOLE = 1.05


def _mean_ratio(native: Optional[Dict[str, Any]], accelerated: Optional[Dict[str, Any]]) -> Optional[float]:
    """Native's mean latency over the accelerated one's, or ``None`` when either is missing."""
    if not native or not accelerated or not accelerated.get("mean_ms"):
        return None
    return native["mean_ms"] / accelerated["mean_ms"]


def control_verdict(ratios: Sequence[float], controls: Sequence[float]) -> Dict[str, Any]:
    """How ``ratios`` (native/accelerated) stand against the A/A ``controls`` (native/native bound again) of the
    same run: ``spread``, the controls' widest distance from 1.0 (as a factor: 0.03 for 0.97 or 1.03);
    ``at_least`` the ratios at 1.0 or more; ``ties`` those below 1.0 by no more than ``spread`` (two identical
    executors read as far apart: a tie the run cannot order); ``below`` the rest. O(n)."""
    spread = max((abs(float(np.log(c))) for c in controls if c and c > 0), default=0.0)
    ok = [r for r in ratios if r >= 1.0]
    ties = [r for r in ratios if r < 1.0 and abs(float(np.log(r))) <= spread]
    return {"spread": float(np.expm1(spread)), "at_least": len(ok), "ties": len(ties),
            "below": len(ratios) - len(ok) - len(ties), "n": len(ratios)}


def control_summary(groups: Mapping[str, Tuple[Sequence[float], Sequence[float]]]) -> Optional[str]:
    """The A/A control's line: for each group (a column and condition) its ``(ratios, controls)``, each ratio
    judged by :func:`control_verdict` against its own group's controls; ``None`` when no group has a control.
    Groups keep apart what differs: MXNet at two OpenMP threads with a core busy reads 0.7-1.4 of itself at
    batch 1, which says nothing of a quiet cell. O(ratios + controls)."""
    parts, total = [], {"at_least": 0, "ties": 0, "below": 0, "n": 0}
    for name, (ratios, controls) in groups.items():
        if not controls:
            continue
        v = control_verdict(ratios, controls)
        for k in total:
            total[k] += v[k]
        parts.append(f"{name} {min(controls):.3f}-{max(controls):.3f}")
    if not parts:
        return None
    return (f"A/A control: native MXNet against itself bound a second time, in the same rounds, read "
            f"{'; '.join(parts)}. Of the {total['n']} native/accelerated ratios with a control: {total['at_least']} at "
            f"least 1.00, {total['ties']} below 1.00 by no more than their column's and condition's controls (ties "
            f"this run cannot order), {total['below']} below that.")


def _control_line(rows: Sequence[Dict[str, Any]]) -> Optional[str]:
    """:func:`control_summary` of an end-to-end table's rows (``ratios`` by the keys of ``BenchRow.ratios``),
    grouped by condition and thread count. O(rows)."""
    keys = {"default threads": ("native/accelerated", "native/native_control"),
            "equal threads": ("native_equal_threads/accelerated_equal_threads",
                              "native_equal_threads/native_control_equal_threads")}
    groups: Dict[str, Tuple[List[float], List[float]]] = {}
    for r in rows:
        for label, (k, c) in keys.items():
            ratios, controls = groups.setdefault(f"{r.get('condition') or 'as is'}, {label}", ([], []))
            if r["ratios"].get(k):
                ratios.append(r["ratios"][k])
            if r["ratios"].get(c):
                controls.append(r["ratios"][c])
    return control_summary(groups)


def ratio_text(x: Optional[float]) -> str:
    """A ratio as the tables print it (``-``: not measured)."""
    return "-" if x is None else f"{x:.2f}"


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], right_from: int = 1) -> str:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]

    def fmt(r: Sequence[str]) -> str:
        return "  ".join(str(c).rjust(w) if i >= right_from else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return "\n".join([fmt(head), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


def render_tables(res: Dict[str, Any]) -> str:
    """The results as plain-text tables (also pasted into benchmarks/README.md)."""
    out: List[str] = []
    if res.get("models"):
        import bench_models

        out.append("GluonCV and GluonNLP models, batch 1, real input sizes (median ms of alternating rounds)")
        out.append(bench_models.render(res["models"]))
        out.append("")
    if res.get("partition"):
        out.append("Partition pass, synthetic CNN-like graphs, 5% unsupported "
                   "(reference: one BFS + reverse BFS per unsupported node)")
        rows = []
        for r in res["partition"]:
            ref = f"{r['reference_s']:.3f}" + (" (est.)" if r["reference_estimated"] else "")
            ratio = f"{r['ratio']:.0f}x" + (" (est.)" if r["reference_estimated"] else "") if r["ratio"] else "-"
            rows.append([f"{r['ops']:,}", str(r["unsupported"]), str(r["subgraphs"]), f"{r['pass_s']:.3f}", ref, ratio])
        out.append(_table(["ops", "unsupported", "subgraphs", "pass s", "reference s", "reference/pass"], rows))
        out.append("")
    if res.get("bind"):
        b = res["bind"]
        out.append(f"Bind cost, {b['model']} {tuple(b['shape'])}, median of {b['repeat']}")
        rows = [[k, f"{v['median_s']:.3f}", f"{v['ratio_to_native']:.1f}x",
                 f"{v['ratio_to_native_copy']:.1f}x" if "ratio_to_native_copy" in v else "-",
                 str(v.get("engines", "-")), f"{v['timings'].get('export_build', 0):.3f}" if "timings" in v else "-"]
                for k, v in b["legs"].items()]
        out.append(_table(["bind", "seconds", "/ native", "/ native+copy", "engines", "export+build s"], rows))
        out.append("")
    if res.get("memory"):
        out.append("Memory, MB (each variant in its own process; peak ratio on the native process's baseline)")
        rows = [[r["model"], r["label"], str(r["base_mb"]), str(r["after_bind_mb"] - r["base_mb"]), str(r["peak_over_base_mb"]),
                 str(r["end_mb"] - r["base_mb"]), f"{r['peak_ratio']:.2f}x", f"{r['bind_s']:.2f}", str(r.get("cache_mb", "-"))]
                for r in res["memory"]]
        out.append(_table(["model", "variant", "baseline", "+after bind", "+peak", "+after forwards", "peak / native", "bind s",
                           "cache MB"],
                          rows, right_from=2))
        out.append("")
    if res.get("soak"):
        import bench_soak

        out.append(f"Soak: bind, {res['soak'][0]['forwards_per_cycle']} forwards, unbind; small CNN {bench_soak.SHAPE}; "
                   "growth = RSS slope over the second half of the cycles")
        out.append(bench_soak.render(res["soak"]))
        out.append("")
    if res.get("serve"):
        import bench_serve

        s = res["serve"]
        out.append(f"Serving with Triton: {s['model']}, max batch {s['max_batch']}, {s['requests']} requests per "
                   "concurrency over gRPC, batch-1 requests; beside the same model in process")
        out.append(bench_serve.render(s))
        out.append("")
    if res.get("int8"):
        import bench_int8

        out.append(bench_int8.render(res["int8"]))
        out.append("")
    if res.get("fused_node"):
        out.append("Cost of one fused node, us (median, best in brackets; overhead = forward - engine run; "
                   "direct: the executor's forward of a whole model in one engine, runtime.direct)")
        rows = [[r["case"], f"{r['fused_forward_us']:.1f} ({r['best']['fused_forward_us']:.1f})",
                 f"{r['engine_run_us']:.1f} ({r['best']['engine_run_us']:.1f})",
                 f"{r['overhead_us']:.1f} ({r['best']['overhead_us']:.1f})",
                 f"{r['noop_custom_op_us']:.1f} ({r['best']['noop_custom_op_us']:.1f})",
                 f"{r['overhead_over_noop']:.2f}",
                 (f"{r['direct_overhead_us']:.1f} ({r['best']['direct_overhead_us']:.1f})"
                  if "direct_overhead_us" in r else "-")] for r in res["fused_node"]]
        out.append(_table(["case", "through MXNet", "engine run", "overhead", "no-op custom op", "overhead/no-op",
                           "direct overhead"], rows))
        out.append("")
    from mx_trt.tools.cli.bench import served_cell

    for key, title in (("end_to_end", "End to end"), ("busy", "Busy machine: quiet, then one core kept busy")):
        if not res.get(key):
            continue
        threads = max((r.get("threads") or 0 for r in res[key]), default=0)
        out.append(f"{title}, median latency in ms (throughput in images/s), random weights, the measured engine "
                   f"rule; native and accelerated: MXNet's default threads; native {threads}t and accel {threads}t: "
                   f"OMP_NUM_THREADS={threads} (worker processes, same rounds; the accelerated one measures its "
                   f"engines against MXNet at {threads} threads); target accelerated/whole <= {TARGET_ACCEL_OVER_WHOLE}")
        rows = []
        control = any(r.get("native_control") or r.get("native_control_equal_threads") for r in res[key])
        for r in res[key]:
            whole = r["whole_model"]
            eq = r.get("native_equal_threads")
            acc_eq = r.get("accelerated_equal_threads")
            kept = r.get("engines_kept") or {}
            ratios = r["ratios"]
            aw = ratios["accelerated/whole_model"]
            rows.append([
                r["model"], str(r["batch"]), r.get("condition", ""),
                f"{r['native']['median_ms']:.1f} ({r['native']['throughput']:.0f})",
                f"{eq['median_ms']:.1f} ({eq['throughput']:.0f})" if eq else "-",
                f"{r['accelerated']['median_ms']:.1f} ({r['accelerated']['throughput']:.0f})",
                f"{acc_eq['median_ms']:.1f} ({acc_eq['throughput']:.0f})" if acc_eq else "-",
                f"{whole['median_ms']:.1f} ({whole['throughput']:.0f})" if whole else "-",
                f"{aw:.3f}" + ("" if aw <= TARGET_ACCEL_OVER_WHOLE else " !") if aw else "-",
                f"{ratios['native/accelerated']:.2f}",
                ratio_text(ratios.get("native_equal_threads/accelerated_equal_threads")),
                ratio_text(_mean_ratio(r["native"], r["accelerated"])), ratio_text(_mean_ratio(eq, acc_eq)),
                f"{r['engines']} ({r['ops_in_engines']}/{r['ops_total']})",
                " / ".join((", ".join(v) or "native") + served_cell(r, k) for k, v in kept.items()) or "-",
                f"{r['bind_s']['accelerated']:.1f}",
            ] + ([ratio_text(ratios.get("native/native_control")),
                  ratio_text(ratios.get("native_equal_threads/native_control_equal_threads"))] if control else []))
        out.append(_table(["model", "batch", "condition", "native", f"native {threads}t", "accelerated",
                           f"accel {threads}t", "whole model", "accel/whole", "native/accel",
                           f"native {threads}t/accel {threads}t", "by mean", f"{threads}t by mean", "engines (ops)",
                           "kept (default / equal)", "bind s"] + (["A/A", f"A/A {threads}t"] if control else []),
                          rows, right_from=3))
        out.append("! above the target. by mean: the same ratios of mean latencies (every timed forward counts: "
                   "probes of the run-time check, a side's stalls). engines (ops): engines the measured rule kept "
                   "at default threads (operators in them); kept: their backend and precision at default and at "
                   "equal threads (in parentheses, the share of all forwards the run-time check gave native MXNet or "
                   "another engine, an alternate it compares; the rest ran on the kept engines); "
                   "bind s: the accelerated bind (the first per model and batch times its engines)"
                   + ("; A/A: native MXNet over itself bound a second time (the control)" if control else ""))
        line = _control_line(res[key])
        if line:
            out.append(line)
        out.append("")
    return "\n".join(out)


def plot(res: Dict[str, Any], path: str) -> bool:
    """Write the PNG; ``False`` (with a warning) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed (pip install -r requirements/bench.txt): no PNG written")
        return False
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    ax = axes[0][0]
    part = res.get("partition") or []
    if part:
        xs = [r["ops"] for r in part]
        ax.loglog(xs, [r["pass_s"] for r in part], "o-", label="partition pass")
        meas = [r for r in part if not r["reference_estimated"]]
        est = [r for r in part if r["reference_estimated"]]
        ax.loglog([r["ops"] for r in meas], [r["reference_s"] for r in meas], "s-", label="BFS per node (reference)")
        if est and meas:
            ax.loglog([meas[-1]["ops"]] + [r["ops"] for r in est], [meas[-1]["reference_s"]] + [r["reference_s"] for r in est],
                      "s--", color="C1", alpha=0.5, label="reference, extrapolated")
        for r in part:
            if r["ratio"]:
                ax.annotate(f"{r['ratio']:.0f}x", (r["ops"], r["pass_s"]), textcoords="offset points", xytext=(4, -12))
        ax.set_xlabel("operators (5% unsupported)")
        ax.set_ylabel("seconds")
        ax.set_title("Partition pass scaling")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    ax = axes[0][1]
    if res.get("bind"):
        legs = res["bind"]["legs"]
        names = list(legs)
        vals = [legs[k]["median_s"] for k in names]
        bars = ax.bar(range(len(names)), vals, color=["C7", "C8", "C0", "C3", "C1", "C2"][: len(names)])
        for bar, k in zip(bars, names):
            ax.annotate(f"{legs[k]['ratio_to_native']:.1f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=9)
        ax.set_xticks(range(len(names)), [n.replace(", ", "\n") for n in names], fontsize=8)
        ax.set_ylabel("seconds")
        ax.set_title(f"Bind cost, {res['bind']['model']} (ratio to native)")
    ax = axes[1][0]
    if res.get("fused_node"):
        rows = res["fused_node"]
        idx = np.arange(len(rows))
        ax.bar(idx - 0.2, [r["overhead_us"] for r in rows], 0.4, label="fused node overhead (forward - engine)")
        ax.bar(idx + 0.2, [r["noop_custom_op_us"] for r in rows], 0.4, label="no-op custom op forward")
        ax.set_xticks(idx, [r["case"] for r in rows], fontsize=8)
        ax.set_ylabel("microseconds")
        ax.set_title("Cost of one fused node")
        ax.legend(fontsize=8)
    ax = axes[1][1]
    e2e = res.get("end_to_end") or []
    if e2e:
        labels = [f"{r['model']} b{r['batch']}" for r in e2e]
        idx = np.arange(len(e2e))
        acc = [r["accelerated"]["median_ms"] for r in e2e]
        nat = [r["native"]["median_ms"] / a for r, a in zip(e2e, acc)]
        eq = [(r["native_equal_threads"]["median_ms"] / a) if r.get("native_equal_threads") else 0
              for r, a in zip(e2e, acc)]
        whole = [(r["whole_model"]["median_ms"] / a) if r["whole_model"] else 0 for r, a in zip(e2e, acc)]
        ax.bar(idx - 0.3, nat, 0.2, label="native MXNet, default threads")
        ax.bar(idx - 0.1, eq, 0.2, label="native MXNet, equal threads")
        ax.bar(idx + 0.1, [1.0] * len(e2e), 0.2, label="accelerated")
        ax.bar(idx + 0.3, whole, 0.2, label="whole model, one engine")
        ax.axhline(1 / TARGET_ACCEL_OVER_WHOLE, color="k", lw=0.8, ls=":", label="whole = accelerated / 1.05")
        ax.set_xticks(idx, labels, fontsize=7, rotation=45, ha="right")
        ax.set_ylabel("latency relative to accelerated")
        ax.set_title("End to end (median latency / accelerated)")
        ax.set_ylim(0, min(max(nat + eq + whole + [1.0]), 5.0) * 1.35)
        ax.legend(fontsize=8, loc="upper center", ncol=2)
    machine = res.get("machine", {})
    fig.suptitle(f"mx_trt benchmarks - {machine.get('cpus', '?')} CPUs, {machine.get('backend', '')}, "
                 f"{res.get('date', '')}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


README = os.path.join(ROOT, "benchmarks", "README.md")


def update_readme(res: Dict[str, Any], png: Optional[str], block_name: str) -> None:
    """Put the tables (and a copy of the plot) between the ``block_name`` markers of benchmarks/README.md.

    The plot is copied to ``benchmarks/<block_name>.png``.
    """
    import shutil

    start, end = f"<!-- {block_name}:start -->", f"<!-- {block_name}:end -->"
    with open(README, encoding="utf-8") as f:
        text = f.read()
    if start not in text or end not in text:
        raise SystemExit(f"{README} has no {start} ... {end} block")
    m = res["machine"]
    block = [start, "",
             f"Measured {res['date']} with `{res['command']}` ({res['seconds']:.0f} s): {m['cpus']} CPUs "
             f"({m.get('cpu', '?')}; {m.get('isa', '?')}), "
             f"{m['platform']}, Python {m['python']}, MXNet {m['mxnet']}, {m['backend']}; "
             f"threads per library: {m['threads']}; "
             f"1-minute load average before/after: {m['loadavg_before_after'][0]}/{m['loadavg_before_after'][1]}.",
             ""]
    if png:
        shutil.copyfile(png, os.path.join(ROOT, "benchmarks", f"{block_name}.png"))
        block += [f"![{block_name}]({block_name}.png)", ""]
    block += ["```", render_tables(res).rstrip(), "```", "", end]
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    with open(README, "w", encoding="utf-8") as f:
        f.write(head + "\n".join(block) + tail)
