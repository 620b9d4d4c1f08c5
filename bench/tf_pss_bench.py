#!/usr/bin/env python3
"""The TensorFlow baseline of the end-to-end benchmark (bench/e2e_bench.sh).

Trains the same Fashion-MNIST MLP as Fulcrum's worker (784-256-128-10, ReLU,
Glorot-uniform weights, zero biases, softmax cross-entropy, Adam 1e-3 applied
on the parameter servers) with TensorFlow 2's ParameterServerStrategy and its
ClusterCoordinator: the custom training loop of TensorFlow's own tutorial.
The parameter servers and workers are tf.distribute.Server processes on
127.0.0.1, on ports this script picks; the coordinator is this process.

Training is asynchronous, as with the strategy: each scheduled step reads the
variables, computes gradients on a worker and applies Adam on the servers.

Prints `tf_pss_examples_per_sec=...` (steps after a warm-up, over their
wall time) and `tf_pss_test_accuracy=...` (so the run is seen to train).

  tf_pss_bench.py [--num_ps=2] [--num_workers=2] [--batch_size=64]
                  [--steps=938] [--data_dir=/usr/share/datasets/fashion-mnist]
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import time

from local_server import free_ports

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["CUDA_VISIBLE_DEVICES"] = ""


def start_cluster(num_ps, num_workers, threads):
    """The cluster spec of num_ps servers, num_workers workers and a chief
    (this process) on loopback, and the server processes, started."""
    ports = iter(free_ports(num_ps + num_workers + 1))
    cluster = {
        "ps": ["127.0.0.1:%d" % next(ports) for _ in range(num_ps)],
        "worker": ["127.0.0.1:%d" % next(ports) for _ in range(num_workers)],
        "chief": ["127.0.0.1:%d" % next(ports)],
    }
    servers = [
        subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--serve",
                json.dumps([cluster, job, i, threads]),
            ]
        )
        for job in ("ps", "worker")
        for i in range(len(cluster[job]))
    ]
    return cluster, servers


def read_idx(path):
    import numpy as np

    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


# The model both TensorFlow baselines train, as Fulcrum's worker does.
SIZES = [784, 256, 128, 10]
LEARNING_RATE, BETA1, BETA2, EPSILON = 1e-3, 0.9, 0.999, 1e-7


def initial_weights():
    """Glorot-uniform kernels and zero biases, in layer order."""
    import numpy as np

    rng = np.random.default_rng(1)
    weights = []
    for fan_in, fan_out in zip(SIZES, SIZES[1:], strict=False):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        weights += [
            rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32),
            np.zeros(fan_out, np.float32),
        ]
    return weights


def forward(params, x):
    """The MLP's logits: ReLU between the dense layers."""
    import tensorflow as tf

    for i in range(0, len(params), 2):
        x = tf.matmul(x, params[i]) + params[i + 1]
        if i + 2 < len(params):
            x = tf.nn.relu(x)
    return x


def adam(var, grad, m, v, t):
    """One Adam update of `var`, its t-th, with slots m and v."""
    import tensorflow as tf

    m.assign(BETA1 * m + (1 - BETA1) * grad)
    v.assign(BETA2 * v + (1 - BETA2) * grad * grad)
    step = LEARNING_RATE * tf.sqrt(1 - BETA2**t) / (1 - BETA1**t)
    var.assign_sub(step * m / (tf.sqrt(v) + EPSILON))


def test_accuracy(params, data_dir):
    import numpy as np
    import tensorflow as tf

    x_test = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"))
    y_test = read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"))
    logits = forward(params, tf.constant(x_test.reshape(-1, 784), tf.float32) / 255.0)
    return float(np.mean(np.argmax(logits.numpy(), axis=1) == y_test))


def serve(cluster, job, index, threads):
    """Runs one tf.distribute.Server until killed; threads > 0 caps the threads
    of each op (one inter-op thread would deadlock the remote calls)."""
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads)
    server = tf.distribute.Server(
        tf.train.ClusterSpec(cluster),
        job_name=job,
        task_index=index,
        protocol="grpc",
        config=config,
        start=True,
    )
    server.join()


def coordinate(args, cluster):
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    x_train = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"))
    y_train = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))

    def dataset_fn():
        ds = tf.data.Dataset.from_tensor_slices((x_train.reshape(-1, 784), y_train))
        ds = ds.shuffle(60000).repeat()
        ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, tf.cast(y, tf.int32)))
        return ds.batch(args.batch_size, drop_remainder=True).prefetch(4)

    with strategy.scope():
        params, slots = [], []
        for value in initial_weights():
            var = tf.Variable(value)
            # Adam's slots live beside their variable, as TF's optimizers put them.
            with strategy.extended.colocate_vars_with(var):
                slots.append(
                    (
                        tf.Variable(tf.zeros_like(var)),
                        tf.Variable(tf.zeros_like(var)),
                        tf.Variable(0.0),
                    )
                )
            params.append(var)

    @tf.function
    def step_fn(iterator):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(
                        labels=y, logits=forward(params, x)
                    )
                )
            grads = tape.gradient(loss, params)
            for var, grad, (m, v, t) in zip(params, grads, slots, strict=True):
                t.assign_add(1.0)
                adam(var, grad, m, v, t)
            return loss

        x, y = next(iterator)
        return strategy.run(replica_fn, args=(x, y))

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    warmup = 10 * args.num_workers
    for _ in range(warmup):  # traces the function on every worker
        coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()
    start = time.time()
    for _ in range(args.steps):
        coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()
    seconds = time.time() - start

    accuracy = test_accuracy(params, args.data_dir)
    print("tf_pss_steps=%d" % args.steps)
    print("tf_pss_seconds=%.2f" % seconds)
    print("tf_pss_examples_per_sec=%.1f" % (args.steps * args.batch_size / seconds))
    print("tf_pss_test_accuracy=%.4f" % accuracy)
    print("tf_version=%s" % tf.__version__)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_ps", type=int, default=2)
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=938, help="timed steps, all workers together")
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="intra-op threads per server; 0: TensorFlow's default",
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # JSON [cluster, job, index, threads]
    args = parser.parse_args()
    if args.serve:
        serve(*json.loads(args.serve))
        return

    cluster, servers = start_cluster(args.num_ps, args.num_workers, args.threads)
    try:
        coordinate(args, cluster)
    finally:
        for server in servers:
            server.kill()
            server.wait()
        sys.stdout.flush()
        # Skips TensorFlow's teardown, which logs errors about the servers gone.
        os._exit(0)


if __name__ == "__main__":
    main()
