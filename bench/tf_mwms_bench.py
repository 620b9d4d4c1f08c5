#!/usr/bin/env python3
"""TensorFlow's MultiWorkerMirroredStrategy, the baseline of Fulcrum's all-reduce.

Runs N worker processes on 127.0.0.1 (ports this script picks), each with
its TF_CONFIG and MultiWorkerMirroredStrategy, collectives by the RING
implementation, as TensorFlow's multi-worker tutorial does. Two modes:

  --mode=e2e        the Fashion-MNIST MLP of bench/e2e_bench.sh (784-256-128-10,
                    Glorot-uniform weights, zero biases, Adam 1e-3, batch per
                    worker), each worker on its shard; gradients averaged by an
                    all-reduce, Adam applied on every worker. Prints
                    tf_mwms_examples_per_sec (timed steps after a warm-up that
                    traces the step, all workers together) and
                    tf_mwms_test_accuracy.
  --mode=allreduce  the all-reduce alone: a float32 tensor of --bytes summed
                    over the workers, p50 of --iterations after a warm-up.
                    Prints tf_allreduce_<bytes>_n<workers>_p50_ms.

  tf_mwms_bench.py [--mode=e2e] [--num_workers=2] [--batch_size=64] [--steps=468]
  tf_mwms_bench.py --mode=allreduce --num_workers=4 --bytes=67108864 [--iterations=5]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from tf_pss_bench import adam, forward, free_ports, initial_weights, read_idx, test_accuracy

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["CUDA_VISIBLE_DEVICES"] = ""


def make_strategy(threads):
    import tensorflow as tf

    if threads > 0:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def all_reduce(args, strategy, index):
    import tensorflow as tf

    elements = args.bytes // 4

    @tf.function
    def reduce():
        return strategy.run(
            lambda: tf.distribute.get_replica_context().all_reduce(
                "sum", tf.ones([elements], tf.float32)
            )
        )

    for _ in range(2):  # traces, and forms the group
        reduce()
    times = []
    for _ in range(args.iterations):
        start = time.time()
        result = reduce()
        strategy.experimental_local_results(result)[0].numpy()
        times.append(time.time() - start)
    if index == 0:
        print(
            "tf_allreduce_%d_n%d_p50_ms=%.2f"
            % (args.bytes, args.num_workers, 1000 * statistics.median(times))
        )


def train(args, strategy, index):
    import tensorflow as tf

    x_train = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"))
    y_train = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))
    x_train = x_train.reshape(-1, 784)[index :: args.num_workers]
    y_train = y_train[index :: args.num_workers]
    ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000).repeat()
    ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, tf.cast(y, tf.int32)))
    iterator = iter(ds.batch(args.batch_size, drop_remainder=True).prefetch(4))

    with strategy.scope():
        params = [tf.Variable(value) for value in initial_weights()]
        slots = [
            (tf.Variable(tf.zeros_like(var)), tf.Variable(tf.zeros_like(var))) for var in params
        ]
        steps = tf.Variable(0.0)

    def apply(distribution, grads):  # cross-replica: every worker applies the same mean
        distribution.extended.update(steps, lambda s: s.assign_add(1.0))
        for var, grad, (m, v) in zip(params, grads, slots, strict=True):
            distribution.extended.update(var, adam, args=(grad, m, v, steps))

    @tf.function
    def step(x, y):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(
                        labels=y, logits=forward(params, x)
                    )
                )
            context = tf.distribute.get_replica_context()
            grads = context.all_reduce("mean", tape.gradient(loss, params))
            context.merge_call(apply, args=(grads,))
            return loss

        return strategy.run(replica_fn, args=(x, y))

    for _ in range(10):  # traces the step and forms the group
        step(*next(iterator))
    start = time.time()
    for _ in range(args.steps):
        step(*next(iterator))
    float(strategy.experimental_local_results(step(*next(iterator)))[0])
    seconds = time.time() - start
    if index == 0:
        accuracy = test_accuracy(params, args.data_dir)
        print(
            "tf_mwms_examples_per_sec=%.1f"
            % ((args.steps + 1) * args.batch_size * args.num_workers / seconds)
        )
        print("tf_mwms_test_accuracy=%.4f" % accuracy)
        print("tf_version=%s" % tf.__version__)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["e2e", "allreduce"], default="e2e")
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=468, help="timed steps of each worker")
    parser.add_argument("--bytes", type=int, default=64 << 20)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per worker")
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # JSON [hosts, index]
    args = parser.parse_args()
    if args.worker is None:
        hosts = ["127.0.0.1:%d" % port for port in free_ports(args.num_workers)]
        workers = [
            subprocess.Popen(
                [sys.executable, __file__] + sys.argv[1:] + ["--worker", json.dumps([hosts, i])]
            )
            for i in range(args.num_workers)
        ]
        sys.exit(max(w.wait() for w in workers))
    hosts, index = json.loads(args.worker)
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
    )
    strategy = make_strategy(args.threads)
    (all_reduce if args.mode == "allreduce" else train)(args, strategy, index)
    sys.stdout.flush()
    # Skips TensorFlow's teardown, which can hang on peers already gone.
    os._exit(0)


if __name__ == "__main__":
    main()
