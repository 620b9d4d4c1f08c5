"""Variable and table specs, as the wire contract's messages in JSON form.

Each helper returns a plain dict of proto/tensor.proto's fields (VariableSpec,
EmbeddingTableSpec, InitializerSpec, OptimizerSpec, PartitionerSpec). The
native client parses them with protobuf's own JSON parser, so a misspelt
field or kind is an InvalidArgument naming it, and nothing here restates the
protocol's rules.
"""


def _message(kind, fields):
    message = {"kind": kind}
    message.update({k: v for k, v in fields.items() if v is not None})
    return message


# Initializers: every element is a function of (seed, its row), so a value
# does not depend on how the variable is sharded.
def zeros():
    return _message("ZEROS", {})


def constant(value):
    return _message("CONSTANT", {"value": value})


def random_uniform(minval=-0.05, maxval=0.05, seed=0):
    return _message("RANDOM_UNIFORM", {"minval": minval, "maxval": maxval, "seed": seed})


def random_normal(mean=0.0, stddev=0.05, seed=0):
    return _message("RANDOM_NORMAL", {"mean": mean, "stddev": stddev, "seed": seed})


def truncated_normal(mean=0.0, stddev=0.05, seed=0):
    return _message("TRUNCATED_NORMAL", {"mean": mean, "stddev": stddev, "seed": seed})


def glorot_uniform(seed=0):
    return _message("GLOROT_UNIFORM", {"seed": seed})


# Optimizers, applied on the servers. learning_rate_scaling: how a sync
# step's rate follows the gradients it averaged ("UNSCALED", "SQRT", "LINEAR").
def sgd(learning_rate, learning_rate_scaling=None):
    return _message(
        "SGD", {"learning_rate": learning_rate, "learning_rate_scaling": learning_rate_scaling}
    )


def momentum(learning_rate, momentum=0.9, nesterov=False, learning_rate_scaling=None):
    return _message(
        "MOMENTUM",
        {
            "learning_rate": learning_rate,
            "momentum": momentum,
            "nesterov": nesterov,
            "learning_rate_scaling": learning_rate_scaling,
        },
    )


def adagrad(
    learning_rate, initial_accumulator_value=None, epsilon=None, learning_rate_scaling=None
):
    return _message(
        "ADAGRAD",
        {
            "learning_rate": learning_rate,
            "initial_accumulator_value": initial_accumulator_value,
            "epsilon": epsilon,
            "learning_rate_scaling": learning_rate_scaling,
        },
    )


def adam(learning_rate=0.001, beta1=None, beta2=None, epsilon=None, learning_rate_scaling=None):
    return _message(
        "ADAM",
        {
            "learning_rate": learning_rate,
            "beta1": beta1,
            "beta2": beta2,
            "epsilon": epsilon,
            "learning_rate_scaling": learning_rate_scaling,
        },
    )


def ftrl(learning_rate, l1=0.0, l2=0.0, beta=0.0, initial_accumulator_value=None):
    return _message(
        "FTRL",
        {
            "learning_rate": learning_rate,
            "l1": l1,
            "l2": l2,
            "ftrl_beta": beta,
            "initial_accumulator_value": initial_accumulator_value,
        },
    )


# Partitioners, along axis 0, as TensorFlow's. A field left None takes the
# C++ library's default (CanonicalSpec in common/tensor.h), as an
# optimizer's unset hyperparameters take common/optimizer/spec.h's: the
# defaults live there alone.
def min_size(min_shard_bytes=None, max_shards=None):
    return _message("MIN_SIZE", {"min_shard_bytes": min_shard_bytes, "max_shards": max_shards})


def fixed_shards(num_shards):
    return _message("FIXED_SHARDS", {"num_shards": num_shards})


def max_size(max_shard_bytes, max_shards=0):
    return _message("MAX_SIZE", {"max_shard_bytes": max_shard_bytes, "max_shards": max_shards})


def _shape_of(shape_or_tensor):
    shape = getattr(shape_or_tensor, "shape", shape_or_tensor)
    return [int(d) for d in shape]


def variable(name, shape, optimizer, initializer=None, partitioner=None):
    """A VariableSpec: `shape` is a sequence or anything with .shape (a NumPy
    array, a torch tensor); float32 on the servers."""
    spec = {"name": name, "shape": _shape_of(shape), "dtype": "DT_FLOAT", "optimizer": optimizer}
    if initializer is not None:
        spec["initializer"] = initializer
    if partitioner is not None:
        spec["partitioner"] = partitioner
    return spec


def table(name, width, optimizer, initializer=None, max_rows=0, admit_after=0):
    """An EmbeddingTableSpec: rows of `width` floats keyed by int64 id; at
    most `max_rows` per server (0: no bound, else least recently used rows
    go); an id is stored at its `admit_after`-th push. A row never pushed
    reads as `initializer` makes it (a function of the table and id, the
    same on every server); without one, zeros."""
    spec = {
        "name": name,
        "width": int(width),
        "optimizer": optimizer,
        "max_rows": int(max_rows),
        "admit_after": int(admit_after),
    }
    if initializer is not None:
        spec["initializer"] = initializer
    return spec
