"""fulcrum.checkpoints: a Python chief's checkpoints of its job.

    checkpoints = fulcrum.Checkpoints(client, "/shared/ckpt", every_secs=600)
    state = checkpoints.restored()          # None on a fresh job
    if state:
        torch.set_rng_state(state["rng"])
    for batch in dealer:
        ...
        checkpoints.maybe_save(client.step, lambda: {"rng": torch.get_rng_state()})
    checkpoints.save(client.step, {...})   # the job's last state, before job_done

They are the C++ chief's checkpoints, written by the same code: every
server writes its shards (values, optimizer slots, versions) to its own
checksummed file, then the chief writes the manifest that makes the
checkpoint complete, and the newest `keep` are kept. The program's own
state goes into the manifest: a dict of names to NumPy arrays, torch tensors
(on the CPU) and anything JSON can hold (the epoch, a generator's state).
After a restart the servers restore the newest complete checkpoint by
themselves; restored() gives back the state saved with it.
"""

import json

import numpy as np

from fulcrum import _fulcrum


class Checkpoints:
    """The chief's checkpoints into `directory`, the servers'
    --checkpoint_dir (shared with them): due every `every_steps` steps or
    `every_secs` seconds (0: not by that measure), keeping the newest
    `keep` complete ones."""

    def __init__(self, client, directory, every_steps=0, every_secs=0, keep=5):
        if not client.is_chief:
            raise _fulcrum.FailedPrecondition(
                "only the chief (worker 0) checkpoints the job; worker %d does not"
                % client.worker_id
            )
        self._native = _fulcrum.Checkpoints(
            client._native, str(directory), int(every_steps), int(every_secs), int(keep)
        )
        self.directory = str(directory)

    def restored(self):
        """The state saved with the checkpoint the servers restored from when
        they started, decoded; None when they restored none (a fresh job, or
        servers that came back from their final files alone)."""
        raw = self._native.restored_state()
        if raw is None:
            return None
        return {name: _decode(name, value) for name, value in raw.items()}

    def due(self, step):
        """Whether a checkpoint is due at `step`."""
        return self._native.due(int(step))

    def save(self, step, state=None):
        """Checkpoint `step` now with `state` ({name: value}). Raises the
        reason when it fails; the previous complete checkpoint stays valid."""
        encoded = {str(name): _encode(name, value) for name, value in (state or {}).items()}
        self._native.save(int(step), encoded)

    def maybe_save(self, step, state=None):
        """save(step, state) when due; `state` may be a function returning it,
        called only then. True when it saved."""
        if not self.due(step):
            return False
        self.save(step, state() if callable(state) else state)
        return True


def load_checkpoint(directory, step=None, slots=False):
    """The trained model in `directory` (the servers' --checkpoint_dir) as
    NumPy arrays by name, as fulcrumctl export writes it: each variable by
    its name, each table t as t.ids (int64) and t.rows ([ids, width]
    float32); with `slots` the optimizer slots too (<name>.slot<k>,
    t.slots). `step` picks a checkpoint; by default the job's last state
    (the newest complete checkpoint, with its servers' newer final files,
    else their final files). No server is needed."""
    _, tensors = _fulcrum.load_checkpoint(str(directory), -1 if step is None else int(step), slots)
    return tensors


def _encode(name, value):
    """A state value as bytes: a JSON header line, then the array's bytes."""
    if type(value).__module__.startswith("torch"):
        import torch  # only for a program that saved torch tensors

        if not isinstance(value, torch.Tensor):
            raise TypeError("checkpoint state '%s': a %s" % (name, type(value).__name__))
        array = value.detach().cpu().contiguous().numpy()
        header = {"kind": "torch", "dtype": array.dtype.str, "shape": list(array.shape)}
    elif isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        header = {"kind": "numpy", "dtype": array.dtype.str, "shape": list(array.shape)}
    else:
        try:
            return json.dumps({"kind": "json"}).encode() + b"\n" + json.dumps(value).encode()
        except TypeError as e:
            raise TypeError(
                "checkpoint state '%s': %s (give arrays, tensors or what JSON holds)" % (name, e)
            ) from None
    if array.dtype.hasobject:
        raise TypeError("checkpoint state '%s': an array of Python objects" % name)
    return json.dumps(header).encode() + b"\n" + array.tobytes()


def _decode(name, data):
    head, _, body = data.partition(b"\n")
    try:
        header = json.loads(head)
        if header["kind"] == "json":
            return json.loads(body)
        array = np.frombuffer(body, dtype=np.dtype(header["dtype"])).reshape(header["shape"])
    except (ValueError, KeyError, TypeError) as e:
        raise _fulcrum.DataLoss("checkpoint state '%s' cannot be read: %s" % (name, e)) from None
    if header["kind"] == "torch":
        import torch  # the state was saved from torch tensors

        return torch.from_numpy(array.copy())
    return array.copy()
