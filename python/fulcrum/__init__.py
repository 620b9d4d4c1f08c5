"""Fulcrum: train NumPy and PyTorch models on Fulcrum's parameter servers.

    import fulcrum
    client = fulcrum.connect(mode="sync")   # from TF_CONFIG, as the daemons
    client.create_variables([fulcrum.variable("w", (784, 10), fulcrum.adam(0.001))])

fulcrum.data deals a training set over the job's workers; fulcrum.torch
wraps a torch.nn.Module (import it explicitly: it needs torch).
Errors are fulcrum.Error subclasses named after gRPC status codes
(fulcrum.Unavailable, fulcrum.InvalidArgument, ...), carrying the message of
whoever refused the call. See docs/python.md.
"""

from fulcrum import collective, data
from fulcrum._fulcrum import (  # the error classes
    Aborted,
    AlreadyExists,
    Cancelled,
    DataLoss,
    DeadlineExceeded,
    Error,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
)
from fulcrum.checkpoints import Checkpoints, load_checkpoint
from fulcrum.client import Client, Future, PushStats, connect
from fulcrum.specs import (
    adagrad,
    adam,
    constant,
    fixed_shards,
    ftrl,
    glorot_uniform,
    max_size,
    min_size,
    momentum,
    random_normal,
    random_uniform,
    sgd,
    table,
    truncated_normal,
    variable,
    zeros,
)

__version__ = "0.1.0"

__all__ = [
    "Aborted",
    "AlreadyExists",
    "Cancelled",
    "DataLoss",
    "DeadlineExceeded",
    "Error",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "Checkpoints",
    "Client",
    "Future",
    "PushStats",
    "connect",
    "load_checkpoint",
    "collective",
    "data",
    "adagrad",
    "adam",
    "constant",
    "fixed_shards",
    "ftrl",
    "glorot_uniform",
    "max_size",
    "min_size",
    "momentum",
    "random_normal",
    "random_uniform",
    "sgd",
    "table",
    "truncated_normal",
    "variable",
    "zeros",
]
