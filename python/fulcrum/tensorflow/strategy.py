"""The tf.distribute strategy API that fulcrum.tensorflow's strategies share,
and its hooks into Keras. See the package's docstring."""

import atexit
import contextlib
import logging
import sys
import threading
import types
import weakref

import keras
import numpy as np
import tensorflow as tf

from fulcrum import _fulcrum
from fulcrum import client as _client
from fulcrum import specs as _specs
from fulcrum.tensorflow import data as _data
from fulcrum.tensorflow import optimizers as _optimizers

_log = logging.getLogger("fulcrum.tensorflow")

_open_scopes = []  # strategies whose scope() is open, innermost last
_owners = weakref.WeakKeyDictionary()  # Keras optimizer -> its strategy
_specs_of = weakref.WeakKeyDictionary()  # Keras optimizer -> its fulcrum optimizer spec
_constructing = threading.local()  # depth of Keras optimizer __init__ calls


class Strategy:
    """What fulcrum.tensorflow's strategies share: the tf.distribute API the
    guide uses, Keras optimizers adopted under scope(), variables bound at
    their optimizer's first apply_gradients, datasets dealt over the
    workers, and the job's end. A subclass says where the variables live:
    _create(new) makes them there and loads their first values into them,
    _exchange(names, gradients) applies a step's gradients and returns the
    new values, _deal(epoch) gives a share of the data, _resumed(steps)
    the batches this worker trained before it (re)started, _worker() this
    worker's (id, the number of workers), and _end() what a clean exit
    tells the cluster."""

    tables = False  # whether fulcrum.tensorflow.Embedding layers can live here

    def __init__(self, partitioner=None):
        env = _client.environment()
        if "cpu_threads" in env:
            _limit_threads(int(env["cpu_threads"]))
        self._env = env
        self._partitioner = partitioner
        self._specs = {}  # variable name -> its spec
        self._names = {}  # id(variable) -> its name
        self._variables = {}  # name -> the variable
        # Where the batch of the next step lies: (epoch, whether it ends the
        # epoch), as the training data's iteration says (an all-reduce
        # group's joiner learns from it where its data begins).
        self._place = (0, False)
        self._fit = None  # the running Model.fit's data.FitDealing
        self._applied = 0  # steps applied by this process
        self._finished = False
        self._adopted = []  # the servers' optimizer specs of the adopted Keras optimizers
        _install_hooks()
        _watch_exit(self)

    # -- The tf.distribute.Strategy API --------------------------------------
    @property
    def num_replicas_in_sync(self):
        """1: each worker's batches are its own step (TensorFlow's
        ParameterServerStrategy says the same); the workers' gradients of a
        step are averaged."""
        return 1

    @property
    def worker_id(self):
        """This worker's replica id: the chief is 0."""
        return self._worker()[0]

    @property
    def num_workers(self):
        """The job's training workers, the chief included."""
        return self._worker()[1]

    @property
    def is_chief(self):
        return self.worker_id == 0

    @contextlib.contextmanager
    def scope(self):
        """Keras optimizers (and so Model.compile's) created inside apply
        their updates through this strategy; Model.fit of a model compiled
        with one deals its data over the workers."""
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
        op = str(getattr(reduce_op, "value", reduce_op)).upper()
        if op not in ("SUM", "MEAN"):
            raise ValueError("reduce_op must be tf.distribute.ReduceOp.SUM or MEAN, not %r" % op)
        if axis is None:
            return value
        if op == "SUM":
            return tf.reduce_sum(value, axis=axis)
        return tf.reduce_mean(value, axis=axis)

    def experimental_distribute_dataset(self, dataset, options=None):
        """This worker's share of `dataset` (a tf.data.Dataset of batches):
        each epoch (each iteration) worker r of n takes the batches i with
        i % n == r, as many as every other worker, re-dealt when a worker
        is gone for good; a restarted worker's training dataset resumes
        where the job is."""
        return _data.DistributedDataset(self, dataset=dataset)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """dataset_fn(tf.distribute.InputContext) makes this worker's
        dataset; it is called again each epoch with the share of that epoch."""
        return _data.DistributedDataset(self, dataset_fn=dataset_fn)

    def _step_place(self):
        """(epoch, ends_epoch) of the step being applied."""
        return self._place if self._fit is None else self._fit.place()

    def _bound_before_steps(self):
        """Model.fit bound the model's variables before its first batch."""

    # -- Keras optimizers --------------------------------------------------
    def _adopt(self, optimizer):
        """Makes `optimizer` (a Keras optimizer just created under scope())
        apply its updates through this strategy, or raises ValueError."""
        spec = _optimizers.server_optimizer(optimizer)
        _owners[optimizer] = self
        _specs_of[optimizer] = spec
        self._adopted.append(spec)

        def apply(opt, grads, trainable_variables=None):
            if trainable_variables is None:
                raise ValueError(
                    "%s runs on Fulcrum: pass the variables with the gradients" % opt.name
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

    def _trained(self, variables):
        """Those of `variables` whose values this strategy keeps."""
        return list(variables)

    def _dense(self, grads, variables):
        """The (gradient, variable) pairs that go to _exchange."""
        kept = {id(v) for v in self._trained(variables)}
        return [
            (g, v) for g, v in zip(grads, variables, strict=True) if g is not None and id(v) in kept
        ]

    def _apply(self, optimizer, spec, grads, variables):
        pairs = self._dense(grads, variables)
        if not pairs:  # nothing dense: only what _exchange sends anyway
            tf.numpy_function(lambda: self._step([], []), [], [], stateful=True)
            optimizer.iterations.assign_add(1)
            return
        variables = [v for _, v in pairs]
        names = self._bind(spec, variables)
        gradients = [tf.convert_to_tensor(g, dtype=tf.float32) for g, _ in pairs]
        values = tf.numpy_function(
            lambda *g: self._step(names, g),
            gradients,
            [tf.float32] * len(names),
            stateful=True,
            name="fulcrum_step",
        )
        if not isinstance(values, (list, tuple)):
            values = [values]  # numpy_function's one output comes alone
        for variable, value in zip(variables, values, strict=True):
            variable.assign(tf.ensure_shape(value, variable.shape))
        optimizer.iterations.assign_add(1)

    def _step(self, names, gradients):
        grads = {
            name: np.ascontiguousarray(g, dtype=np.float32)
            for name, g in zip(names, gradients, strict=True)
        }
        values = self._exchange(names, grads)
        self._applied += 1
        return values

    def _bind(self, spec, variables):
        """The names of `variables`, making those new to this strategy
        (_create): the chief's values are every worker's first."""
        names, new = [], []
        for v in variables:
            name = self._names.get(id(v))
            if name is None:
                name = self._name_of(v)
                if tf.as_dtype(v.dtype) != tf.float32:
                    raise TypeError("variable '%s' is %s; Fulcrum holds float32" % (name, v.dtype))
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

    def _initial_values(self, names):
        return {
            name: np.ascontiguousarray(self._variables[name].numpy(), dtype=np.float32)
            for name in names
        }

    def _load(self, values):
        for name, value in values.items():
            self._variables[name].assign(value)

    # -- The job's end -------------------------------------------------------
    def finish(self):
        """Tells the cluster this worker has finished training (with
        parameter servers, the chief also says the job is done, so they
        exit). A program that returns cleanly does this at exit by itself;
        once: later calls do nothing."""
        if not self._finished:
            self._finished = True
            self._end()

    def _at_exit(self, crashed):
        if crashed:
            return  # the lease lapses: the cluster judges this worker dead
        try:
            self.finish()
        except _fulcrum.Error as e:
            print(
                "fulcrum: could not tell the cluster this worker finished: %s" % e, file=sys.stderr
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
        if strategy is None:
            return fit(model, x, y, *args, **kwargs)
        dealing = _data.FitDealing(strategy, x, y, kwargs.get("batch_size"))
        x, y = dealing.x, dealing.y
        kwargs["callbacks"] = [dealing, *_without_backups(kwargs.get("callbacks") or [])]
        steps = dealing.steps
        if steps and model.built and model.trainable_variables:
            # Bound before fit begins, so that a restarted worker knows
            # where the job is and resumes at that epoch.
            spec = _specs_of[model.optimizer]
            with tf.init_scope():
                strategy._bind(spec, strategy._trained(model.trainable_variables))
            strategy._bound_before_steps()
            resumed = strategy._resumed(steps) or 0
            if resumed and "initial_epoch" not in kwargs:
                kwargs["initial_epoch"] = min(resumed // steps, kwargs.get("epochs", 1))
        strategy._fit = dealing
        try:
            return fit(model, x, y, *args, **kwargs)
        finally:
            strategy._fit = None

    distributed_fit.__wrapped__ = fit
    distributed_fit.__doc__ = fit.__doc__
    return distributed_fit


def _without_backups(callbacks):
    """`callbacks` (a list) without Keras's BackupAndRestore, whose work Fulcrum
    does: a restarted worker resumes at the job's epoch from the servers'
    values (or the group's), and the servers' checkpoints outlive the
    whole job's restart. A backup of one worker's local copy would only
    restore older values over them."""
    kept = [c for c in callbacks if not isinstance(c, keras.callbacks.BackupAndRestore)]
    if len(kept) < len(callbacks):
        _log.warning(
            "BackupAndRestore is left out: a restarted worker resumes at the job's epoch "
            "from the cluster's values, and the servers' checkpoints (--checkpoint_dir) "
            "keep the job over a restart of all of it"
        )
    return kept


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
