#!/usr/bin/env bash
# A throwaway SLURM cluster on this machine for the integration tests (labels `slurm`, `multinode`):
# munged, slurmctld and slurmd from Debian's packages, with every file under DIR.
#
#   tools/slurm/local-cluster.sh start DIR             # one node: this machine, on 127.0.0.1
#   tools/slurm/local-cluster.sh start DIR --hosts N   # N nodes: the test hosts of tools/netns/hosts.sh
#   tools/slurm/local-cluster.sh stop DIR
#
# `start` prints "export SLURM_CONF=DIR/slurm.conf" (eval it) once every node is up, or exits 1
# within about 30 s per attempt. On one node slurmctld takes a random port P with P and P+1 free
# (slurmd takes P+1; FSQ_SLURM_PORT sets the first attempt's P), and a port taken between the check
# and the daemon's bind is retried with another, three attempts in all. Needs root (the daemons run
# as root) and the packages munge slurmctld slurmd slurm-client.
#
# With --hosts N, make the hosts first (`tools/netns/hosts.sh up N`; FSQ_NETNS_PREFIX and
# FSQ_NETNS_SUBNET are read the same way). Node I is the test host PREFIX<I> at its veth address:
# one slurmd per host (`slurmd -N PREFIX<I>`, its own pid, log and spool under DIR), slurmctld on
# host PREFIX0, and one munged for all of them (its socket is a file under DIR, which every
# namespace sees). The hosts reach only each other, so run sbatch, srun and sinfo on one of them:
#   tools/netns/hosts.sh exec fsqh0 sbatch --nodes=2 ... tools/slurm/train.sbatch
# The daemons are not started with `ip netns exec`: it mounts a fresh /sys without the cgroup
# hierarchy, and slurmd 22.05 then stops with "error: No filesystem mounted on /sys/fs/cgroup" /
# "Unable to initialize cgroup plugin". Instead each one enters only the host's network namespace,
# with a mount and UTS namespace of its own for the host's hosts file and hostname (see on_node),
# so that jobs resolve the other hosts' names as the hosts tool's own `exec` does.
set -euo pipefail

usage() {
  echo "usage: local-cluster.sh start DIR [--hosts N] | stop DIR" >&2
  exit 2
}

cmd=${1:-}
[ $# -ge 2 ] || usage
dir=$(mkdir -p "$2" && cd "$2" && pwd)
hosts=0
if [ $# -eq 4 ] && [ "$3" = --hosts ] && [ "$cmd" = start ]; then
  hosts=$4
  [[ "$hosts" =~ ^[0-9]+$ ]] && ((hosts >= 1)) || usage
elif [ $# -ne 2 ]; then
  usage
fi
prefix=${FSQ_NETNS_PREFIX:-fsqh}

fail() {
  echo "local-cluster: $*" >&2
  exit 1
}

# Every daemon that one of our pid files names, SIGTERM first and SIGKILL after 10 s.
stop() {
  stop_pids 100 "$dir"/slurmd*.pid "$dir"/slurmctld.pid "$dir"/munged.pid
}

# SLURM's daemons only (munged stays), for another attempt: a daemon that is starting may take its
# time over SIGTERM, and nothing of theirs is kept, so SIGKILL after 1 s.
stop_slurm() {
  stop_pids 10 "$dir"/slurmd*.pid "$dir"/slurmctld.pid
}

# TICKS PIDFILE...: SIGTERM, then SIGKILL to those still running after TICKS tenths of a second.
stop_pids() {
  local ticks=$1 pidfile pid pids=() left
  shift
  for pidfile in "$@"; do
    [ -f "$pidfile" ] || continue
    pids+=("$(cat "$pidfile")")
    rm -f "$pidfile"
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 1 "$ticks"); do
    left=()
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && left+=("$pid")
    done
    [ ${#left[@]} -gt 0 ] || return 0
    sleep 0.1
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
}

# CMD on test host NS: its network namespace, its hosts file over /etc/hosts and its hostname, but
# the machine's /sys (with the cgroups that slurmd needs).
on_node() {
  local ns=$1
  shift
  # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
  nsenter --net="/run/netns/$ns" unshare --mount --uts \
    sh -c 'mount --bind "/etc/netns/$0/hosts" /etc/hosts && hostname "$0" && exec "$@"' "$ns" "$@"
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi
[ "$cmd" = start ] || usage

[ "$(id -u)" -eq 0 ] || fail "needs root (the daemons run as root)"
for tool in munged slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null 2>&1 ||
    fail "\`$tool' is missing; tools/setup.sh installs the packages munge slurmctld slurmd slurm-client"
done
[ -r /etc/munge/munge.key ] || fail "/etc/munge/munge.key is missing; the munge package makes it"

# The nodes: "NAME ADDRESS" lines.
nodes=()
if ((hosts == 0)); then
  nodes+=("$(hostname -s) 127.0.0.1")
else
  for tool in nsenter unshare; do
    command -v "$tool" >/dev/null 2>&1 || fail "\`$tool' is missing; tools/setup.sh installs util-linux"
  done
  for ((i = 0; i < hosts; i++)); do
    ns=$prefix$i
    [ -e "/run/netns/$ns" ] && [ -f "/etc/netns/$ns/hosts" ] ||
      fail "no test host $ns; make the hosts first: FSQ_NETNS_PREFIX=$prefix tools/netns/hosts.sh up $hosts"
    address=$(awk -v name="$ns" '$2 == name { print $1; exit }' "/etc/netns/$ns/hosts")
    [ -n "$address" ] || fail "/etc/netns/$ns/hosts does not give $ns an address"
    nodes+=("$ns $address")
  done
fi
read -r controller controller_address <<<"${nodes[0]}"

stop
cpus=$(nproc)
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chown munge:munge "$dir/munge"

# munge: the package's key, our own socket.
munged --socket="$dir/munge/munge.socket" --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
  --seed-file="$dir/munge/munge.seed" --key-file=/etc/munge/munge.key --force

if ((hosts == 0)); then
  spool=$dir/spool slurmd_pid=$dir/slurmd.pid slurmd_log=$dir/slurmd.log
else
  # Several slurmd on one machine: %n is the node name that `slurmd -N` gives.
  spool=$dir/spool/%n slurmd_pid=$dir/slurmd-%n.pid slurmd_log=$dir/slurmd-%n.log
fi
# slurm.conf with slurmctld on PORT and slurmd on PORT+1.
write_conf() {
  local port=$1 node name address
  cat <<CONF
ClusterName=fsqtest
SlurmctldHost=$controller($controller_address)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$slurmd_pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$slurmd_log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
CONF
  for node in "${nodes[@]}"; do
    read -r name address <<<"$node"
    echo "NodeName=$name NodeAddr=$address NodeHostname=$name CPUs=$cpus State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
}

export SLURM_CONF=$dir/slurm.conf
if ((hosts == 0)); then
  query() { timeout 3 "$@"; }
else
  query() { on_node "$controller" timeout 3 "$@"; }
fi

# A port P with P and P+1 free on this machine (its ports are shared with everything else), or 6817
# in the hosts' fresh namespaces, where SLURM's own ports are free. FSQ_SLURM_PORT, when set, is
# the first attempt's port, taken unchecked.
pick_port() {
  local attempt=$1 port
  if ((attempt == 1)) && [ -n "${FSQ_SLURM_PORT:-}" ]; then
    echo "$FSQ_SLURM_PORT"
    return
  fi
  if ((hosts > 0)); then
    echo 6817
    return
  fi
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % 20000))
    if [ -z "$(ss -Htan "( sport = :$port or sport = :$((port + 1)) )")" ]; then
      echo "$port"
      return
    fi
  done
  fail "no free pair of TCP ports found in 50 tries"
}

start_daemons() {
  local node name
  if ((hosts == 0)); then
    slurmctld -f "$SLURM_CONF" -i
    slurmd -f "$SLURM_CONF" -N "$controller"
  else
    on_node "$controller" slurmctld -f "$SLURM_CONF" -i
    for node in "${nodes[@]}"; do
      read -r name _ <<<"$node"
      mkdir -p "$dir/spool/$name"  # slurmd does not make its spool folder
      on_node "$name" slurmd -f "$SLURM_CONF" -N "$name"
    done
  fi
}

# Waits at most 30 s for every node to be up (idle, or busy with a job). Returns 0 when they are,
# 3 when a daemon lost its port to another program (a race with the check above: try another), 1
# otherwise. Stops as soon as a daemon has died instead of waiting out the time.
wait_up() {
  local want=${#nodes[@]} up=0 deadline=$((SECONDS + 30)) pidfile
  while ((SECONDS < deadline)); do
    # Before sinfo: another program on the port would take sinfo's request and never answer.
    port_taken && return 3
    up=$(query sinfo -h -N -o '%N %T' 2>/dev/null | grep -cE ' (idle|mixed|allocated)$' || true)
    [ "$up" -eq "$want" ] && return 0
    for pidfile in "$dir/slurmctld.pid" "$dir"/slurmd*.pid; do
      # A daemon writes its pid file after it has forked: one not there yet is not a dead one.
      if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        port_taken && return 3  # (it died of that during the sinfo above)
        echo "local-cluster: a daemon stopped ($pidfile)" >&2
        return 1
      fi
    done
    sleep 0.5
  done
  port_taken && return 3
  echo "local-cluster: $up of $want node(s) came up in 30 s" >&2
  return 1
}

port_taken() {
  grep -qs 'Address already in use' "$dir"/slurmctld.log "$dir"/slurmd*.log
}

for attempt in 1 2 3; do
  port=$(pick_port "$attempt")
  rm -f "$dir"/slurmctld.log "$dir"/slurmd*.log
  write_conf "$port" >"$SLURM_CONF"
  start_daemons
  status=0
  wait_up || status=$?
  if ((status == 0)); then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  ((status == 3)) || break
  echo "local-cluster: port $port or $((port + 1)) is taken (attempt $attempt); trying another" >&2
  stop_slurm
done
echo "local-cluster: the cluster did not come up; logs in $dir" >&2
query sinfo -N >&2 || true
tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd*.log >&2 || true
stop  # no daemon left behind
exit 1
