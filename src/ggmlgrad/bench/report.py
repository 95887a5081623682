"""The bench's outputs: a table of medians and ratios, a JSON file, and PNG plots (matplotlib)."""
from __future__ import annotations

import json
import os
import statistics

CONTENDERS = ("gg eager", "gg graph", "gg capture", "torch", "jax jit")
RATIOS = (("gg eager", "torch"), ("gg graph", "torch"), ("gg capture", "torch"), ("gg capture", "jax jit"))


def median_of(res: dict | None) -> float | None:
    return res.get("median_us") if isinstance(res, dict) else None


def ratio(row: dict, a: str, b: str) -> float | None:
    x, y = median_of(row["results"].get(a)), median_of(row["results"].get(b))
    return x / y if x is not None and y else None


def _cell(res: dict | None) -> str:
    if res is None:
        return "-"
    if "median_us" in res:
        us = res["median_us"]
        return f"{us:.1f}" if us < 1000 else f"{us / 1000:.2f} ms"
    return res["status"] if res["status"] != "n/a" else "-"


def table(rows: list[dict]) -> str:
    """Markdown: per workload the median per call of each contender (µs) and the ratios."""
    head = ["workload"] + list(CONTENDERS) + [f"{a}/{b}".replace("gg ", "") for a, b in RATIOS]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for row in rows:
        cells = [row["workload"]] + [_cell(row["results"].get(c)) for c in CONTENDERS]
        for a, b in RATIOS:
            r = ratio(row, a, b)
            cells.append(f"{r:.2f}" if r is not None else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_op_summary(rows: list[dict]) -> dict:
    """Median and largest gg eager / torch eager ratio over the per-op table (the issue's goals: ≤ 1.5, ≤ 3)."""
    rs = [r for r in (ratio(row, "gg eager", "torch") for row in rows if row["group"] == "per-op") if r is not None]
    if not rs:
        return {"median_ratio": None, "max_ratio": None}
    return {"median_ratio": statistics.median(rs), "max_ratio": max(rs), "ops": len(rs)}


def write_json(path: str, payload: dict) -> None:
    def strip(o):  # samples stay; NaN-free floats only
        return o
    with open(path, "w", encoding="utf-8") as f:
        json.dump(strip(payload), f, indent=1, default=str)


def plots(out_dir: str, rows: list[dict], sweeps: dict | None) -> list[str]:
    """bars.png (one panel per workload) and, with sweeps, sweep_width.png and sweep_batch.png.
    Returns the paths written; [] when matplotlib is not installed (``pip install ggmlgrad[bench]``)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    timed = [r for r in rows if any(median_of(v) is not None for v in r["results"].values())]
    if timed:
        cols = 4
        n_rows = (len(timed) + cols - 1) // cols
        fig, axes = plt.subplots(n_rows, cols, figsize=(4.2 * cols, 2.4 * n_rows), squeeze=False)
        colors = dict(zip(CONTENDERS, ("#9ecae1", "#4292c6", "#08519c", "#ee4c2c", "#6a51a3")))
        for ax, row in zip(axes.flat, timed):
            names = [c for c in CONTENDERS if median_of(row["results"].get(c)) is not None]
            vals = [median_of(row["results"][c]) for c in names]
            ax.barh(names[::-1], vals[::-1], color=[colors[c] for c in names[::-1]])
            ax.set_title(row["workload"], fontsize=8)
            ax.set_xlabel(row["unit"].replace("us", "µs"), fontsize=7)
            ax.tick_params(labelsize=7)
        for ax in list(axes.flat)[len(timed):]:
            ax.axis("off")
        fig.tight_layout()
        path = os.path.join(out_dir, "bars.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    for axis, label in (("width", "hidden width H (64-H-H-10, batch 64)"), ("batch", "batch size (64-64-64-10)")):
        pts = (sweeps or {}).get(axis) or []
        if not pts:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for c in CONTENDERS:
            xy = [(p["x"], median_of(p["results"].get(c))) for p in pts]
            xy = [(x, y) for x, y in xy if y is not None]
            if xy:
                ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=c)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("Adam step (µs, median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(out_dir, f"sweep_{axis}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
