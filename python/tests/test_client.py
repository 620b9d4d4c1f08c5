"""The Python client against real servers: connecting, the modes, zero copy,
errors, embedding tables and membership."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import fulcrum


def linear_specs(lr=1.0):
    return [
        fulcrum.variable(
            "w",
            (4, 3),
            fulcrum.sgd(lr),
            initializer=fulcrum.constant(1.0),
            partitioner=fulcrum.fixed_shards(2),
        ),
        fulcrum.variable("b", (3,), fulcrum.sgd(lr)),
    ]


def address(array):
    return array.__array_interface__["data"][0]


def test_mutual_tls_lets_in_the_cas_certificates_only(servers, tmp_path):
    certs = tmp_path / "certs"
    script = os.path.join(os.environ.get("FULCRUM_SOURCE_DIR", "."), "scripts", "make_certs.sh")
    subprocess.run([script, str(certs)], check=True, stdout=subprocess.DEVNULL)
    s = servers(
        num_ps=1,
        flags=[
            "--tls_cert=%s/ps.pem" % certs,
            "--tls_key=%s/ps.key" % certs,
            "--tls_ca=%s/ca.pem" % certs,
        ],
    )
    client = fulcrum.connect(
        s.hosts,
        tls_cert="%s/worker.pem" % certs,
        tls_key="%s/worker.key" % certs,
        tls_ca="%s/ca.pem" % certs,
    )
    client.create_variables(linear_specs())
    assert client.pull()["w"].shape == (4, 3)
    # Plaintext against a TLS server: the error says what to give.
    wants_tls = "likely wants TLS .*tls_cert, tls_key and tls_ca"
    with pytest.raises(fulcrum.Unavailable, match=wants_tls):
        fulcrum.connect(s.hosts, retry_timeout=1.0, call_timeout=5.0)
    with pytest.raises(fulcrum.InvalidArgument, match="--tls_key is missing"):
        fulcrum.connect(s.hosts, tls_cert="%s/worker.pem" % certs, tls_ca="%s/ca.pem" % certs)


def test_a_server_with_a_token_file_needs_the_token(servers, tmp_path):
    token = tmp_path / "cluster.token"
    token.write_text("cluster-0123456789abcdef\n")
    s = servers(num_ps=1, flags=["--auth_token_file=%s" % token])
    with pytest.raises(fulcrum.Unauthenticated, match="needs the cluster token"):
        fulcrum.connect(s.hosts, retry_timeout=1.0)
    client = fulcrum.connect(s.hosts, auth_token="cluster-0123456789abcdef")
    client.create_variables(linear_specs())
    assert client.pull()["b"].shape == (3,)


def test_connect_from_hosts_tf_config_and_cluster_spec_file(servers, tmp_path, monkeypatch):
    s = servers()
    cluster = {"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": s.addresses}}
    by_hosts = fulcrum.connect(s.hosts, worker_id=1)
    assert (by_hosts.worker_id, by_hosts.num_servers, by_hosts.mode) == (1, 2, "async")
    monkeypatch.setenv("TF_CONFIG", json.dumps(dict(cluster, task={"type": "worker", "index": 0})))
    from_env = fulcrum.connect()
    assert from_env.worker_id == 1 and not from_env.is_chief  # the chief is replica 0
    spec_file = tmp_path / "cluster.json"
    spec_file.write_text(json.dumps(dict(cluster, task={"type": "chief", "index": 0})))
    from_file = fulcrum.connect(cluster_spec=str(spec_file))
    assert from_file.worker_id == 0 and from_file.is_chief
    evaluator = fulcrum.connect(
        tf_config=json.dumps(dict(cluster, task={"type": "evaluator", "index": 0}))
    )
    assert evaluator.worker_id == -1
    with pytest.raises(fulcrum.InvalidArgument, match="task"):
        fulcrum.connect(tf_config=json.dumps(dict(cluster, task={"type": "boss", "index": 0})))


def test_mode_must_match_the_servers(servers):
    s = servers(mode="async")
    with pytest.raises(
        fulcrum.FailedPrecondition, match=r"client mode sync but ps 0 .* runs async"
    ):
        fulcrum.connect(s.hosts, mode="sync")


def test_the_mode_check_skips_a_server_lost_for_good(servers):
    """A server lost for good is not asked (its describe() entry is empty):
    a worker that connects afterwards checks the others' mode only, as the
    C++ worker does, and a mode that differs is still refused."""
    from fulcrum.client import _check_modes

    s = servers(mode="async", num_ps=1)
    answered = fulcrum.connect(s.hosts, worker_id=-1).describe()[0]
    lost = {"incarnation": "0", "mode": "MODE_UNSPECIFIED", "workers": []}
    hosts = ["127.0.0.1:1", s.addresses[0]]
    _check_modes([lost, answered], "async", hosts)
    with pytest.raises(
        fulcrum.FailedPrecondition, match=r"client mode sync but ps 1 .* runs async"
    ):
        _check_modes([lost, answered], "sync", hosts)


def test_pull_writes_numpy_and_torch_buffers_in_place(servers):
    client = fulcrum.connect(servers().hosts)
    client.create_variables(linear_specs())
    w = np.zeros((4, 3), np.float32)
    b = torch.full((3,), 7.0)
    where_w, where_b = address(w), b.data_ptr()
    out = client.pull({"w": w, "b": b})
    assert out["w"] is w and address(w) == where_w and b.data_ptr() == where_b
    np.testing.assert_array_equal(w, np.ones((4, 3)))
    np.testing.assert_array_equal(b.numpy(), np.zeros(3))
    fresh = client.pull()
    assert set(fresh) == {"w", "b"} and fresh["w"].dtype == np.float32


def test_push_and_push_pull_apply_the_servers_optimizer(servers):
    client = fulcrum.connect(servers().hosts)
    client.create_variables(linear_specs(lr=0.5))
    g = np.arange(12, dtype=np.float32).reshape(4, 3)
    stats = client.push({"w": g, "b": torch.ones(3)})
    assert stats.applied == 3 and stats.stale == 0  # two shards of w, one of b
    values = client.pull()
    np.testing.assert_allclose(values["w"], 1.0 - 0.5 * g)
    np.testing.assert_allclose(values["b"], -0.5 * np.ones(3))
    before = address(values["w"])
    client.push_pull({"b": np.ones(3, np.float32)}, values)
    assert address(values["w"]) == before
    np.testing.assert_allclose(values["b"], -np.ones(3))


def test_wrong_dtypes_shapes_and_layouts_are_refused_not_copied(servers):
    client = fulcrum.connect(servers().hosts)
    client.create_variables(linear_specs())
    cases = [
        ({"w": np.ones((4, 3))}, "format 'd'; Fulcrum takes float32"),
        ({"w": np.ones((4, 3), np.int32)}, "Fulcrum takes float32"),
        ({"w": np.ones((3, 4), np.float32)}, r"expected shape \[4, 3\], got \[3, 4\]"),
        ({"w": np.ones((4, 6), np.float32)[:, ::2]}, "C-contiguous"),
        ({"w": torch.ones(3, 4).t()}, "not C-contiguous"),
        ({"w": torch.ones(4, 3, dtype=torch.float64)}, "Fulcrum takes float32"),
        ({"w": torch.ones(4, 3, requires_grad=True)}, "detach"),
        ({"w": [[1.0] * 3] * 4}, "a list; Fulcrum takes NumPy arrays"),
    ]
    for grads, message in cases:
        with pytest.raises(fulcrum.InvalidArgument, match=message) as raised:
            client.push(grads)
        assert raised.value.code == "INVALID_ARGUMENT"
    readonly = np.ones((4, 3), np.float32)
    readonly.flags.writeable = False
    with pytest.raises(fulcrum.InvalidArgument, match="writable"):
        client.pull({"w": readonly})
    with pytest.raises(fulcrum.NotFound, match="variable 'nope'"):
        client.push({"nope": np.ones(3, np.float32)})
    # Nothing was applied.
    np.testing.assert_array_equal(client.pull()["w"], np.ones((4, 3)))


def test_server_errors_keep_their_code_and_message(servers):
    s = servers()
    client = fulcrum.connect(s.hosts)
    client.create_variables(linear_specs())
    other = fulcrum.connect(s.hosts, worker_id=0)
    with pytest.raises(fulcrum.AlreadyExists, match="exists with spec"):
        other.create_variables([fulcrum.variable("b", (3,), fulcrum.sgd(0.25))])
    nan = np.full((3,), np.nan, np.float32)
    with pytest.raises(fulcrum.InvalidArgument, match=r"ps \d .*variable .b.*is nan") as raised:
        client.push({"b": nan})
    assert isinstance(raised.value, fulcrum.Error) and isinstance(raised.value, RuntimeError)


def test_unreachable_servers_are_unavailable_naming_the_address():
    client = fulcrum.connect("127.0.0.1:1", call_timeout=1, retry_timeout=0.2, check_mode=False)
    with pytest.raises(fulcrum.Unavailable, match=r"ps 0 \(127.0.0.1:1\)"):
        client.create_variables(linear_specs())


def test_sync_waits_for_every_worker_with_the_gil_released(servers):
    s = servers(mode="sync", workers=2)
    clients = [fulcrum.connect(s.hosts, worker_id=w, mode="sync") for w in range(2)]
    for c in clients:
        c.create_variables(linear_specs(lr=1.0))
    values = [c.pull() for c in clients]
    reader = fulcrum.connect(s.hosts, worker_id=-1, mode="sync")
    # Worker 0's push_pull waits for worker 1's push, which another Python
    # thread makes once worker 0's gradients are pending on the servers:
    # that thread runs only if the call released the GIL.
    errors = []

    def worker1():
        try:
            while not any(
                shard["pending_gradients"] > 0
                for server in reader.describe()
                for shard in server["shards"]
            ):
                pass  # each describe() is a round trip to the servers
            clients[1].push_pull(
                {"w": np.full((4, 3), 3.0, np.float32), "b": np.zeros(3, np.float32)}, values[1]
            )
        except fulcrum.Error as e:
            errors.append(e)

    thread = threading.Thread(target=worker1)
    thread.start()
    stats = clients[0].push_pull(
        {"w": np.full((4, 3), 1.0, np.float32), "b": np.zeros(3, np.float32)}, values[0]
    )
    thread.join(timeout=60)
    assert not errors and not thread.is_alive()
    assert stats.accumulated + stats.applied == 3
    for v in values:
        np.testing.assert_allclose(v["w"], np.full((4, 3), 1.0 - 2.0))  # the mean, applied once
    assert clients[0].step == 1


def test_push_pull_async_overlaps_and_hands_the_buffers_back(servers):
    client = fulcrum.connect(servers().hosts)
    client.create_variables(linear_specs(lr=1.0))
    values = client.pull()
    future = client.push_pull_async({"b": np.ones(3, np.float32)}, values)
    stats = future.result(timeout=60)
    assert future.done() and stats.applied == 1
    np.testing.assert_allclose(values["b"], -np.ones(3))
    # A later call waits for the one in flight.
    f1 = client.push_pull_async({"b": np.ones(3, np.float32)}, values)
    client.push({"b": np.ones(3, np.float32)})
    f1.result()
    np.testing.assert_allclose(client.pull()["b"], -3 * np.ones(3))


def test_ssp_clock_advances_with_each_push(servers):
    s = servers(mode="ssp", flags=("--staleness=1",))
    client = fulcrum.connect(s.hosts, mode="ssp")
    client.create_variables(linear_specs())
    values = client.pull()
    for _ in range(3):
        client.push_pull({"b": np.ones(3, np.float32)}, values)
    assert client.clock == 3


def test_embedding_rows_in_and_out_of_caller_buffers(servers):
    client = fulcrum.connect(servers().hosts)
    client.create_tables([fulcrum.table("emb", 4, fulcrum.sgd(1.0), initializer=fulcrum.zeros())])
    ids = np.array([3, 10**12, 3], np.int64)
    grads = np.ones((3, 4), np.float32)
    grads[1] *= 5
    stats = client.push_rows("emb", ids, grads)
    assert stats.applied >= 1
    out = np.empty((3, 4), np.float32)
    where = address(out)
    client.pull_rows("emb", ids, out)
    assert address(out) == where
    np.testing.assert_allclose(out, [[-2] * 4, [-5] * 4, [-2] * 4])  # id 3's rows summed
    np.testing.assert_allclose(client.pull_rows("emb", torch.tensor([10**12])), [[-5] * 4])
    with pytest.raises(fulcrum.InvalidArgument, match="8 output floats for 3 ids of width 4"):
        client.pull_rows("emb", ids, np.empty((2, 4), np.float32))
    with pytest.raises(fulcrum.InvalidArgument, match="key space"):
        client.push_rows("emb", [-1], np.ones((1, 4), np.float32))
    with pytest.raises(fulcrum.NotFound, match="'nope'"):
        client.pull_rows("nope", [1])


def test_the_first_creators_values_win(servers):
    s = servers(workers=2)
    chief = fulcrum.connect(s.hosts, worker_id=0)
    worker = fulcrum.connect(s.hosts, worker_id=1)
    with pytest.raises(fulcrum.DeadlineExceeded, match="w, b|b, w"):
        worker.wait_for_variables(["w", "b"], timeout=0.2)
    w0 = np.arange(12, dtype=np.float32).reshape(4, 3)
    chief.create_variables(linear_specs(), initial_values={"w": w0})
    worker.wait_for_variables(["w", "b"], timeout=10)
    worker.create_variables(linear_specs(), initial_values={"w": np.zeros((4, 3), np.float32)})
    np.testing.assert_array_equal(worker.pull()["w"], w0)


def test_context_manager_finishes_and_the_chief_ends_the_job(servers):
    s = servers(workers=1)
    with fulcrum.connect(s.hosts) as client:
        client.create_variables(linear_specs())
        client.push({"b": np.ones(3, np.float32)})
    assert s.wait_exited(timeout=30) == [0, 0]


def test_a_worker_that_raises_does_not_say_finished(servers):
    s = servers(workers=2)
    with pytest.raises(ZeroDivisionError):
        with fulcrum.connect(s.hosts, worker_id=1) as client:
            client.create_variables(linear_specs())
            client.push({"b": np.ones(3, np.float32)})
            raise ZeroDivisionError("the training loop fails")
    reader = fulcrum.connect(s.hosts, worker_id=-1)
    worker1 = reader.describe()[0]["workers"][1]
    assert worker1["seen"] and not worker1["finished"]


def test_a_reader_of_backups_reads_the_primaries_where_there_are_none(servers):
    """read_from_backups (tested with replicated shards in
    tests:replication_test) falls back to each shard's primary."""
    s = servers(workers=1)
    client = fulcrum.connect(s.hosts, worker_id=0, job_done_on_exit=False)
    client.create_variables(linear_specs(lr=1.0))
    client.push({"b": np.ones(3, np.float32)})
    expected = client.pull()
    reader = fulcrum.connect(s.hosts, worker_id=-1, read_from_backups=True)
    reader.create_variables(linear_specs(lr=1.0))
    got = reader.pull()
    assert set(got) == set(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def test_cpu_threads_sizes_torchs_pool_and_the_blas_librarys():
    """--cpu_threads reaches OpenBLAS's own threads (NumPy's and Debian's
    torch's), which torch.set_num_threads leaves alone; a program that has
    not imported torch is not made to."""
    check = """
import sys, numpy, threadpoolctl
import fulcrum.cli
with_torch = sys.argv[1] == "torch"
if with_torch:
    import torch
fulcrum.cli.limit_threads(1)
blas = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
assert blas and set(blas) == {1}, blas
assert ("torch" in sys.modules) == with_torch
if with_torch:
    assert torch.get_num_threads() == 1
"""
    for program in ("numpy", "torch"):
        done = subprocess.run(
            [sys.executable, "-c", check, program],
            env=dict(os.environ, OPENBLAS_NUM_THREADS="2"),
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
