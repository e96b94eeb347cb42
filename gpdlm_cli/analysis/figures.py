"""The DLM paper's figure types from runs (PNG, matplotlib's Agg backend), for ``gpdlm compare`` and
``gpdlm select``:

* ``vs_train_size_<metric>.png``: the metric against the training size per method (paper Fig. 1 a, b, d, e);
* ``vs_beta_<metric>.png``: the metric against beta, log x axis (Fig. 1 c);
* ``curve_<metric>.png``: learning curves from the step metrics (Fig. 1 f, i);

each drawn only when the data has more than one value on its x axis: a panel per dataset, a line
per combination of the other grouping keys, mean ± SE over the runs at each x.
"""

from __future__ import annotations

import math
from pathlib import Path

from . import records as R


# ----- figures --------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _labels(line_keys: list[str], line_values: list[tuple], fallback: str) -> dict[tuple, str]:
    """Legend labels showing only the keys whose values differ between the lines."""
    varying = [i for i in range(len(line_keys)) if len({v[i] for v in line_values}) > 1]
    out = {}
    for vals in line_values:
        parts = [
            f"{line_keys[i]}={R.fmt_value(vals[i])}"
            if line_keys[i] not in ("model", "method")
            else R.fmt_value(vals[i])
            for i in varying
        ]
        if not parts:  # one line: name its method if a key says it
            parts = [R.fmt_value(vals[i]) for i, k in enumerate(line_keys) if k in ("method", "model")]
        out[vals] = ", ".join(parts) or fallback
    return out


def _color(i: int, n: int):
    plt = _plt()
    return plt.get_cmap("tab10" if n <= 10 else "tab20")(i % 20)


def _legend(ax, n_lines: int) -> None:
    if n_lines > 8:  # many lines: beside the axes, not over the data
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    else:
        ax.legend(fontsize=7)


def _panels(records, by, exclude):
    panel_keys = ["dataset"] if "dataset" in by and "dataset" not in exclude else []
    line_keys = [k for k in by if k not in exclude and k not in panel_keys]
    return panel_keys, line_keys, R.group_records(records, panel_keys)


def _axes_grid(n: int):
    plt = _plt()
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.9 * nrows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return plt, fig, flat[:n]


def _layout(records, by: list[str], exclude: set, metric: str):
    """Panels (one per dataset) and lines (one per combination of the other --by keys), the lines
    in numeric order with their legend labels."""
    _, line_keys, panels = _panels(records, by, exclude)
    all_lines = sorted(
        {tuple(r.value(k) for k in line_keys) for r in records}, key=lambda t: tuple(R.sort_key(v) for v in t)
    )
    return line_keys, panels, all_lines, _labels(line_keys, all_lines, metric)


def figure_vs(records, by: list[str], x_key: str, metric: str, path: Path, logx: bool = False) -> bool:
    """``metric`` against the numeric key ``x_key``: a panel per dataset, a line per combination of
    the other --by keys, mean ± SE over the runs at each x. False (nothing drawn) unless the data
    has more than one value of ``x_key``."""
    usable = [
        r
        for r in records
        if metric in r.metrics and isinstance(r.value(x_key), float) and (not logx or r.value(x_key) > 0)
    ]
    if len({r.value(x_key) for r in usable}) < 2:
        return False
    line_keys, panels, all_lines, labels = _layout(usable, by, {x_key}, metric)
    plt, fig, axes = _axes_grid(len(panels))
    for ax, (pvals, prunes) in zip(axes, panels):
        for lvals, lruns in R.group_records(prunes, line_keys):
            pts = []
            for (x,), xruns in R.group_records(lruns, [x_key]):
                mean, se, _ = R.mean_se([r.metrics[metric] for r in xruns])
                pts.append((x, mean, 0.0 if math.isnan(se) else se))
            xs, ys, es = zip(*pts)
            ax.errorbar(
                xs,
                ys,
                yerr=es,
                marker="o",
                ms=4,
                capsize=3,
                lw=1.3,
                label=labels[lvals],
                color=_color(all_lines.index(lvals), len(all_lines)),
            )
        xs_all = [r.value(x_key) for r in usable]
        if logx or (min(xs_all) > 0 and max(xs_all) / min(xs_all) >= 10):
            ax.set_xscale("log")
        ax.set_xlabel({"train_size": "training size (n_train)", "beta": "beta"}.get(x_key, x_key))
        ax.set_ylabel(metric)
        ax.set_title(" ".join(R.fmt_value(v) for v in pvals) or metric)
        ax.grid(alpha=0.3)
        _legend(ax, len(all_lines))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def figure_curves(client, records, by: list[str], metric: str, path: Path) -> bool:
    """Learning curves of ``metric`` from its step history: a panel per dataset, a line per group
    (mean over the group's runs at the steps they all have). False unless some curve has more than
    one step."""
    histories = {}
    for r in records:
        if metric in r.metrics:
            pts = {}
            for m in client.get_metric_history(r.run_id, metric):
                pts[int(m.step)] = float(m.value)  # a step logged twice keeps the later value
            histories[r.run_id] = pts
    usable = [r for r in records if len(histories.get(r.run_id, {})) > 1]
    if not usable:
        return False
    line_keys, panels, all_lines, labels = _layout(usable, by, set(), metric)
    plt, fig, axes = _axes_grid(len(panels))
    for ax, (pvals, pruns) in zip(axes, panels):
        for lvals, lruns in R.group_records(pruns, line_keys):
            hs = [histories[r.run_id] for r in lruns]
            steps = sorted(set.intersection(*(set(h) for h in hs)))
            if len(steps) < 2:  # the runs stopped at different iterations: average what exists
                steps = sorted(set.union(*(set(h) for h in hs)))
            ys = [R.mean_se([h[s] for h in hs if s in h])[0] for s in steps]
            ax.plot(
                steps,
                ys,
                marker="o",
                ms=2.5,
                lw=1.2,
                color=_color(all_lines.index(lvals), len(all_lines)),
                label=labels[lvals] + (f" (n={len(lruns)})" if len(lruns) > 1 else ""),
            )
        ax.set_xlabel("iteration")
        ax.set_ylabel(metric)
        ax.set_title(" ".join(R.fmt_value(v) for v in pvals) or f"learning curves: {metric}")
        ax.grid(alpha=0.3)
        _legend(ax, len(all_lines))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def draw_figures(client, records, by: list[str], metrics: list[str], outdir: Path) -> list[Path]:
    drawn = []
    for m in metrics:
        for x_key, logx in (("train_size", False), ("beta", True)):
            if x_key in by:
                p = outdir / f"vs_{x_key}_{m}.png"
                if figure_vs(records, by, x_key, m, p, logx=logx):
                    drawn.append(p)
        p = outdir / f"curve_{m}.png"
        if figure_curves(client, records, by, m, p):
            drawn.append(p)
    return drawn
