#!/usr/bin/env bash
# A cluster across hosts: each parameter server and worker in its own
# network namespace with its own address (veth pairs on a bridge in a hub
# namespace), started with the by-hand commands of docs/deployment.md. Training
# completes; then a partition: nftables drops one worker's traffic to one
# server for a few seconds, the worker's calls fail and are retried, and the
# job still completes. Then all-reduce workers on the four hosts, one of them
# cut off: the others regroup and go on, and it stops for want of a
# quorum; once the network heals, it is started again and rejoins. Last,
# replicated shards: three servers with --replication=2 and an etcd on a
# host of its own; one server is cut off from everyone. Its lease runs out,
# so it takes no writes, the others take over its shards and fill new
# copies of them, and four workers' pushes go on; once the network heals it
# finds its lease gone and joins the table again (holding nothing: the two
# others hold both copies of everything by then), and every push
# acknowledged was applied exactly once. Every connection to a server or worker is
# mutual TLS, with certificates naming the hosts' addresses, etcd's too.
# Needs root. Every namespace is removed at the end.
set -euo pipefail
root=${TEST_SRCDIR}/${TEST_WORKSPACE}
ps_server=$root/ps_server/ps_server
worker=$root/worker/worker
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/multihost.XXXXXX")
tag=f$$  # namespaces of this run only
hosts=(ps0 ps1 w0 w1 ps2 etcd)
net=10.250.$(($$ % 200))
declare -A address=([ps0]=$net.1 [ps1]=$net.2 [w0]=$net.3 [w1]=$net.4 [ps2]=$net.5 [etcd]=$net.6)
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for h in "${hosts[@]}" hub; do ip netns del "$tag-$h" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ]; then echo "FAIL: needs root for network namespaces" >&2; exit 1; fi

ip netns add "$tag-hub"
ip -n "$tag-hub" link add br0 type bridge
ip -n "$tag-hub" link set br0 up
for h in "${hosts[@]}"; do
  ip netns add "$tag-$h"
  ip -n "$tag-hub" link add "v$h" type veth peer name eth0 netns "$tag-$h"
  ip -n "$tag-hub" link set "v$h" master br0 up
  ip -n "$tag-$h" addr add "${address[$h]}/24" dev eth0
  ip -n "$tag-$h" link set eth0 up
  ip -n "$tag-$h" link set lo up
done

certs=$tmp/certs
"$root/scripts/make_certs.sh" "$certs" --roles ps,chief,worker,etcd \
  --hosts "${address[ps0]},${address[ps1]},${address[w0]},${address[w1]},${address[ps2]},${address[etcd]}" \
  > /dev/null
tls() { echo "--tls_cert=$certs/$1.pem --tls_key=$certs/$1.key --tls_ca=$certs/ca.pem"; }

ps_hosts=${address[ps0]}:2222,${address[ps1]}:2222
worker_hosts=${address[w0]}:2222,${address[w1]}:2222
on() { local h=$1; shift; ip netns exec "$tag-$h" "$@"; }

# docs/deployment.md's hand-launched cluster: servers, then workers.
# shellcheck disable=SC2046  # tls's flags are words
on ps0 "$ps_server" --ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts" --task_index=0 \
  --mode=async $(tls ps) > "$tmp/ps0.log" 2>&1 &
pids+=($!)
# shellcheck disable=SC2046
on ps1 "$ps_server" --ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts" --task_index=1 \
  --mode=async $(tls ps) > "$tmp/ps1.log" 2>&1 &
pids+=($!)
# shellcheck disable=SC2046
on w0 "$worker" --ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts" --task_index=0 \
  --mode=async --epochs=3 --hidden=64 --log_every_steps=50 --device=cpu $(tls chief) \
  --summary_json="$tmp/summary.json" > "$tmp/w0.log" 2>&1 &
chief=$!
pids+=("$chief")
# shellcheck disable=SC2046
on w1 "$worker" --ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts" --task_index=1 \
  --mode=async --epochs=3 --hidden=64 --log_every_steps=50 --device=cpu $(tls worker) \
  > "$tmp/w1.log" 2>&1 &
other=$!
pids+=("$other")

# Drops every packet between HOST and the other hosts, or no more.
cut_off() {  # HOST
  on "$1" nft add table inet fulcrum_partition
  on "$1" nft add chain inet fulcrum_partition out '{ type filter hook output priority 0; }'
  on "$1" nft add chain inet fulcrum_partition in '{ type filter hook input priority 0; }'
  on "$1" nft add rule inet fulcrum_partition out ip daddr "$net.0/24" drop
  on "$1" nft add rule inet fulcrum_partition in ip saddr "$net.0/24" drop
}
heal() { on "$1" nft delete table inet fulcrum_partition; }

# Until `file` holds `text` (or process `pid` ended): polls a log file
# written by another process.
await_line() {  # FILE TEXT PID
  for _ in $(seq 600); do
    grep -q "$2" "$1" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# Once worker 1 is training, cut its traffic to ps1 for 8 seconds: longer
# than the clients' keepalive needs (a 2 s ping, 2 s to answer) to notice.
await_line "$tmp/w1.log" "step 100/" "$other" || true
grep -q "step 100/" "$tmp/w1.log" || { cat "$tmp"/*.log >&2; echo "FAIL: worker 1 never trained" >&2; exit 1; }
on w1 nft add table inet fulcrum_partition
on w1 nft add chain inet fulcrum_partition out '{ type filter hook output priority 0; }'
on w1 nft add rule inet fulcrum_partition out ip daddr "${address[ps1]}" drop
echo "partition: worker 1 cannot reach ps1"
sleep 8  # the partition's length, not a synchronisation
heal w1
echo "partition healed"

status=0
timeout 300 tail --pid="$chief" -f /dev/null || true
wait "$chief" || status=1
wait "$other" || status=1
for i in 0 1; do wait "${pids[$i]}" || status=1; done
grep -E "unavailable|restarted|error" "$tmp/w1.log" | head -5 || true
if [ $status != 0 ]; then cat "$tmp"/*.log >&2; echo "FAIL: a process failed" >&2; exit 1; fi
grep -q "ps 1 (${address[ps1]}:2222) unavailable" "$tmp/w1.log" ||
  { echo "FAIL: worker 1 never saw the partition" >&2; exit 1; }
accuracy=$(sed -n 's/.*"test_accuracy": \([0-9.]*\).*/\1/p' "$tmp/summary.json")
python3 -c "import sys; sys.exit(0 if float('$accuracy') >= 0.80 else 1)" ||
  { echo "FAIL: test accuracy $accuracy < 0.80" >&2; exit 1; }
echo "multi-host training with a partition completed: test accuracy $accuracy"

# All-reduce across the four hosts (no servers); once they train, worker 3
# is cut off from the others. The three regroup without it and go on;
# alone, it is no quorum and stops, saying so. The network heals, worker 3
# is started again with the same command and rejoins the running group.
ar_hosts=${address[ps0]}:2222,${address[ps1]}:2222,${address[w0]}:2222,${address[w1]}:2222
pids=()
ar_worker() {  # INDEX LOG
  # shellcheck disable=SC2046  # tls's flags, and the chief's summary, are words
  on "${hosts[$1]}" "$worker" --strategy=multi_worker_mirrored --worker_hosts="$ar_hosts" \
    --task_index="$1" --collective_timeout_secs=10 --startup_timeout_secs=120 --epochs=8 \
    --hidden=64 --log_every_steps=50 --device=cpu --cpu_threads=1 $(tls worker) \
    $([ "$1" = 0 ] && echo --summary_json="$tmp/ar-summary.json") > "$2" 2>&1 &
  pids[$1]=$!
}
for i in 0 1 2 3; do ar_worker $i "$tmp/ar$i.log"; done
await_line "$tmp/ar3.log" "step 100/" "${pids[3]}" ||
  { cat "$tmp"/ar*.log >&2; echo "FAIL: all-reduce worker 3 never trained" >&2; exit 1; }
cut_off w1
echo "partition: all-reduce worker 3 is cut off from the others"
timeout 120 tail --pid="${pids[3]}" -f /dev/null || true
stopped=0
wait "${pids[3]}" || stopped=$?
if [ "$stopped" != 1 ] || ! grep -q "not a quorum" "$tmp/ar3.log"; then
  cat "$tmp"/ar3.log >&2
  echo "FAIL: the cut-off worker did not stop for want of a quorum" >&2
  exit 1
fi
heal w1
echo "partition healed: all-reduce worker 3 starts again"
ar_worker 3 "$tmp/ar3-again.log"
status=0
for i in 0 1 2 3; do
  timeout 300 tail --pid="${pids[$i]}" -f /dev/null || true
  wait "${pids[$i]}" || status=1
done
grep -h "failed\|regroup (\|quorum\|joined" "$tmp"/ar*.log | cut -c1-220 || true
if [ $status != 0 ]; then cat "$tmp"/ar*.log >&2; echo "FAIL: an all-reduce worker failed" >&2; exit 1; fi
grep -q "the group is now ranks 0, 1, 2 " "$tmp/ar0.log" ||
  { cat "$tmp"/ar0.log >&2; echo "FAIL: the three did not regroup" >&2; exit 1; }
grep -q "the group is now ranks 0, 1, 2, 3 (leader 0).*rank(s) 3 joined" "$tmp/ar0.log" ||
  { cat "$tmp"/ar0.log "$tmp"/ar3-again.log >&2; echo "FAIL: worker 3 did not rejoin" >&2; exit 1; }
accuracy=$(sed -n 's/.*"test_accuracy": \([0-9.]*\).*/\1/p' "$tmp/ar-summary.json")
python3 -c "import sys; sys.exit(0 if float('$accuracy') >= 0.80 else 1)" ||
  { echo "FAIL: all-reduce test accuracy $accuracy < 0.80" >&2; exit 1; }
echo "all-reduce across hosts went on without a partitioned worker and took it back: test accuracy $accuracy"

# Replicated shards across hosts: ps0, ps1 and ps2 (on w1's host's
# neighbour) with two copies of each shard, coordinated by an etcd on a host
# of its own, and four async workers pushing ones on w0 (exactness_pusher).
# Once they push, ps1 is cut off from every host for 10 s, five times its
# 2 s lease; once it has joined again, the pushers stop, and every element
# must be exactly minus its worker's acknowledged pushes: nothing lost and
# nothing applied twice across the partition.
pids=()
on etcd etcd --name=multihost --data-dir="$tmp/etcd" \
  --listen-client-urls="https://${address[etcd]}:2379" \
  --advertise-client-urls="https://${address[etcd]}:2379" \
  --listen-peer-urls="http://127.0.0.1:2380" --cert-file="$certs/etcd.pem" \
  --key-file="$certs/etcd.key" --client-cert-auth --trusted-ca-file="$certs/ca.pem" \
  > "$tmp/etcd.log" 2>&1 &
pids+=($!)
r_ps_hosts=${address[ps0]}:2222,${address[ps1]}:2222,${address[ps2]}:2222
r_workers=${address[w0]}:2222,${address[w0]}:2223,${address[w0]}:2224,${address[w0]}:2225
r_server() {  # INDEX HOST
  # shellcheck disable=SC2046  # tls's flags are words
  on "$2" "$ps_server" --ps_hosts="$r_ps_hosts" --worker_hosts="$r_workers" \
    --task_index="$1" --mode=async --replication=2 --etcd="${address[etcd]}:2379" \
    --etcd_prefix=/multihost/ --etcd_lease_secs=2 $(tls ps) > "$tmp/r$1.log" 2>&1 &
  pids+=($!)
}
r_server 0 ps0
r_server 1 ps1
ps1_pid=${pids[-1]}
r_server 2 ps2
# Not through `on`, so that $! is the pusher (ip netns exec execs it), which
# SIGTERM stops.
# shellcheck disable=SC2046
ip netns exec "$tag-w0" "$root/tests/exactness_pusher" --ps_hosts="$r_ps_hosts" --mode=async \
  $(tls chief) > "$tmp/rw.log" 2>&1 &
pusher=$!
pids+=("$pusher")
await_line "$tmp/rw.log" "^pushing" "$pusher" ||
  { cat "$tmp"/r*.log >&2; echo "FAIL: the replicated job's workers never pushed" >&2; exit 1; }
cut_off ps1
echo "partition: ps1 is cut off from every host, etcd among them"
sleep 10  # the partition's length, not a synchronisation
heal ps1
echo "partition healed"
await_line "$tmp/r1.log" "it joins again" "$ps1_pid" ||
  { cat "$tmp/r1.log" >&2; echo "FAIL: the cut-off server did not find its lease gone" >&2; exit 1; }
kill -TERM "$pusher"
status=0
timeout 120 tail --pid="$pusher" -f /dev/null || true
wait "$pusher" || status=1
cat "$tmp/rw.log"
grep -h "lease\|the primary now\|is ready\|joins again" "$tmp"/r[012].log | cut -c1-200 | head -20 || true
if [ $status != 0 ]; then cat "$tmp"/r*.log >&2; echo "FAIL: pushes lost or applied twice" >&2; exit 1; fi
grep -q "the primary now" "$tmp/r0.log" "$tmp/r2.log" ||
  { echo "FAIL: no other server took over a shard of the cut-off server's" >&2; exit 1; }
grep -q "lease in etcd ran out: the others took its shards; it joins again" "$tmp/r1.log" ||
  { cat "$tmp/r1.log" >&2; echo "FAIL: the cut-off server did not find its lease gone" >&2; exit 1; }
grep -q "the copy of .* on ${address[ps0]}:2222 is ready" "$tmp/r2.log" ||
  grep -q "the copy of .* on ${address[ps2]}:2222 is ready" "$tmp/r0.log" ||
  { cat "$tmp"/r*.log >&2; echo "FAIL: no copy of the cut-off server's was made again" >&2; exit 1; }
echo "replicated shards across hosts lost no acknowledged push and applied none twice while" \
  "a server was cut off, which joined again"
