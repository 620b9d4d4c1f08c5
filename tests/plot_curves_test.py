#!/usr/bin/env python3
"""bench/plot_curves.py draws each measured curve on log axes, from a run's
name=value lines, and says which panel went unmeasured."""

import os
import re
import subprocess
import sys
import tempfile
from itertools import pairwise


def runfile(path):
    root = os.environ.get("TEST_SRCDIR", ".")
    candidate = os.path.join(root, os.environ.get("TEST_WORKSPACE", ""), path)
    return candidate if os.path.exists(candidate) else path


def main():
    work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    results = os.path.join(work, "results.txt")
    with open(results, "w") as f:
        # Push+pull time 10x per 10x of size: a straight line of slope 1.
        f.write("bench: noise=FAILED (its stderr: x)\nnot a figure\n")
        for n, rate in ((1, 50), (2, 98), (4, 190), (8, 340)):
            f.write(f"async_updates_per_sec_n{n}={rate}\n")
        for size, ms in (("1MiB", 1), ("16MiB", 16), ("256MiB", 256), ("1024MiB", 1024)):
            f.write(f"curve_pushpull_{size}_ms={ms}\n")
        for times, memory, stream in ((1, 55, 66), (4, 90, 68), (16, 245, 69)):
            f.write(f"worker_memory_{times}x_peak_rss_MiB={memory}\n")
            f.write(f"worker_stream_{times}x_peak_rss_MiB={stream}\n")
    svg_path = os.path.join(work, "curves.svg")
    run = subprocess.run(
        [sys.executable, runfile("bench/plot_curves.py"), results, svg_path],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "not measured: A table's rows against its size" in run.stdout, run.stdout
    svg = open(svg_path).read()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count("not measured") == 1, svg
    lines = re.findall(r'<polyline[^>]* points="([^"]*)"', svg)
    # measured and perfect scaling; push+pull; in memory and streamed.
    assert len(lines) == 5, lines
    pushpull = [tuple(map(float, p.split(","))) for p in lines[2].split()]
    assert len(pushpull) == 4, pushpull
    # Sizes 1, 16, 256 and 1024 MiB: equal steps on a log axis for the
    # first three, time rising with them (y grows downwards).
    steps = [b[0] - a[0] for a, b in pairwise(pushpull)]
    assert abs(steps[0] - steps[1]) < 0.5, steps
    assert all(b[1] < a[1] for a, b in pairwise(pushpull)), pushpull
    # Slope 1 on log-log axes, with the axes' own scales: the line's rise
    # over run is the same between every pair of points.
    slopes = [(a[1] - b[1]) / (b[0] - a[0]) for a, b in pairwise(pushpull)]
    assert max(slopes) - min(slopes) < 0.01, slopes
    print("plot_curves_test: passed")


if __name__ == "__main__":
    main()
