#!/usr/bin/env python3
"""TensorFlow's guide "Custom training with tf.distribute.Strategy" on Fulcrum.

This is the guide's program for Fashion-MNIST: a Keras CNN, an optimizer and
a loss created in strategy.scope(), a tf.data pipeline distributed with
experimental_distribute_dataset, a @tf.function step under tf.GradientTape
that calls optimizer.apply_gradients, and a loop of strategy.run and
strategy.reduce. One line differs from the guide: the one that makes the
strategy. Run it through the launcher, which gives every worker its
TF_CONFIG and security settings:

  local_cluster --num_ps=2 --num_workers=3 --mode=sync \\
      --worker_command="python3 examples/tf_custom_loop.py" -- --epochs=5

or by all-reduce, with no servers:

  local_cluster --num_ps=0 --num_workers=3 --strategy=multi_worker_mirrored \\
      --worker_command="python3 examples/tf_custom_loop.py" -- --epochs=5

Fashion-MNIST is read from Debian's dataset-fashion-mnist package (the guide
downloads it with tf.keras.datasets). --epochs, --train_examples and
--test_examples size the run; the launcher's own flags are ignored.
"""

import argparse
import os

import numpy as np
import tensorflow as tf

import fulcrum.data
import fulcrum.tensorflow

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--train_examples", type=int, default=0, help="The first N (0: all).")
parser.add_argument("--test_examples", type=int, default=0, help="The first N (0: all).")
parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
args, _ = parser.parse_known_args()  # the launcher's flags are not this program's

# The only line changed from the guide: tf.distribute.MirroredStrategy().
# from_environment() is the launcher's --strategy: ParameterServerStrategy()
# by default, MultiWorkerMirroredStrategy() with multi_worker_mirrored.
strategy = fulcrum.tensorflow.from_environment()

train, test = (
    fulcrum.data.load("fashion_mnist", split, data_dir=args.data_dir) for split in ("train", "test")
)
train_images = train.features.reshape(-1, 28, 28, 1)[: args.train_examples or None]
train_labels = train.labels[: args.train_examples or None]
test_images = test.features.reshape(-1, 28, 28, 1)[: args.test_examples or None]
test_labels = test.labels[: args.test_examples or None]

BUFFER_SIZE = len(train_images)
BATCH_SIZE_PER_REPLICA = 64
GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
EPOCHS = args.epochs

train_dataset = (
    tf.data.Dataset.from_tensor_slices((train_images, train_labels))
    .shuffle(BUFFER_SIZE)
    .batch(GLOBAL_BATCH_SIZE)
)
test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(
    GLOBAL_BATCH_SIZE
)
train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)


def create_model():
    regularizer = tf.keras.regularizers.L2(1e-5)
    return tf.keras.Sequential(
        [
            tf.keras.layers.Input((28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu", kernel_regularizer=regularizer),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(64, 3, activation="relu", kernel_regularizer=regularizer),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu", kernel_regularizer=regularizer),
            tf.keras.layers.Dense(10, kernel_regularizer=regularizer),
        ]
    )


with strategy.scope():
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE
    )

    def compute_loss(labels, predictions, model_losses):
        per_example_loss = loss_object(labels, predictions)
        loss = tf.nn.compute_average_loss(per_example_loss)
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    test_loss = tf.keras.metrics.Mean(name="test_loss")
    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")
    model = create_model()
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.001)


def train_step(inputs):
    images, labels = inputs
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = compute_loss(labels, predictions, model.losses)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))  # noqa: B905 (the guide's)
    train_accuracy.update_state(labels, predictions)
    return loss


def test_step(inputs):
    images, labels = inputs
    predictions = model(images, training=False)
    t_loss = loss_object(labels, predictions)
    test_loss.update_state(t_loss)
    test_accuracy.update_state(labels, predictions)


@tf.function
def distributed_train_step(dataset_inputs):
    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


@tf.function
def distributed_test_step(dataset_inputs):
    return strategy.run(test_step, args=(dataset_inputs,))


for epoch in range(EPOCHS):
    total_loss = 0.0
    num_batches = 0
    for x in train_dist_dataset:
        total_loss += distributed_train_step(x)
        num_batches += 1
    train_loss = total_loss / max(num_batches, 1)

    for x in test_dist_dataset:
        distributed_test_step(x)

    template = "Epoch {}, Loss: {}, Accuracy: {}, Test Loss: {}, Test Accuracy: {}"
    print(
        template.format(
            epoch + 1,
            float(train_loss),
            train_accuracy.result() * 100,
            test_loss.result(),
            test_accuracy.result() * 100,
        ),
        flush=True,
    )
    test_loss.reset_state()
    train_accuracy.reset_state()
    test_accuracy.reset_state()

# Not in the guide: this worker's accuracy on the whole test set, for the
# tests and the benchmark to read.
logits = model.predict(test_images, batch_size=1000, verbose=0)
print("final test accuracy %.4f" % np.mean(np.argmax(logits, 1) == test_labels), flush=True)
if os.environ.get("FULCRUM_SUMMARY_JSON"):
    import json

    with open(os.environ["FULCRUM_SUMMARY_JSON"], "w") as f:
        json.dump({"test_accuracy": float(np.mean(np.argmax(logits, 1) == test_labels))}, f)
