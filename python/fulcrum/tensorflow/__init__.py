"""fulcrum.tensorflow: TensorFlow and Keras programs on Fulcrum's parameter
servers, with the one line of TensorFlow's distribution guide changed.

    strategy = fulcrum.tensorflow.ParameterServerStrategy()   # was tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([...])
        optimizer = tf.keras.optimizers.Adam(0.001)           # runs on the servers
    dist_dataset = strategy.experimental_distribute_dataset(dataset)

    @tf.function
    def train_step(inputs):
        ...
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    for x in dist_dataset:
        loss = strategy.reduce(tf.distribute.ReduceOp.SUM,
                               strategy.run(train_step, args=(x,)), axis=None)

Model.compile under the scope, then Model.fit, trains the same way.
fulcrum.tensorflow.MultiWorkerMirroredStrategy() trains the same programs
by all-reduce among the workers, with no servers (fulcrum.collective). The
cluster and its security settings come from TF_CONFIG and the environment
that local_cluster --worker_command, the container image and the Kubernetes
manifests give a program: no flags to parse. TensorFlow (tensorflow-cpu
2.17 or later, with Keras 3) is an optional dependency: `import fulcrum`
does not need it, this module does. See docs/tensorflow.md.
"""

from fulcrum.tensorflow.callbacks import Throughput
from fulcrum.tensorflow.layers import Embedding
from fulcrum.tensorflow.mirrored import MultiWorkerMirroredStrategy
from fulcrum.tensorflow.optimizers import server_optimizer
from fulcrum.tensorflow.parameter_server import ParameterServerStrategy


def from_environment(**kwargs):
    """The strategy the launcher (--strategy) or the deployment chose, as
    $FULCRUM_STRATEGY says: ParameterServerStrategy (parameter_server, the
    default) or MultiWorkerMirroredStrategy (multi_worker_mirrored), made
    with `kwargs`. One line that runs a program under either."""
    from fulcrum import client

    name = client.environment().get("strategy", "parameter_server")
    strategies = {
        "parameter_server": ParameterServerStrategy,
        "multi_worker_mirrored": MultiWorkerMirroredStrategy,
    }
    if name not in strategies:
        raise ValueError(
            "FULCRUM_STRATEGY=%s: one of %s (mirrored, one worker's local replicas, is the "
            "C++ worker's)" % (name, ", ".join(strategies))
        )
    return strategies[name](**kwargs)


__all__ = [
    "Embedding",
    "from_environment",
    "MultiWorkerMirroredStrategy",
    "ParameterServerStrategy",
    "server_optimizer",
    "Throughput",
]
