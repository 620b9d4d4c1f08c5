"""A worker's share of a tf.data pipeline or of Model.fit's arrays, dealt
as fulcrum.data deals: worker r of n takes the elements i with
i % n == r, and every worker as many."""

import logging

import keras
import numpy as np
import tensorflow as tf

_log = logging.getLogger("fulcrum.tensorflow")


class DistributedDataset:
    """What experimental_distribute_dataset and
    distribute_datasets_from_function return. Iterating it begins an epoch,
    over this worker's share of that epoch, which the strategy deals
    (asking the cluster each epoch, so that a worker gone for good has its
    share dealt over the others).

    A restarted worker resumes where the job is: once an apply_gradients
    has run between two of its batches, the dataset is known to feed
    training, and its epochs skip the batches this worker trained before it
    (re)started (the strategy's _resumed; known for datasets of known
    length). A dataset that feeds no training (a test set) skips none."""

    def __init__(self, strategy, dataset=None, dataset_fn=None):
        self._strategy = strategy
        self._dataset = dataset
        self._dataset_fn = dataset_fn
        self._training = None  # unknown until an apply is seen between batches
        self._resumed = None  # the batches to skip over the epochs, once known
        self._epochs = 0  # iterations begun

    def _epoch(self):
        epoch, self._epochs = self._epochs, self._epochs + 1
        shard, shards = self._strategy._deal(epoch)
        if self._dataset_fn is not None:
            dataset = self._dataset_fn(
                tf.distribute.InputContext(
                    num_input_pipelines=shards, input_pipeline_id=shard, num_replicas_in_sync=1
                )
            )
        else:
            dataset = take_share(self._dataset, shard, shards)
        return dataset, epoch

    def __iter__(self):
        dataset, epoch = self._epoch()
        steps = int(dataset.cardinality())
        batches = iter(dataset)
        position = 0
        applied = None
        while True:
            if self._training is None and applied is not None:
                self._training = self._strategy._applied != applied
            if self._training and self._resumed is None and steps >= 0:
                self._resumed = self._strategy._resumed(steps) or 0
                if self._resumed:
                    _log.warning(
                        "the job is under way: this worker's training data resumes at its "
                        "batch %d (epoch %d, batch %d of %d)",
                        self._resumed,
                        self._resumed // steps + 1,
                        self._resumed % steps + 1,
                        steps,
                    )
            if self._training and self._resumed:
                # Batches of this epoch the job trained before this worker
                # (re)started.
                target = min(self._resumed - epoch * steps, steps)
                for _ in range(position, target):
                    next(batches, None)
                position = max(position, target)
            if steps >= 0 and position >= steps:
                return
            batch = next(batches, None)
            if batch is None:
                return
            position += 1
            applied = self._strategy._applied
            if self._training is not False:
                self._strategy._place = (epoch, position == steps)
            yield batch

    @property
    def element_spec(self):
        if self._dataset is not None:
            return self._dataset.element_spec
        return None


def take_share(dataset, shard, shards):
    """Elements i % shards == shard of `dataset`, cut to as many as every
    other shard gets when its length is known (sync steps need them all)."""
    mine = dataset.shard(shards, shard)
    length = int(dataset.cardinality())
    if length >= 0:
        mine = mine.take(length // shards)
    return mine


def steps_of(x, batch_size):
    """Batches per epoch of Model.fit's `x` (a dataset of known length, or
    arrays in batches of `batch_size`); None when unknown."""
    if isinstance(x, tf.data.Dataset):
        length = int(x.cardinality())
        return length if length > 0 else None
    first = x
    while isinstance(first, (list, tuple, dict)) and first:
        first = next(iter(first.values())) if isinstance(first, dict) else first[0]
    if isinstance(first, (np.ndarray, tf.Tensor)) and batch_size:
        return -(-len(first) // batch_size) or None
    return None


class FitDealing(keras.callbacks.Callback):
    """Model.fit's data on one worker, and where each of its steps lies: a
    callback of the fit, which the strategy's fit hook adds.

    The data is dealt once, by worker, for the whole fit (share_for_fit), so
    that every epoch has as many steps on every worker, as Keras expects. As
    each epoch begins the strategy is told it is dealt (a worker that joins
    a running all-reduce group learns from the members which epoch is its
    first), and each step's place in its epoch is counted from there."""

    def __init__(self, strategy, x, y, batch_size):
        super().__init__()
        self._strategy = strategy
        self.x, self.y = share_for_fit(strategy._deal(0), x, y)
        self.steps = steps_of(self.x, batch_size or (32 if y is not None else None))
        self._epoch, self._first = 0, 0

    def on_epoch_begin(self, epoch, logs=None):
        self._strategy._deal(epoch)
        self._epoch, self._first = epoch, self._strategy._applied

    def place(self):
        """(epoch, ends_epoch) of the step being applied."""
        done = self._strategy._applied - self._first
        return self._epoch, bool(self.steps) and done + 1 == self.steps


def share_for_fit(share, x, y):
    """Model.fit's `x` and `y`, cut to this worker's share (shard, shards):
    a tf.data.Dataset's batches, or NumPy arrays' and tensors' examples;
    anything else (a generator, a PyDataset) is the program's to shard."""
    shard, shards = share
    if isinstance(x, tf.data.Dataset):
        return take_share(x, shard, shards), y

    def cut(a):
        if a is None:
            return None
        if isinstance(a, dict):
            return {k: cut(v) for k, v in a.items()}
        if isinstance(a, (list, tuple)):
            return type(a)(cut(v) for v in a)
        if isinstance(a, (np.ndarray, tf.Tensor)):
            each = len(a) // shards
            return a[shard : shard + each * shards : shards]
        return a

    return cut(x), cut(y)
