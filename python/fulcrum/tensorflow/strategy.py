"""fulcrum.tensorflow.ParameterServerStrategy: the tf.distribute strategy API
over Fulcrum's parameter servers. See the package's docstring."""

import atexit
import contextlib
import sys
import threading
import types
import weakref

import keras
import numpy as np
import tensorflow as tf

from fulcrum import _fulcrum
from fulcrum import checkpoints as _checkpoints
from fulcrum import client as _client
from fulcrum import data as _dealing
from fulcrum import specs as _specs
from fulcrum.tensorflow import data as _data
from fulcrum.tensorflow import optimizers as _optimizers

_open_scopes = []  # strategies whose scope() is open, innermost last
_owners = weakref.WeakKeyDictionary()  # Keras optimizer -> its strategy
_constructing = threading.local()  # depth of Keras optimizer __init__ calls


class ParameterServerStrategy:
    """Trains the program's Keras models and tf.Variables on Fulcrum's
    parameter servers: a stand-in for tf.distribute strategies.

    The cluster is found as the daemons find it (TF_CONFIG, else
    `cluster_spec`, a TF_CONFIG JSON file, else `ps_hosts` with
    `worker_id`), and the security settings from the environment the
    launcher and the container image set (fulcrum.environment()); `mode`
    defaults to the servers'. `partitioner` (fulcrum.min_size(...),
    fixed_shards, max_size) splits large variables over the servers.
    Other keyword arguments go to fulcrum.connect().

    Each process is one replica (num_replicas_in_sync is 1, as in
    TensorFlow's ParameterServerStrategy): its batches are its own, and in
    sync mode the servers apply the mean of the step's gradients over the
    workers. A Keras optimizer created under scope() runs on the servers;
    its apply_gradients pushes the gradients and pulls the new values into
    the variables, in one round trip per server. When the program ends
    cleanly its worker tells the servers it has finished (the chief also
    that the job is done); a program that dies lets its lease lapse.
    """

    def __init__(self, mode=None, partitioner=None, *, cluster_spec=None, client=None, **connect):
        env = _client.environment()
        if "cpu_threads" in env:
            _limit_threads(int(env["cpu_threads"]))
        self._client = client or _client.connect(mode=mode, cluster_spec=cluster_spec, **connect)
        self._client.start_heartbeats()
        self._partitioner = partitioner
        self._specs = {}  # variable name -> its spec
        self._names = {}  # id(variable) -> its name on the servers
        self._variables = {}  # name -> the variable
        self._epochs = 0  # distributed datasets' iterations begun
        self._checkpoints = None
        self._finished = False
        self._adopted = []  # the servers' optimizer specs of the adopted Keras optimizers
        self._table_anchors = set()  # id() of fulcrum.tensorflow.Embedding's anchors
        self._row_gradients = {}  # table -> [(ids, rows)] handed since the last push
        if self._client.is_chief and "checkpoint_dir" in env:
            self._checkpoints = _checkpoints.Checkpoints(
                self._client,
                env["checkpoint_dir"],
                every_secs=int(env.get("checkpoint_every_secs", 600)),
            )
        _install_hooks()
        _watch_exit(self)

    # -- The tf.distribute.Strategy API --------------------------------------
    @property
    def num_replicas_in_sync(self):
        """1: each worker's batches are its own step (TensorFlow's
        ParameterServerStrategy says the same)."""
        return 1

    @property
    def client(self):
        """The fulcrum.Client this strategy trains through."""
        return self._client

    @contextlib.contextmanager
    def scope(self):
        """Keras optimizers (and so Model.compile's) created inside run on
        the servers; Model.fit of a model compiled with one deals its data
        over the workers."""
        _open_scopes.append(self)
        try:
            yield self
        finally:
            _open_scopes.remove(self)

    def run(self, fn, args=(), kwargs=None):
        """Calls fn(*args, **kwargs) as this worker's replica (eagerly, or
        traced into the caller's tf.function) and returns its result."""
        with self.scope():
            return fn(*args, **(kwargs or {}))

    def reduce(self, reduce_op, value, axis=None):
        """`value` reduced over this process's replicas (one: it is this
        worker's own value, not a sum over the cluster's workers), and along
        `axis` if given, by SUM or MEAN."""
        op = getattr(reduce_op, "value", reduce_op)
        if str(op).upper() not in ("SUM", "MEAN"):
            raise ValueError("reduce_op must be tf.distribute.ReduceOp.SUM or MEAN, not %r" % op)
        if axis is None:
            return value
        if str(op).upper() == "SUM":
            return tf.reduce_sum(value, axis=axis)
        return tf.reduce_mean(value, axis=axis)

    def experimental_distribute_dataset(self, dataset, options=None):
        """This worker's share of `dataset` (a tf.data.Dataset of batches):
        each epoch (each iteration) worker r of n takes the batches i with
        i % n == r, as many as every other worker, re-dealt when the servers
        hold a worker gone for good."""
        return _data.DistributedDataset(self._share, dataset=dataset)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """dataset_fn(tf.distribute.InputContext) makes this worker's
        dataset; it is called again each epoch with the share of that epoch."""
        return _data.DistributedDataset(self._share, dataset_fn=dataset_fn)

    def _share(self):
        epoch, self._epochs = self._epochs, self._epochs + 1
        return _dealing.share(self._client, self._client.num_replicas, epoch)

    # -- The servers' side of a Keras optimizer ------------------------------
    def _adopt(self, optimizer):
        """Makes `optimizer` (a Keras optimizer just created under scope())
        apply its updates on the servers, or raises ValueError."""
        spec = _optimizers.server_optimizer(optimizer)
        _owners[optimizer] = self
        self._adopted.append(spec)

        def apply(opt, grads, trainable_variables=None):
            if trainable_variables is None:
                raise ValueError(
                    "%s runs on Fulcrum's servers: pass the variables with the gradients" % opt.name
                )
            self._apply(opt, spec, grads, trainable_variables)

        def apply_gradients(opt, grads_and_vars):
            grads_and_vars = list(grads_and_vars)
            apply(opt, [g for g, _ in grads_and_vars], [v for _, v in grads_and_vars])
            return opt.iterations

        object.__setattr__(optimizer, "apply", types.MethodType(apply, optimizer))
        object.__setattr__(
            optimizer, "apply_gradients", types.MethodType(apply_gradients, optimizer)
        )

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

    def _apply(self, optimizer, spec, grads, variables):
        pairs = [
            (g, v)
            for g, v in zip(grads, variables, strict=True)
            if g is not None and id(v) not in self._table_anchors
        ]
        if not pairs:  # only tables' rows (or nothing) to push
            tf.numpy_function(lambda: np.int64(self._push_rows() or 0), [], tf.int64, stateful=True)
            optimizer.iterations.assign_add(1)
            return
        variables = [v for _, v in pairs]
        names = self._bind(spec, variables)
        gradients = [tf.convert_to_tensor(g, dtype=tf.float32) for g, _ in pairs]
        values = tf.numpy_function(
            lambda *g: self._push_pull(names, g),
            gradients,
            [tf.float32] * len(names),
            stateful=True,
            name="fulcrum_push_pull",
        )
        if not isinstance(values, (list, tuple)):
            values = [values]  # numpy_function's one output comes alone
        for variable, value in zip(variables, values, strict=True):
            variable.assign(tf.ensure_shape(value, variable.shape))
        optimizer.iterations.assign_add(1)

    def _push_pull(self, names, gradients):
        grads = {
            name: np.ascontiguousarray(g, dtype=np.float32)
            for name, g in zip(names, gradients, strict=True)
        }
        out = {name: np.empty(grads[name].shape, np.float32) for name in names}
        self._push_rows()
        self._client.push_pull(grads, out)
        if self._checkpoints is not None:
            self._checkpoints.maybe_save(self._client.step, dict)
        return [out[name] for name in names]

    def _bind(self, spec, variables):
        """The servers' names of `variables`, creating those new to them on
        the servers: with the chief's values, which every worker then pulls."""
        names, new = [], []
        for v in variables:
            name = self._names.get(id(v))
            if name is None:
                name = self._name_of(v)
                if tf.as_dtype(v.dtype) != tf.float32:
                    raise TypeError(
                        "variable '%s' is %s; Fulcrum's servers hold float32" % (name, v.dtype)
                    )
                self._names[id(v)] = name
                self._variables[name] = v
                self._specs[name] = _specs.variable(
                    name, tuple(v.shape), spec, partitioner=self._partitioner
                )
                new.append(name)
            elif self._specs[name]["optimizer"] != spec:
                raise ValueError("variable '%s' is applied by two different optimizers" % name)
            names.append(name)
        if new:
            with tf.init_scope():
                self._create(new)
        return names

    def _name_of(self, variable):
        name = getattr(variable, "path", None) or variable.name.split(":")[0]
        unique, n = name, 1
        while unique in self._variables:
            unique, n = "%s_%d" % (name, n), n + 1
        return unique

    def _create(self, new):
        client, specs = self._client, list(self._specs.values())
        if client.is_chief:
            initial = {
                name: np.ascontiguousarray(self._variables[name].numpy(), dtype=np.float32)
                for name in new
            }
            client.create_variables(specs, initial_values=initial)
        else:
            client.wait_for_variables(new, timeout=120.0)
            client.create_variables(specs)
        # Every replica starts from the servers' values: the chief's, or
        # those of a checkpoint the servers restored.
        for name, value in client.pull(names=new).items():
            self._variables[name].assign(value)

    # -- The job's end -------------------------------------------------------
    def finish(self):
        """Tells the servers this worker has finished training (the chief:
        after a last checkpoint, that the job is done, so the servers exit).
        A program that returns cleanly does this at exit by itself; once:
        later calls do nothing."""
        if self._finished:
            return
        self._finished = True
        client = self._client
        client.finish()
        if client.is_chief:
            if self._checkpoints is not None:
                self._checkpoints.save(client.step, {})
            client.job_done("the chief's TensorFlow program finished")

    def _at_exit(self, crashed):
        if crashed:
            return  # the lease lapses: the servers judge this worker dead
        try:
            self.finish()
        except _fulcrum.Error as e:
            print(
                "fulcrum: could not tell the servers this worker finished: %s" % e,
                file=sys.stderr,
            )


def current(what):
    """The strategy whose scope() is open (the innermost); a ValueError
    saying that `what` needs one otherwise."""
    if not _open_scopes:
        raise ValueError("create %s under a fulcrum.tensorflow strategy's scope()" % what)
    return _open_scopes[-1]


def _limit_threads(n):
    try:
        tf.config.threading.set_intra_op_parallelism_threads(n)
        tf.config.threading.set_inter_op_parallelism_threads(n)
    except RuntimeError as e:  # TensorFlow has already started its pools
        print("fulcrum: cannot give TensorFlow %d threads: %s" % (n, e), file=sys.stderr)


# -- Hooks into Keras ----------------------------------------------------------
_hooks_installed = False


def _install_hooks():
    """Wraps the __init__ of Keras's optimizer classes, so that one created
    under a scope() is adopted by its strategy once fully constructed, and
    Model.fit, so that a model whose optimizer is adopted trains on its
    worker's share of the data."""
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    base = keras.optimizers.Optimizer
    classes = {base} | {
        c for c in vars(keras.optimizers).values() if isinstance(c, type) and issubclass(c, base)
    }
    for cls in classes:
        if "__init__" in vars(cls):
            cls.__init__ = _adopting(cls.__init__)
    keras.Model.fit = _distributing_fit(keras.Model.fit)


def _adopting(init):
    def __init__(self, *args, **kwargs):
        _constructing.depth = getattr(_constructing, "depth", 0) + 1
        try:
            init(self, *args, **kwargs)
        finally:
            _constructing.depth -= 1
        if _constructing.depth == 0 and _open_scopes:
            _open_scopes[-1]._adopt(self)

    __init__.__wrapped__ = init
    return __init__


def _distributing_fit(fit):
    def distributed_fit(model, x=None, y=None, *args, **kwargs):
        strategy = _owners.get(getattr(model, "optimizer", None))
        if strategy is not None:
            x, y = _data.share_for_fit(strategy._share(), x, y)
        return fit(model, x, y, *args, **kwargs)

    distributed_fit.__wrapped__ = fit
    distributed_fit.__doc__ = fit.__doc__
    return distributed_fit


_strategies = []
_crashed = []


def _watch_exit(strategy):
    """At a clean exit the strategy tells the servers its worker finished;
    after an uncaught exception it says nothing, so its lease lapses."""
    if not _strategies:
        previous = sys.excepthook

        def excepthook(kind, value, tb):
            _crashed.append(kind)
            previous(kind, value, tb)

        sys.excepthook = excepthook
        atexit.register(lambda: [s._at_exit(bool(_crashed)) for s in _strategies])
    _strategies.append(strategy)
