#!/usr/bin/env python3
"""Draws how cost grows with the work, from one bench/run.sh's figures.

Usage: plot_curves.py RESULTS OUTPUT_SVG

RESULTS holds the run's name=value lines. Four panels, each on log-log
axes (a straight line of slope 1 is cost growing in proportion):
  - updates/s against async workers, with simulated compute
    (async_updates_per_sec_nN, bench:scaling_bench), beside perfect scaling;
  - push+pull time against the model's size (curve_pushpull_NMiB_ms,
    bench:dataplane_bench, which names 1 GiB 1024MiB);
  - rows/s pushed and pulled against a server table's rows, eviction on
    (table_curve_N_rows_{push,pull}_rows_per_sec, bench:sparse_bench);
  - a worker's peak memory against its data set's size, in memory and
    streamed (worker_{memory,stream}_Nx_peak_rss_MiB, bench/stream_bench.sh).
A panel whose figures are missing says so. Standard library only.
"""

import math
import re
import sys

W, H, M = 420, 300, 56  # a panel's width, height, margin
COLOURS = ["#1f77b4", "#d62728", "#2ca02c"]


def read(path):
    figures = {}
    with open(path) as f:
        for line in f:
            name, sep, value = line.strip().partition("=")
            try:
                figures[name] = float(value) if sep else None
            except ValueError:
                pass
    return figures


def series(figures, pattern):
    """(x, y) of every figure whose name matches `pattern` (x its group 1)."""
    points = []
    for name, value in figures.items():
        match = re.fullmatch(pattern, name)
        if match and value is not None:
            points.append((float(match.group(1)), value))
    return sorted(points)


def log_ticks(lo, hi):
    """Powers of ten (or of 2, 4 and 8 between them when few) within [lo, hi]."""
    ticks = [10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    ticks = [t for t in ticks if lo <= t <= hi]
    if len(ticks) < 3:
        ticks = sorted({t * m for t in [10.0**e for e in range(-3, 12)] for m in (1, 2, 5)})
        ticks = [t for t in ticks if lo <= t <= hi]
    return ticks


def label(v):
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= size:
            return f"{v / size:g}{unit}"
    return f"{v:g}"


def panel(x0, y0, title, x_label, y_label, lines):
    """An SVG group: log-log axes and one polyline per (name, points)."""
    points = [p for _, pts in lines for p in pts]
    out = [
        f'<text x="{x0 + W / 2}" y="{y0 + 20}" text-anchor="middle" font-size="14">{title}</text>'
    ]
    if not points:
        out.append(
            f'<text x="{x0 + W / 2}" y="{y0 + H / 2}" text-anchor="middle">not measured</text>'
        )
        return out
    xs, ys = [x for x, _ in points], [y for _, y in points]
    lx0, lx1 = math.log10(min(xs)), math.log10(max(xs))
    ly0, ly1 = math.log10(min(ys)) - 0.1, math.log10(max(ys)) + 0.1
    lx1 = lx1 if lx1 > lx0 else lx0 + 1

    def sx(x):
        return x0 + M + (W - 1.5 * M) * (math.log10(x) - lx0) / (lx1 - lx0)

    def sy(y):
        return y0 + H - M + -(H - 1.7 * M) * (math.log10(y) - ly0) / (ly1 - ly0)

    left, bottom = x0 + M, y0 + H - M
    out += [
        f'<line x1="{left}" y1="{bottom}" x2="{x0 + W - M / 2}" y2="{bottom}" stroke="black"/>',
        f'<line x1="{left}" y1="{bottom}" x2="{left}" y2="{y0 + M * 0.7}" stroke="black"/>',
        f'<text x="{x0 + W / 2}" y="{y0 + H - 14}" text-anchor="middle" font-size="11">'
        f"{x_label}</text>",
        f'<text x="{x0 + 12}" y="{y0 + H / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 {x0 + 12} {y0 + H / 2})">{y_label}</text>',
    ]
    for t in log_ticks(min(xs), max(xs)):
        out.append(
            f'<text x="{sx(t):.1f}" y="{bottom + 15}" text-anchor="middle" '
            f'font-size="10">{label(t)}</text>'
        )
    for t in log_ticks(10**ly0, 10**ly1):
        out.append(
            f'<text x="{left - 5}" y="{sy(t) + 4:.1f}" text-anchor="end" '
            f'font-size="10">{label(t)}</text>'
        )
        out.append(
            f'<line x1="{left}" y1="{sy(t):.1f}" x2="{x0 + W - M / 2}" y2="{sy(t):.1f}" '
            'stroke="#ddd"/>'
        )
    for i, (name, pts) in enumerate(lines):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        out += [
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>' for x, y in pts
        ]
        out.append(
            f'<text x="{left + 8}" y="{y0 + M * 0.7 + 14 * (i + 1)}" font-size="11" '
            f'fill="{colour}">{name}</text>'
        )
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    f = read(sys.argv[1])
    updates = series(f, r"async_updates_per_sec_n(\d+)")
    one = dict(updates).get(1.0)
    ideal = [(n, one * n) for n, _ in updates] if one else []
    panels = [
        (
            "Async workers (simulated compute)",
            "workers",
            "updates/s",
            [("measured", updates), ("perfect scaling", ideal)],
        ),
        (
            "Push+pull against model size",
            "MiB",
            "ms",
            [("1 server", series(f, r"curve_pushpull_(\d+)MiB_ms"))],
        ),
        (
            "A table's rows against its size",
            "rows held (eviction on)",
            "rows/s",
            [
                ("pushed", series(f, r"table_curve_(\d+)_rows_push_rows_per_sec")),
                ("pulled", series(f, r"table_curve_(\d+)_rows_pull_rows_per_sec")),
            ],
        ),
        (
            "Worker memory against data size",
            "times the data set",
            "peak MiB",
            [
                ("in memory", series(f, r"worker_memory_(\d+)x_peak_rss_MiB")),
                ("streamed", series(f, r"worker_stream_(\d+)x_peak_rss_MiB")),
            ],
        ),
    ]
    body = []
    for i, (title, x_label, y_label, lines) in enumerate(panels):
        body += panel(
            (i % 2) * W,
            (i // 2) * H,
            title,
            x_label,
            y_label,
            [(n, pts) for n, pts in lines if pts],
        )
    with open(sys.argv[2], "w") as out:
        out.write(
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{2 * H}" '
            'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n'
            + "\n".join(body)
            + "\n</svg>\n"
        )
    missing = [title for title, _, _, lines in panels if not any(pts for _, pts in lines)]
    print(
        f"cost curves written to {sys.argv[2]}"
        + (f"; not measured: {', '.join(missing)}" if missing else "")
    )


if __name__ == "__main__":
    main()
