#!/usr/bin/env bash
# A throwaway one-node SLURM cluster on localhost for the integration test (label `slurm`):
# munged, slurmctld and slurmd from Debian's packages, with every file under DIR.
#   tools/slurm/local-cluster.sh start DIR   # prints "export SLURM_CONF=DIR/slurm.conf"
#   tools/slurm/local-cluster.sh stop DIR
# Needs root (the daemons run as root) and the packages munge slurmctld slurmd slurm-client.
set -euo pipefail

cmd=${1:?usage: local-cluster.sh start|stop DIR}
dir=$(mkdir -p "${2:?usage: local-cluster.sh start|stop DIR}" && cd "$2" && pwd)

stop() {
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 1
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi

stop
node=$(hostname -s)
cpus=$(nproc)
port=$((20000 + RANDOM % 20000))
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chown munge:munge "$dir/munge"

# munge: the package's key, our own socket.
munged --socket="$dir/munge/munge.socket" --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
  --seed-file="$dir/munge/munge.seed" --key-file=/etc/munge/munge.key --force

cat >"$dir/slurm.conf" <<CONF
ClusterName=fsqtest
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
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
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF

export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" -i
slurmd -f "$SLURM_CONF" -N "$node"
for _ in $(seq 1 60); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.5
done
echo "local-cluster: the node did not become idle; logs in $dir" >&2
sinfo >&2 || true
tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.log >&2 || true
exit 1
