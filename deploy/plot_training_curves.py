#!/usr/bin/env python3
"""Renders a run's training curves to an SVG image a browser opens.

Usage: plot_training_curves.py METRICS_JSONL OUTPUT_SVG

METRICS_JSONL is what the chief writes with --metrics_jsonl: "progress"
lines (train loss and accuracy) and "epoch" lines (test loss and accuracy).
Two panels: loss and accuracy, each against wall-clock seconds. Standard
library only.
"""

import json
import sys

WIDTH, HEIGHT, PAD = 460, 320, 50


def read(path):
    progress, epochs = [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path} line {number}: not JSON ({e})")
            (progress if record.get("type") == "progress" else epochs).append(record)
    if not progress:
        sys.exit(f"{path}: no progress lines; was it written by the chief with --metrics_jsonl?")
    return progress, epochs


def panel(x0, title, series, y_label):
    """An SVG group: axes, ticks and one polyline per (name, colour, points)."""
    xs = [x for _, _, pts in series for x, _ in pts] or [0, 1]
    ys = [y for _, _, pts in series for _, y in pts] or [0, 1]
    x_max = max(xs) or 1
    y_min, y_max = min(ys), max(ys)
    if y_max - y_min < 1e-9:
        y_max = y_min + 1

    def sx(x):
        return x0 + PAD + (WIDTH - 2 * PAD) * x / x_max

    def sy(y):
        return HEIGHT - PAD - (HEIGHT - 2 * PAD) * (y - y_min) / (y_max - y_min)

    out = [
        f'<text x="{x0 + WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{title}</text>',
        f'<line x1="{sx(0)}" y1="{sy(y_min)}" x2="{sx(x_max)}" y2="{sy(y_min)}" stroke="black"/>',
        f'<line x1="{sx(0)}" y1="{sy(y_min)}" x2="{sx(0)}" y2="{sy(y_max)}" stroke="black"/>',
        f'<text x="{x0 + WIDTH / 2}" y="{HEIGHT - 12}" text-anchor="middle" '
        'font-size="12">seconds</text>',
        f'<text x="{x0 + 14}" y="{HEIGHT / 2}" font-size="12" '
        f'transform="rotate(-90 {x0 + 14} {HEIGHT / 2})" text-anchor="middle">{y_label}</text>',
    ]
    for i in range(5):
        y = y_min + (y_max - y_min) * i / 4
        x = x_max * i / 4
        out.append(
            f'<text x="{sx(0) - 6}" y="{sy(y) + 4}" text-anchor="end" font-size="10">{y:.3g}</text>'
        )
        out.append(
            f'<text x="{sx(x)}" y="{sy(y_min) + 16}" text-anchor="middle" '
            f'font-size="10">{x:.0f}</text>'
        )
    for row, (name, colour, pts) in enumerate(series):
        if pts:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            out.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>'
            )
            for x, y in pts if len(pts) < 30 else []:
                out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>')
        out.append(
            f'<text x="{x0 + PAD + 130 * row}" y="40" font-size="12" fill="{colour}">{name}</text>'
        )
    return "\n".join(out)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    progress, epochs = read(sys.argv[1])

    def t(r):
        return r["wall_seconds"]

    loss = [
        ("train loss", "#1f77b4", [(t(r), r["train_loss"]) for r in progress]),
        ("test loss", "#d62728", [(t(r), r["test_loss"]) for r in epochs]),
    ]
    accuracy = [
        ("train accuracy", "#1f77b4", [(t(r), r["train_accuracy"]) for r in progress]),
        ("test accuracy", "#d62728", [(t(r), r["test_accuracy"]) for r in epochs]),
    ]
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n'
        f"{panel(0, 'Loss', loss, 'cross-entropy')}\n"
        f"{panel(WIDTH, 'Accuracy', accuracy, 'accuracy')}\n</svg>\n"
    )
    with open(sys.argv[2], "w") as f:
        f.write(svg)
    final = epochs[-1]["test_accuracy"] if epochs else None
    print(
        f"training curves written to {sys.argv[2]}"
        + (f" (final test accuracy {final:.4f})" if final is not None else "")
    )


if __name__ == "__main__":
    main()
