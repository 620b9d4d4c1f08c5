#!/usr/bin/env python3
"""The TensorFlow baseline of the CTR benchmark (bench/e2e_ctr_bench.sh).

Trains the CTR model of Fulcrum's worker (--model=ctr) with TensorFlow 2's
ParameterServerStrategy: 26 embedding tables of --embedding_dim floats,
each split over the parameter servers (row i on server i mod num_ps, its
Adagrad accumulator beside it), looked up per batch; the rows and 13
numeric features into an MLP of 64 and 32 ReLU units and two logits
(softmax cross-entropy); Adagrad (sparse: only the rows a batch touches)
on the tables, Adam on the MLP, both applied on the servers.
Asynchronous, as with the strategy and as Fulcrum's --mode=async.

The data follows Fulcrum's synthetic_ctr generator
(worker/data/synthetic_ctr.h): Zipf ids per field, a weight per id that
shrinks past rank 30, numeric weights, three pairs of interacting fields;
drawn here with NumPy from --seed (not the same draws as Fulcrum's, the same
distribution), with the AUC of the true probabilities on the test split.
Each worker reads the training examples from a file of fixed-size records.

Prints tf_ctr_examples_per_sec (steps after a warm-up over their wall time),
tf_ctr_test_auc and tf_ctr_ground_truth_auc.

  tf_pss_ctr_bench.py [--num_ps=2] [--num_workers=3] [--batch_size=256]
                      [--train_examples=300000] [--vocabulary=100000]
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["CUDA_VISIBLE_DEVICES"] = ""
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_pss_bench import start_cluster  # noqa: E402  (the same launch as the dense baseline)

FIELDS, NUMERIC, PAIRS = 26, 13, 3
HIDDEN = [64, 32]
RECORD_BYTES = NUMERIC * 4 + FIELDS * 8 + 4  # float32 numeric, int64 ranks, int32 label


def generate(args, count, rng, truth):
    """count examples: numeric, ranks per field, labels, true probabilities."""
    import numpy as np

    ranks = np.searchsorted(truth["cdf"], rng.random((count, FIELDS)))
    ranks = np.minimum(ranks, args.vocabulary - 1)
    numeric = rng.standard_normal((count, NUMERIC)).astype(np.float32)
    logit = -1.0 + truth["id_weight"][np.arange(FIELDS), ranks].sum(1) + numeric @ truth["numeric"]
    for p, (a, b) in enumerate(truth["pairs"]):
        logit += 0.5 * truth["left"][p][ranks[:, a]] * truth["right"][p][ranks[:, b]]
    prob = 1.0 / (1.0 + np.exp(-logit))
    labels = (rng.random(count) < prob).astype(np.int32)
    return numeric, ranks.astype(np.int64), labels, prob


def true_model(args, rng):
    import numpy as np

    ranks = np.arange(args.vocabulary, dtype=np.float64)
    keep = np.where(ranks < 30, 1.0, 30.0 / np.maximum(ranks, 1.0))
    cdf = np.cumsum((ranks + 1.0) ** -1.05)
    pairs = []
    for _ in range(PAIRS):
        a = int(rng.integers(FIELDS))
        pairs.append((a, int((a + 1 + rng.integers(FIELDS - 1)) % FIELDS)))
    return {
        "cdf": cdf / cdf[-1],
        "id_weight": 0.8 * keep * rng.standard_normal((FIELDS, args.vocabulary)),
        "numeric": 0.3 * rng.standard_normal(NUMERIC),
        "pairs": pairs,
        "left": [keep * rng.standard_normal(args.vocabulary) for _ in pairs],
        "right": [keep * rng.standard_normal(args.vocabulary) for _ in pairs],
    }


def write_records(path, numeric, ranks, labels):
    import numpy as np

    record = np.zeros(
        len(labels), dtype=[("x", "<f4", NUMERIC), ("ids", "<i8", FIELDS), ("y", "<i4")]
    )
    record["x"], record["ids"], record["y"] = numeric, ranks, labels
    record.tofile(path)


def auc(scores, labels):
    """The Mann-Whitney AUC, ties counting half."""
    import numpy as np

    values, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts  # rank - 1 of each value's first occurrence
    ranks = (first + (counts + 1) / 2.0)[inverse]
    pos = labels == 1
    n1, n0 = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def coordinate(args, cluster, train_path, test):
    import numpy as np
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    num_ps, width = args.num_ps, args.embedding_dim

    rng = np.random.default_rng(args.seed + 1)
    with strategy.scope():
        # Table f's shard s holds rows s, s + num_ps, ... ; created in turn,
        # the strategy places them round-robin over the servers.
        tables = []
        for _ in range(FIELDS):
            shards = []
            for s in range(num_ps):
                rows = (args.vocabulary - s + num_ps - 1) // num_ps
                var = tf.Variable(rng.uniform(-0.05, 0.05, (rows, width)).astype(np.float32))
                with strategy.extended.colocate_vars_with(var):
                    acc = tf.Variable(tf.fill([rows, width], 0.1))
                shards.append((var, acc))
            tables.append(shards)
        dense, slots = [], []
        sizes = [NUMERIC + FIELDS * width] + HIDDEN + [2]
        for fan_in, fan_out in zip(sizes, sizes[1:], strict=False):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            for value in (
                rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32),
                np.zeros(fan_out, np.float32),
            ):
                var = tf.Variable(value)
                with strategy.extended.colocate_vars_with(var):
                    slots.append(
                        (
                            tf.Variable(tf.zeros_like(var)),
                            tf.Variable(tf.zeros_like(var)),
                            tf.Variable(0.0),
                        )
                    )
                dense.append(var)

    def lookup(shards, ids):
        parts = tf.dynamic_partition(
            tf.range(tf.size(ids)), tf.cast(ids % num_ps, tf.int32), num_ps
        )
        rows = [tf.gather(shards[s][0], tf.gather(ids, parts[s]) // num_ps) for s in range(num_ps)]
        return tf.dynamic_stitch(parts, rows)

    def logits_of(x, ids):
        inputs = [x] + [lookup(tables[f], ids[:, f]) for f in range(FIELDS)]
        h = tf.concat(inputs, axis=1)
        for i in range(0, len(dense), 2):
            h = tf.matmul(h, dense[i]) + dense[i + 1]
            if i + 2 < len(dense):
                h = tf.nn.relu(h)
        return h

    def dataset_fn():
        ds = tf.data.FixedLengthRecordDataset(train_path, RECORD_BYTES).repeat()
        ds = ds.shuffle(4096).batch(args.batch_size, drop_remainder=True)

        def decode(raw):
            raw = tf.io.decode_raw(raw, tf.uint8)
            x = tf.bitcast(tf.reshape(raw[:, : NUMERIC * 4], [-1, NUMERIC, 4]), tf.float32)
            ids = tf.bitcast(
                tf.reshape(raw[:, NUMERIC * 4 : NUMERIC * 4 + FIELDS * 8], [-1, FIELDS, 8]),
                tf.int64,
            )
            y = tf.bitcast(tf.reshape(raw[:, -4:], [-1, 4]), tf.int32)
            return x, ids, y

        return ds.map(decode).prefetch(4)

    shard_vars = [var for shards in tables for var, _ in shards]
    shard_accs = [acc for shards in tables for _, acc in shards]

    @tf.function
    def step_fn(iterator):
        def replica_fn(x, ids, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(
                        labels=y, logits=logits_of(x, ids)
                    )
                )
            grads = tape.gradient(loss, dense + shard_vars)
            for var, grad, (m, v, t) in zip(dense, grads, slots, strict=False):
                t.assign_add(1.0)
                m.assign(0.9 * m + 0.1 * grad)
                v.assign(0.999 * v + 0.001 * grad * grad)
                rate = args.learning_rate * tf.sqrt(1 - 0.999**t) / (1 - 0.9**t)
                var.assign_sub(rate * m / (tf.sqrt(v) + 1e-7))
            for var, acc, grad in zip(shard_vars, shard_accs, grads[len(dense) :], strict=True):
                # Sparse Adagrad on the rows touched: each row's gradients summed.
                rows, index = tf.unique(grad.indices)
                values = tf.math.unsorted_segment_sum(grad.values, index, tf.size(rows))
                tf.raw_ops.ResourceSparseApplyAdagradV2(
                    var=var.handle,
                    accum=acc.handle,
                    lr=args.embedding_learning_rate,
                    epsilon=1e-7,
                    grad=values,
                    indices=rows,
                )
            return loss

        x, ids, y = next(iterator)
        return strategy.run(replica_fn, args=(x, ids, y))

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    warmup = 10 * args.num_workers
    for _ in range(warmup):  # traces the function on every worker
        coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()
    steps = args.train_examples // args.batch_size
    start = time.time()
    for _ in range(steps):
        coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()
    seconds = time.time() - start

    x_test, ids_test, y_test, prob_test = test
    logits = logits_of(tf.constant(x_test), tf.constant(ids_test)).numpy()
    print("tf_ctr_steps=%d" % steps)
    print("tf_ctr_seconds=%.2f" % seconds)
    print("tf_ctr_examples_per_sec=%.1f" % (steps * args.batch_size / seconds))
    print("tf_ctr_test_auc=%.4f" % auc(logits[:, 1] - logits[:, 0], y_test))
    print("tf_ctr_ground_truth_auc=%.4f" % auc(prob_test, y_test))
    print("tf_version=%s" % tf.__version__)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_ps", type=int, default=2)
    parser.add_argument("--num_workers", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument(
        "--train_examples",
        type=int,
        default=300000,
        help="examples trained on, all workers together, after the warm-up",
    )
    parser.add_argument("--test_examples", type=int, default=20000)
    parser.add_argument("--vocabulary", type=int, default=100000)
    parser.add_argument("--embedding_dim", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=0.002)
    parser.add_argument("--embedding_learning_rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    import numpy as np

    rng = np.random.default_rng(args.seed)
    truth = true_model(args, rng)
    work = tempfile.mkdtemp()
    train_path = os.path.join(work, "train.bin")
    write_records(train_path, *generate(args, args.train_examples, rng, truth)[:3])
    test = generate(args, args.test_examples, rng, truth)

    cluster, servers = start_cluster(args.num_ps, args.num_workers, 0)
    try:
        coordinate(args, cluster, train_path, test)
    finally:
        for server in servers:
            server.kill()
            server.wait()
        os.remove(train_path)
        os.rmdir(work)
        sys.stdout.flush()
        # Skips TensorFlow's teardown, which logs errors about the servers gone.
        os._exit(0)


if __name__ == "__main__":
    main()
