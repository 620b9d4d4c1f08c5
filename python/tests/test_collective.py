"""fulcrum.collective: the all-reduce group of Python programs, each rank a
process of its own on 127.0.0.1, with NumPy arrays and torch tensors."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from local_server import free_ports  # bench/local_server.py

import fulcrum

RANK = textwrap.dedent(
    """
    import json, sys
    import numpy as np, torch, fulcrum
    rank, peers, kind = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
    task = {"type": "worker", "index": rank}
    tf_config = json.dumps({"cluster": {"worker": peers}, "task": task})
    group = fulcrum.collective.Group(
        [fulcrum.variable("w", (2, 3), fulcrum.sgd(0.5))], tf_config=tf_config,
        bind_host="127.0.0.1", timeout=30, startup_timeout=60)
    make = (lambda a: torch.from_numpy(a)) if kind == "torch" else (lambda a: a)
    out = {"w": make(np.zeros((2, 3), np.float32))}
    group.start({"w": make(np.full((2, 3), 10.0 + rank, np.float32))}, out)
    first = np.asarray(out["w"]).tolist()
    for step in range(3):
        group.step({"w": make(np.full((2, 3), float(rank + 1), np.float32))}, out, epoch=0)
    print(json.dumps({"first": first, "last": np.asarray(out["w"]).tolist(),
                      "steps": group.step_count, "share": group.share(0)}))
    """
)


def test_a_group_averages_gradients_from_numpy_and_torch_ranks(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    peers = ["127.0.0.1:%d" % p for p in free_ports(3)]
    kinds = ["numpy", "torch", "numpy"]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), json.dumps(peers), kinds[rank]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TF_CONFIG": ""},
        )
        for rank in range(3)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    # The chief's initial values are everyone's; each step applies the mean
    # gradient (1 + 2 + 3) / 3 = 2 with SGD 0.5, on every rank alike.
    for r, result in enumerate(results):
        assert result["first"] == [[10.0] * 3] * 2
        assert result["last"] == [[10.0 - 3 * 0.5 * 2.0] * 3] * 2
        assert result["steps"] == 3
        assert result["share"] == [r, 3]


def test_a_group_needs_this_task_among_the_workers(tmp_path):
    tf_config = json.dumps(
        {
            "cluster": {"worker": ["127.0.0.1:1"], "evaluator": ["127.0.0.1:2"]},
            "task": {"type": "evaluator", "index": 0},
        }
    )
    with pytest.raises(fulcrum.InvalidArgument, match="evaluator:0 trains no share"):
        fulcrum.collective.Group(
            [fulcrum.variable("w", (1,), fulcrum.sgd(0.1))], tf_config=tf_config
        )


def a_group_of_one(**options):
    """A group whose one worker is this process, on a port of its own."""
    tf_config = json.dumps(
        {
            "cluster": {"worker": ["127.0.0.1:%d" % free_ports(1)[0]]},
            "task": {"type": "worker", "index": 0},
        }
    )
    return fulcrum.collective.Group(
        [fulcrum.variable("w", (2, 3), fulcrum.adam(0.1))],
        tf_config=tf_config,
        bind_host="127.0.0.1",
        startup_timeout=30,
        **options,
    )


def test_a_step_writes_into_the_callers_buffers_and_refuses_ones_that_do_not_fit():
    """A step reads the gradients and writes the new values where the
    caller's arrays lie; arrays that do not fit the variables are refused,
    naming the variable, before anything is applied."""
    group = a_group_of_one()
    out = {"w": np.zeros((2, 3), np.float32)}
    group.start({"w": np.ones((2, 3), np.float32)}, out)
    grads = {"w": np.full((2, 3), 0.5, np.float32)}
    group.step(grads, out)
    assert group.step_count == 1
    first = out["w"].copy()
    assert np.all(first < 1.0)  # Adam's first step moves each value down by about 0.1
    np.testing.assert_allclose(first, 0.9, rtol=1e-4)
    with pytest.raises(fulcrum.InvalidArgument, match="output for 'w': 4 elements where 6"):
        group.step(grads, {"w": np.zeros(4, np.float32)})
    with pytest.raises(fulcrum.NotFound, match="variable 'v' is not in the group"):
        group.step(grads, {"v": np.zeros((2, 3), np.float32)})
    with pytest.raises(fulcrum.InvalidArgument, match="gradient of 'w': 5 elements where 6"):
        group.step({"w": np.zeros(5, np.float32)}, out)
    assert group.step_count == 1
    np.testing.assert_array_equal(out["w"], first)


def test_the_chief_checkpoints_its_replica_and_a_new_group_resumes_from_it(tmp_path):
    grads = [np.full((2, 3), g, np.float32) for g in (1.0, -2.0, 0.5, 3.0)]
    out = {"w": np.zeros((2, 3), np.float32)}
    # Two steps, a checkpoint, and the group gone.
    first = a_group_of_one(checkpoint_dir=str(tmp_path / "job"))
    first.start({"w": np.ones((2, 3), np.float32)}, out)
    for g in grads[:2]:
        first.step({"w": g}, out)
    checkpointed = out["w"].copy()
    first.checkpoint()
    del first
    assert list((tmp_path / "job").glob("ckpt-*2/MANIFEST"))
    # A new group starts from it (not from its initial values), at its step.
    again = a_group_of_one(checkpoint_dir=str(tmp_path / "job"))
    again.start({"w": np.full((2, 3), 7.0, np.float32)}, out)
    np.testing.assert_array_equal(out["w"], checkpointed)
    assert again.step_count == 2 and again.resumed_batches(10) == 2
    for g in grads[2:]:
        again.step({"w": g}, out)
    resumed = out["w"].copy()
    del again
    # Adam's slots and step came back too: the same as four steps in one go.
    straight = a_group_of_one()
    straight.start({"w": np.ones((2, 3), np.float32)}, out)
    for g in grads:
        straight.step({"w": g}, out)
    np.testing.assert_array_equal(resumed, out["w"])


def test_checkpoint_options_out_of_range_are_refused(tmp_path):
    with pytest.raises(fulcrum.InvalidArgument, match="keep >= 1"):
        a_group_of_one(checkpoint_dir=str(tmp_path), keep_checkpoints=0)
