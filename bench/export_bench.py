#!/usr/bin/env python3
"""Exporting a trained model of --mib MiB (1 GiB by default): the seconds
fulcrumctl export takes to write it as safetensors and as npz, against a
plain copy of the same checkpoint files (export_*_vs_file_copy: the disk's
own pace is the floor), and its peak resident memory against the model's
size (export_*_peak_rss_vs_model; target <= 1.2: it streams the tensors a
few MiB at a time rather than building the file in memory). Also
client.export from the live servers against pulling every variable once
(live_export_vs_pull: the wire's pace is the floor), and how much it added
to the client's peak memory (live_export_added_peak_rss_vs_model).

Two servers hold the model (variables of 64 MiB in 4 MiB shards, SGD: no
slots); the job's end has each write its final checkpoint file, which is
what is exported.

    python3 bench/export_bench.py --bin_dir=bazel-bin [--mib=1024]
"""

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from local_server import start_server


def peak_run(argv):
    """Runs argv; (seconds, its peak resident MiB)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit("%s failed:\n%s" % (" ".join(argv), output))
    return time.monotonic() - start, usage.ru_maxrss / 1024.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin_dir", default="bazel-bin")
    parser.add_argument("--mib", type=int, default=1024, help="The model's size.")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.bin_dir, "python", "site"))
    import fulcrum  # the package built beside the binaries

    work = tempfile.mkdtemp(prefix="export_bench.")
    try:
        ckpt = os.path.join(work, "ckpt")
        servers = [
            start_server(args.bin_dir, work, ["--checkpoint_dir=" + ckpt], index=i, num_ps=2)
            for i in range(2)
        ]
        hosts = ",".join(address for _, address in servers)
        variables = [
            fulcrum.variable(
                "layer%d.weight" % i,
                (16384, 1024),  # 64 MiB
                fulcrum.sgd(0.1),
                initializer=fulcrum.random_uniform(seed=i),
                partitioner=fulcrum.max_size(4 << 20),
            )
            for i in range(max(1, args.mib // 64))
        ]
        model_mib = 64.0 * len(variables)
        with fulcrum.connect(hosts) as client:
            client.create_variables(variables)
            # The export first, so that the pulls' arrays are not in its peak.
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
            live = os.path.join(work, "live.safetensors")
            start = time.monotonic()
            client.export(live)
            live_s = time.monotonic() - start
            added = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0 - before
            os.remove(live)
            start = time.monotonic()
            for v in variables:
                client.pull(names=[v["name"]])
            pull_s = time.monotonic() - start
        print("pull_all_%dMiB_s=%.2f" % (model_mib, pull_s))
        print("live_export_safetensors_%dMiB_s=%.2f" % (model_mib, live_s))
        print("live_export_vs_pull=%.2f" % (live_s / pull_s))
        print("live_export_added_peak_rss_MiB=%.0f" % max(added, 0.0))
        print("live_export_added_peak_rss_vs_model=%.3f" % (max(added, 0.0) / model_mib))
        for proc, _ in servers:
            proc.wait(timeout=600)  # job done: each writes its final file

        start = time.monotonic()
        copy = os.path.join(work, "copy")
        os.makedirs(copy)
        for name in os.listdir(ckpt):
            if name.startswith("final-"):
                shutil.copyfile(os.path.join(ckpt, name), os.path.join(copy, name))
        os.sync()
        copy_s = time.monotonic() - start
        shutil.rmtree(copy)
        print("export_model_MiB=%.0f" % model_mib)
        print("file_copy_%dMiB_s=%.2f" % (model_mib, copy_s))
        for fmt in ("safetensors", "npz"):
            out = os.path.join(work, "model." + fmt)
            seconds, peak_mib = peak_run(
                [
                    os.path.join(args.bin_dir, "deploy", "fulcrumctl"),
                    "export",
                    "--checkpoint_dir=" + ckpt,
                    "--out=" + out,
                ]
            )
            os.remove(out)
            print("export_%s_%dMiB_s=%.2f" % (fmt, model_mib, seconds))
            print("export_%s_vs_file_copy=%.2f" % (fmt, seconds / copy_s))
            print("export_%s_peak_rss_MiB=%.0f" % (fmt, peak_mib))
            print("export_%s_peak_rss_vs_model=%.3f" % (fmt, peak_mib / model_mib))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
