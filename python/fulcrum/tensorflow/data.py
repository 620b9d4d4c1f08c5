"""A worker's share of a tf.data pipeline or of Model.fit's arrays, dealt
as fulcrum.data deals: worker r of n takes the elements i with
i % n == r, and every worker as many."""

import numpy as np
import tensorflow as tf


class DistributedDataset:
    """What experimental_distribute_dataset and
    distribute_datasets_from_function return: iterating it begins an epoch,
    over this worker's share of that epoch (`share()` gives (shard, shards),
    asked of the servers each epoch so that a worker gone for good has its
    share dealt over the others)."""

    def __init__(self, share, dataset=None, dataset_fn=None):
        self._share = share
        self._dataset = dataset
        self._dataset_fn = dataset_fn

    def _epoch(self):
        shard, shards = self._share()
        if self._dataset_fn is not None:
            return self._dataset_fn(
                tf.distribute.InputContext(
                    num_input_pipelines=shards, input_pipeline_id=shard, num_replicas_in_sync=1
                )
            )
        return take_share(self._dataset, shard, shards)

    def __iter__(self):
        return iter(self._epoch())

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
