"""fulcrum.tensorflow.Embedding: a Keras layer whose rows are a table of
Fulcrum's servers, keyed by any int64 id."""

import keras
import tensorflow as tf

from fulcrum import specs as _specs
from fulcrum.tensorflow import strategy as _strategy


class Embedding(keras.layers.Layer):
    """Rows of `output_dim` floats keyed by int64 ids >= 0, held by the
    servers as the table `table` (default: the layer's name): no
    vocabulary size and no hashing, and only the rows a batch uses travel.
    Create it under a strategy's scope(). A call pulls the batch's unique
    rows (one call per server); the gradient's rows are pushed, as sparse
    row pushes, by the next apply_gradients of the strategy's optimizer,
    before its dense gradients. The rows are updated by `optimizer` (a
    fulcrum spec: fulcrum.adagrad(0.05), fulcrum.ftrl(...); default: the
    one the servers run for the Keras optimizer, adopted under the scope,
    that this layer's model trains with) on the servers, which bound the
    table by `max_rows` per server (least recently used rows go; 0: no
    bound) and store an id at its `admit_after`-th push. A row never pushed
    reads as `initializer` (a fulcrum initializer spec; default
    fulcrum.random_uniform(-0.05, 0.05), a function of the table and the id
    alone) makes it.

    Input: int64 (or int32) ids of any shape; output: that shape plus
    (output_dim,). A plain keras.layers.Embedding under the scope is a
    dense variable instead: its whole [input_dim, output_dim] matrix is
    pushed and pulled every step, which suits small vocabularies only."""

    def __init__(
        self,
        output_dim,
        table=None,
        optimizer=None,
        initializer=None,
        max_rows=0,
        admit_after=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._strategy = _strategy.current("fulcrum.tensorflow.Embedding")
        if not self._strategy.tables:
            raise ValueError(
                "fulcrum.tensorflow.Embedding keeps its rows on parameter servers: use it "
                "under ParameterServerStrategy, not %s" % type(self._strategy).__name__
            )
        self.output_dim = int(output_dim)
        self.table = table or self.name
        self._optimizer = optimizer
        self._initializer = initializer or _specs.random_uniform(-0.05, 0.05)
        self._max_rows = int(max_rows)
        self._admit_after = int(admit_after)
        self._created = False

    def build(self, input_shape):
        # The anchor of the rows' gradient: a weight, so that the tape of a
        # custom loop or of Model.fit runs the lookup's gradient function,
        # which hands the rows' gradient to the strategy. It stays 0 and
        # never goes to the servers.
        self._anchor = self.add_weight(shape=(), initializer="zeros", name="row_gradients")
        self._strategy._table_anchors.add(id(self._anchor))
        self.built = True

    def _create_table(self):
        if self._created:
            return
        optimizer = self._optimizer or self._strategy._table_optimizer(self.table)
        self._strategy.client.create_tables(
            [
                _specs.table(
                    self.table,
                    self.output_dim,
                    optimizer,
                    initializer=self._initializer,
                    max_rows=self._max_rows,
                    admit_after=self._admit_after,
                )
            ]
        )
        self._created = True

    def _pull(self, ids):
        self._create_table()
        return self._strategy.client.pull_rows(self.table, ids)

    def call(self, ids):
        ids = tf.cast(ids, tf.int64)
        unique, index = tf.unique(tf.reshape(ids, [-1]))
        rows = self._lookup(unique, self._anchor)
        return tf.reshape(tf.gather(rows, index), tf.concat([tf.shape(ids), [self.output_dim]], 0))

    def _lookup(self, unique, anchor):
        width, strategy, table = self.output_dim, self._strategy, self.table

        @tf.custom_gradient
        def lookup(unique, anchor):
            rows = tf.numpy_function(self._pull, [unique], tf.float32, stateful=True)
            rows = tf.ensure_shape(rows, [None, width])

            def gradient(rows_gradient):
                handed = tf.numpy_function(
                    lambda i, g: strategy._hand_rows(table, i, g),
                    [unique, tf.convert_to_tensor(rows_gradient, tf.float32)],
                    tf.int64,
                    stateful=True,
                )
                with tf.control_dependencies([handed]):
                    return None, tf.zeros_like(anchor)

            return rows, gradient

        return lookup(unique, anchor)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "output_dim": self.output_dim,
                "table": self.table,
                "max_rows": self._max_rows,
                "admit_after": self._admit_after,
            }
        )
        return config
