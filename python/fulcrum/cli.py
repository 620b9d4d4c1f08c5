"""fulcrum.cli: the flags a Python worker takes from the launcher, as the C++
worker takes them, for programs run with local_cluster --worker_command.

    parser = argparse.ArgumentParser()
    fulcrum.cli.add_flags(parser)            # --mode, TLS, tokens, checkpoints, ...
    parser.add_argument("--epochs", type=int, default=10)
    args = fulcrum.cli.parse(parser)          # usage errors (exit 2) for mistakes
    client = fulcrum.cli.connect(args)        # TF_CONFIG, TLS or --insecure, the token
    checkpoints = fulcrum.cli.checkpoints(client, args)   # the chief's, or None
"""

import argparse
import sys

from fulcrum import checkpoints as _checkpoints
from fulcrum import client as _client


def add_flags(parser):
    """Adds the worker's flags that a Python program honours."""
    p = parser
    # The cluster, as the daemons take it (the container image's entrypoint
    # gives these); without them, TF_CONFIG (the launcher's).
    p.add_argument("--cluster_spec", default="", help="A TF_CONFIG JSON file of the cluster.")
    p.add_argument("--ps_hosts", default="", help="Comma-separated host:port of the servers.")
    p.add_argument("--worker_hosts", default="", help="Comma-separated host:port of the workers.")
    p.add_argument("--chief_host", default="", help="host:port of the chief, if any.")
    p.add_argument("--task_type", default="", help="chief or worker (default worker).")
    p.add_argument("--task_index", type=int, default=0, help="This task's index of its type.")
    p.add_argument("--mode", default="sync", help="As the servers run: sync, async or ssp.")
    p.add_argument("--seed", type=int, default=1, help="Seed of the weights and the shuffles.")
    p.add_argument(
        "--cpu_threads", type=int, default=0, help="torch's and BLAS's threads (0: theirs)."
    )
    p.add_argument("--wire_dtype", default="float32", help="float32, bfloat16 or float16.")
    p.add_argument("--summary_json", default="", help="Chief: write the run's summary here.")
    p.add_argument("--metrics_jsonl", default="", help="Chief: a JSON line per epoch here.")
    p.add_argument("--tls_cert", default="", help="Mutual TLS: this worker's certificate (PEM).")
    p.add_argument("--tls_key", default="", help="Mutual TLS: its private key (PEM).")
    p.add_argument("--tls_ca", default="", help="Mutual TLS: the cluster's CA certificate (PEM).")
    p.add_argument("--insecure", action="store_true", help="Plaintext, without TLS.")
    p.add_argument(
        "--auth_token_file",
        default="",
        help="A file holding the cluster token, for servers that need one.",
    )
    p.add_argument(
        "--control_token_file",
        default="",
        help="The chief's: a file holding the control token, sent instead.",
    )
    p.add_argument(
        "--checkpoint_dir",
        default="",
        help="Chief: the servers' --checkpoint_dir, where it checkpoints the job.",
    )
    p.add_argument(
        "--checkpoint_every_steps", type=int, default=0, help="Chief: 0 is not by steps."
    )
    p.add_argument(
        "--checkpoint_every_secs", type=int, default=600, help="Chief: 0 is not by time."
    )
    p.add_argument("--keep_checkpoints", type=int, default=5, help="Chief: complete ones kept.")
    # Passed by the launcher; the servers enforce them.
    p.add_argument("--staleness", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--replicas_to_aggregate", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--strategy", default="parameter_server", help=argparse.SUPPRESS)


def parse(parser, argv=None):
    """parser.parse_args, with the flags' mistakes as usage errors (exit 2),
    and --cpu_threads applied."""
    args = parser.parse_args(argv)
    if args.strategy != "parameter_server":
        parser.error("--strategy=%s: this program trains on parameter servers" % args.strategy)
    if args.insecure == bool(args.tls_cert or args.tls_key or args.tls_ca):
        parser.error("give --tls_cert, --tls_key and --tls_ca (mutual TLS), or --insecure")
    if args.cpu_threads > 0:
        limit_threads(args.cpu_threads)
    return args


def limit_threads(n):
    """Gives torch's operators (in a program that has imported torch) and
    the BLAS library (OpenBLAS, which NumPy and Debian's torch share, and
    whose pool torch.set_num_threads does not size) `n` threads each. Idle
    BLAS threads spin: a torch worker left with OpenBLAS's default pool
    burnt twice the CPU per step (17.5 ms against 8.2 for torch_ctr.py's
    step on 2 cores), which workers sharing a machine take from each
    other."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    try:
        import threadpoolctl
    except ImportError:
        print(
            "fulcrum: --cpu_threads=%d: threadpoolctl is not installed, so the BLAS "
            "library keeps its own threads (pip install threadpoolctl, or apt-get install "
            "python3-threadpoolctl)" % n,
            file=sys.stderr,
        )
        return
    threadpoolctl.threadpool_limits(n, user_api="blas")


def connect(args):
    """fulcrum.connect() from the cluster flags (--cluster_spec; the host
    flags; --ps_hosts alone with --task_index as the worker id), else
    TF_CONFIG, secured as the flags say."""
    token_file = args.control_token_file or args.auth_token_file
    token = ""
    if token_file:
        with open(token_file) as f:
            token = f.read().strip()
    hosts = args.worker_hosts or args.chief_host
    if args.ps_hosts and not hosts and not args.cluster_spec:
        cluster = {"ps_hosts": args.ps_hosts, "worker_id": args.task_index}  # the simple form
    else:
        cluster = {
            "ps_hosts": args.ps_hosts or None,
            "cluster_spec": args.cluster_spec or None,
            "worker_hosts": args.worker_hosts if hosts else None,
            "chief_host": args.chief_host if hosts else None,
            "task_type": args.task_type or None,
            "task_index": args.task_index,
        }
    return _client.connect(
        **cluster,
        mode=args.mode,
        wire_dtype=args.wire_dtype,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_ca=args.tls_ca,
        auth_token=token,
    )


def checkpoints(client, args):
    """The chief's fulcrum.Checkpoints as the flags say; None for the other
    workers or without --checkpoint_dir."""
    if not client.is_chief or not args.checkpoint_dir:
        return None
    return _checkpoints.Checkpoints(
        client,
        args.checkpoint_dir,
        every_steps=args.checkpoint_every_steps,
        every_secs=args.checkpoint_every_secs,
        keep=args.keep_checkpoints,
    )
