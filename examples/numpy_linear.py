#!/usr/bin/env python3
"""A custom training loop in NumPy on Fulcrum's parameter servers: the C++
examples/custom_loop.cc, in Python.

It fits a linear regression y = X w + b to synthetic data whose true weights
it knows (w* = sin(i), b* = 0.5), computing gradients itself and letting the
servers apply Adam. Start a server, then run it as worker 0 (the chief):

  ps_server --ps_hosts=127.0.0.1:2222 --worker_hosts=127.0.0.1:2223 --task_index=0 \\
      --mode=async --insecure &
  python3 examples/numpy_linear.py --ps_hosts=127.0.0.1:2222 --insecure

It takes the worker's cluster and security flags (fulcrum.cli): TF_CONFIG
or the host flags, as the container image's entrypoint gives them
(`fulcrum-entrypoint python-chief /usr/local/share/fulcrum/examples/numpy_linear.py`).

It prints the loss as it goes, says it has finished (worker 0 also tells the
servers the job is done) and exits 0 when the weights it learned are within
--tolerance of the true ones.
"""

import argparse
import sys

import numpy as np

import fulcrum
import fulcrum.cli


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    fulcrum.cli.add_flags(parser)  # the cluster, --mode, TLS or --insecure, tokens
    parser.set_defaults(mode="async")
    parser.add_argument("--steps", type=int, default=300, help="Training steps.")
    parser.add_argument("--features", type=int, default=64, help="Features of the problem.")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="Largest error in any learned weight for success.",
    )
    args = fulcrum.cli.parse(parser)
    n, batch = args.features, 32

    with fulcrum.cli.connect(args) as client:
        adam = fulcrum.adam(0.05)
        client.create_variables(
            [
                fulcrum.variable("w", (n,), adam, partitioner=fulcrum.fixed_shards(2)),
                fulcrum.variable("b", (1,), adam),
            ]
        )  # zeros: the default initializer
        rng = np.random.default_rng(7 + client.worker_id)
        true_w = np.sin(np.arange(n, dtype=np.float32))
        true_b = 0.5
        weights = client.pull()
        grads = {"w": np.empty(n, np.float32), "b": np.empty(1, np.float32)}
        for step in range(args.steps):
            # Forward and backward of the mean squared error on one batch.
            x = rng.standard_normal((batch, n), dtype=np.float32)
            error = x @ weights["w"] + weights["b"][0] - (x @ true_w + true_b)
            grads["w"][:] = x.T @ error / batch
            grads["b"][:] = error.mean()
            client.push_pull(grads, weights)  # the new values land in `weights`
            if step % 50 == 0:
                print("step %d loss %.5f" % (step, 0.5 * float(np.mean(error**2))), flush=True)
        max_error = max(
            float(np.max(np.abs(weights["w"] - true_w))), abs(float(weights["b"][0]) - true_b)
        )
        print("final max weight error %.5f after %d updates" % (max_error, client.step))
    return 0 if max_error <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
