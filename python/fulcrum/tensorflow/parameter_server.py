"""fulcrum.tensorflow.ParameterServerStrategy: the variables on Fulcrum's
parameter servers, the optimizer applied there."""

import numpy as np

from fulcrum import checkpoints as _checkpoints
from fulcrum import client as _client
from fulcrum import data as _dealing
from fulcrum.tensorflow import strategy as _strategy


class ParameterServerStrategy(_strategy.Strategy):
    """Trains the program's Keras models and tf.Variables on Fulcrum's
    parameter servers: a stand-in for tf.distribute strategies.

    The cluster is found as the daemons find it (TF_CONFIG, else
    `cluster_spec`, a TF_CONFIG JSON file, else `ps_hosts` with
    `worker_id`, else the container entrypoint's variables), and the
    security settings from the environment the launcher and the container
    image set (fulcrum.client.environment()); `mode` defaults to the
    servers'. `partitioner` (fulcrum.min_size(...), fixed_shards, max_size)
    splits large variables over the servers. Other keyword arguments go to
    fulcrum.connect().

    Each process is one replica (num_replicas_in_sync is 1, as in
    TensorFlow's ParameterServerStrategy): its batches are its own, and in
    sync mode the servers apply the mean of the step's gradients over the
    workers. A Keras optimizer created under scope() runs on the servers;
    its apply_gradients pushes the gradients and pulls the new values into
    the variables, in one round trip per server. When the program ends
    cleanly its worker tells the servers it has finished (the chief also
    that the job is done); a program that dies lets its lease lapse.
    """

    tables = True

    def __init__(self, mode=None, partitioner=None, *, cluster_spec=None, client=None, **connect):
        super().__init__(partitioner)
        self._client = client or _client.connect(mode=mode, cluster_spec=cluster_spec, **connect)
        # The job is under way already when the servers know this worker
        # (it restarted) or restored a checkpoint, as the C++ worker judges;
        # a server lost for good is not asked (its entry is empty).
        worker = self._client.worker_id
        self._resuming = worker >= 0 and any(
            int(server.get("restored_step", -1)) >= 0
            or any(
                w.get("worker_id") == worker and w.get("seen") for w in server.get("workers", [])
            )
            for server in self._client.describe()
            if _client.was_asked(server)
        )
        self._resume_batches = 0
        self._client.start_heartbeats()
        self._table_anchors = set()  # id() of fulcrum.tensorflow.Embedding's anchors
        self._row_gradients = {}  # table -> [(ids, rows)] handed since the last push
        self._checkpoints = None
        env = self._env
        if self._client.is_chief and "checkpoint_dir" in env:
            self._checkpoints = _checkpoints.Checkpoints(
                self._client,
                env["checkpoint_dir"],
                every_steps=int(env.get("checkpoint_every_steps", 0)),
                every_secs=int(env.get("checkpoint_every_secs", 600)),
            )

    @property
    def client(self):
        """The fulcrum.Client this strategy trains through."""
        return self._client

    def _worker(self):
        return self._client.worker_id, self._client.num_replicas

    def _deal(self, epoch):
        return _dealing.share(self._client, self._client.num_replicas, epoch)

    def _resumed(self, steps_per_epoch):
        return self._resume_batches

    def _create(self, new):
        client, specs = self._client, list(self._specs.values())
        if client.is_chief:
            client.create_variables(specs, initial_values=self._initial_values(new))
        else:
            client.wait_for_variables(new, timeout=120.0)
            client.create_variables(specs)
        # Every replica starts from the servers' values: the chief's, or
        # those of a checkpoint the servers restored.
        self._load(client.pull(names=new))
        if self._resuming and not self._resume_batches:
            # Where the job was before this worker's first step.
            self._resume_batches = client.resumed_batches()

    def _exchange(self, names, grads):
        self._push_rows()
        if not names:
            return []
        out = {name: np.empty(grads[name].shape, np.float32) for name in names}
        self._client.push_pull(grads, out)
        if self._checkpoints is not None:
            self._checkpoints.maybe_save(self._client.step, dict)
        return [out[name] for name in names]

    def _end(self):
        client = self._client
        client.finish()
        if client.is_chief:
            if self._checkpoints is not None:
                self._checkpoints.save(client.step, {})
            client.job_done("the chief's TensorFlow program finished")

    # -- Embedding tables ----------------------------------------------------
    def _trained(self, variables):
        # An Embedding's anchor is not kept: its rows go as row pushes.
        return [v for v in variables if id(v) not in self._table_anchors]

    def _table_optimizer(self, table):
        if not self._adopted:
            raise ValueError(
                "table '%s': give its optimizer (fulcrum.adagrad(...)), or create the Keras "
                "optimizer under the scope before the layer's first call" % table
            )
        return self._adopted[-1]

    def _hand_rows(self, table, ids, rows):
        """An Embedding's gradient rows, pushed by the next apply."""
        self._row_gradients.setdefault(table, []).append((ids.copy(), rows.copy()))
        return np.int64(len(ids))

    def _push_rows(self):
        if not self._row_gradients:
            return
        handed, self._row_gradients = self._row_gradients, {}
        ids = {t: np.concatenate([i for i, _ in parts]) for t, parts in handed.items()}
        rows = {t: np.concatenate([g for _, g in parts]) for t, parts in handed.items()}
        self._client.push_tables(ids, rows)
