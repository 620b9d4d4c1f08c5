"""A Keras optimizer as the servers' optimizer: its kind and hyperparameters
as a fulcrum optimizer spec, or a ValueError naming what the servers would
not honour."""

import keras

from fulcrum import specs as _specs

SUPPORTED = (
    "keras.optimizers.SGD (with momentum and nesterov), Adam, Adagrad and Ftrl, "
    "with a constant learning rate"
)

# Keras options the servers' optimizers have no counterpart for, with the
# value that means "off".
_UNSUPPORTED_OPTIONS = {
    "weight_decay": (None, 0, 0.0),
    "clipnorm": (None,),
    "clipvalue": (None,),
    "global_clipnorm": (None,),
    "use_ema": (False,),
    "loss_scale_factor": (None,),
    "gradient_accumulation_steps": (None,),
}


def _refuse(optimizer, what):
    raise ValueError(
        "%s (%s) cannot run on Fulcrum's servers: %s. They apply %s"
        % (type(optimizer).__name__, optimizer.name, what, SUPPORTED)
    )


def server_optimizer(optimizer):
    """The fulcrum optimizer spec (fulcrum.adam(...), ...) that applies
    `optimizer`'s updates on the servers, with the same hyperparameters; a
    ValueError naming the optimizer, or the option, that they would not
    honour. The learning rate is the one of the mean gradient (sync steps:
    UNSCALED, as Keras uses it)."""
    config = optimizer.get_config()
    for option, off in _UNSUPPORTED_OPTIONS.items():
        if config.get(option) not in off:
            _refuse(optimizer, "%s=%r is not applied there" % (option, config[option]))
    rate = config["learning_rate"]
    if isinstance(
        getattr(optimizer, "_learning_rate", None), keras.optimizers.schedules.LearningRateSchedule
    ) or not isinstance(rate, (int, float)):
        _refuse(optimizer, "a learning-rate schedule (%r) is not followed there" % (rate,))
    rate = float(rate)
    kind = type(optimizer)
    if kind is keras.optimizers.SGD:
        if config["momentum"] == 0:
            return _specs.sgd(rate, learning_rate_scaling="UNSCALED")
        return _specs.momentum(
            rate, config["momentum"], bool(config["nesterov"]), learning_rate_scaling="UNSCALED"
        )
    if kind is keras.optimizers.Adam:
        if config["amsgrad"]:
            _refuse(optimizer, "amsgrad=True is not applied there")
        return _specs.adam(
            rate,
            config["beta_1"],
            config["beta_2"],
            config["epsilon"],
            learning_rate_scaling="UNSCALED",
        )
    if kind is keras.optimizers.Adagrad:
        return _specs.adagrad(
            rate,
            config["initial_accumulator_value"],
            config["epsilon"],
            learning_rate_scaling="UNSCALED",
        )
    if kind is keras.optimizers.Ftrl:
        if config["learning_rate_power"] != -0.5:
            _refuse(optimizer, "learning_rate_power must be -0.5 (FTRL-Proximal)")
        if config["l2_shrinkage_regularization_strength"] != 0:
            _refuse(optimizer, "l2_shrinkage_regularization_strength is not applied there")
        return _specs.ftrl(
            rate,
            config["l1_regularization_strength"],
            config["l2_regularization_strength"],
            config["beta"],
            config["initial_accumulator_value"],
        )
    _refuse(optimizer, "the servers do not implement it")
