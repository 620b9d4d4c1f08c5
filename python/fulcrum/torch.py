"""fulcrum.torch: any torch.nn.Module as a parameter-server replica.

    import fulcrum, fulcrum.torch
    client = fulcrum.connect(mode="sync")
    replica = fulcrum.torch.Replica(model, client, fulcrum.sgd(0.05))
    for x, y in loader:
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        replica.step()        # gradients out, the servers' new values into the parameters

The module's trainable parameters become variables named as in
named_parameters(). The chief creates them with its own initial values; the
other workers wait until they exist, and every replica starts from the
servers' values. step() pushes each parameter's .grad (zeros for a parameter
that got none) straight from the tensor and pulls the new values straight
into the parameters, in one round trip per server: no copies in Python.
Parameters must be float32 CPU tensors. Buffers (BatchNorm statistics) stay
local to each replica.
"""

import torch

from fulcrum import specs as _specs


class Replica:
    """Wraps `module` for `client` (a fulcrum.Client); `optimizer` (e.g.
    fulcrum.sgd(0.1)) is applied on the servers; `partitioner` (e.g.
    fulcrum.min_size(...)) splits large parameters over them."""

    def __init__(self, module, client, optimizer, partitioner=None, wait_timeout=120.0):
        self.module = module
        self.client = client
        self._params = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        for name, p in self._params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError(
                    "parameter '%s' is %s on %s; fulcrum.torch takes float32 CPU "
                    "parameters" % (name, p.dtype, p.device)
                )
        variables = [
            _specs.variable(name, p.shape, optimizer, partitioner=partitioner)
            for name, p in self._params
        ]
        # Views sharing the parameters' storage: pulls write the parameters.
        self._values = {name: p.detach() for name, p in self._params}
        if client.is_chief:
            client.create_variables(variables, initial_values=self._values)
        else:
            client.wait_for_variables([name for name, _ in self._params], timeout=wait_timeout)
            client.create_variables(variables)
        client.pull(self._values)

    @property
    def values(self):
        """The parameters' tensors by variable name (sharing their storage)."""
        return dict(self._values)

    def _gradients(self):
        grads = {}
        for name, p in self._params:
            g = p.grad
            if g is None:
                g = torch.zeros_like(p)  # a parameter this step did not reach
            grads[name] = g.detach().contiguous()
        return grads

    def step(self):
        """After backward(): pushes the gradients and pulls the updated values
        into the parameters (in sync mode, once the step's mean is applied).
        Returns the push's fulcrum.PushStats."""
        with torch.no_grad():
            return self.client.push_pull(self._gradients(), self._values)

    def pull(self):
        """Pulls the servers' current values into the parameters."""
        with torch.no_grad():
            self.client.pull(self._values)

    def local_state(self):
        """What this replica keeps that the servers do not: the module's
        buffers (BatchNorm statistics), by name, for a checkpoint's state."""
        return {"buffer:" + name: b for name, b in self.module.named_buffers()}

    def load_local_state(self, state):
        """Copies the buffers of `state` (from local_state(), as a checkpoint
        gave it back) into the module's; entries of other names are ignored."""
        with torch.no_grad():
            for name, b in self.module.named_buffers():
                saved = state.get("buffer:" + name)
                if saved is not None:
                    b.copy_(torch.as_tensor(saved))
