#!/usr/bin/env bash
# A real two-node SLURM cluster on this one machine (nodes n1 and n2, partition debug), for the `slurm` tests.
# Installs slurm-wlm and munge from Debian when they are missing (needs root), starts munged, slurmctld and two
# slurmd, and waits until both nodes are idle. Its configuration lives in DIR (default /tmp/gpuwizard-slurm) with
# its own ports, never in /etc: point the client commands at it with SLURM_CONF, as printed at the end.
#   scripts/slurm-local.sh [start] [DIR]    start (or reuse) the cluster
#   scripts/slurm-local.sh stop [DIR]       stop it
# SLURM 22.05 from Debian 12.
set -eu
action=start
case "${1:-}" in start|stop) action=$1; shift ;; esac
dir="${1:-${GPUWIZARD_SLURM_DIR:-/tmp/gpuwizard-slurm}}"
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"

if [ "$action" = stop ]; then
  [ -f "$conf" ] && scontrol shutdown >/dev/null 2>&1 || true
  echo "stopped the cluster of $conf"
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "slurm-wlm and munge are missing and installing them needs root: sudo apt-get install slurm-wlm munge" >&2
    exit 1
  fi
  echo "installing slurm-wlm and munge (about a minute)..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  mkdir -p /run/munge
  chown munge:munge /run/munge 2>/dev/null || true
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
  fi
  su -s /bin/sh munge -c /usr/sbin/munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n | unmunge >/dev/null || { echo "munge does not answer (munge -n | unmunge)" >&2; exit 1; }

if sinfo -h -N -o '%N %t' 2>/dev/null | grep -q .; then
  echo "cluster already running"
else
  host=$(hostname -s)
  mkdir -p "$dir/ctld"
  cat > "$conf" <<EOF
ClusterName=local2
SlurmctldHost=$host
SlurmctldPort=16817
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
MinJobAge=600
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/%n
SlurmctldPidFile=$dir/ctld.pid
SlurmdPidFile=$dir/%n.pid
SlurmctldLogFile=$dir/ctld.log
SlurmdLogFile=$dir/%n.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=17001 CPUs=1 RealMemory=8000
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=17002 CPUs=1 RealMemory=8000
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  slurmctld
  slurmd -N n1
  slurmd -N n2
fi
for _ in $(seq 120); do
  [ "$(sinfo -h -N -o '%t' 2>/dev/null | grep -c -E '^(idle|alloc|mix)')" -ge 2 ] && break
  sleep 0.5
done
sinfo -N
echo "export SLURM_CONF=$conf"
