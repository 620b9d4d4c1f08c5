"""fulcrum.collective: the all-reduce group of Python programs, each rank a
process of its own on 127.0.0.1, with NumPy arrays and torch tensors."""

import json
import os
import subprocess
import sys
import textwrap

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
