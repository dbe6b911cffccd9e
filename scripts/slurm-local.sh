#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, to try a campaign's SLURM path before the real
# cluster (and for the test suite's SLURM tests):
#
#   sudo scripts/slurm-local.sh start [DIR]   # installs slurm-wlm + munge where missing (Debian),
#                                             # writes DIR/slurm.conf, starts munged, slurmctld and
#                                             # slurmd, waits for the node to be idle
#   export SLURM_CONF=DIR/slurm.conf          # what start prints: sbatch, squeue... use this cluster
#   sudo scripts/slurm-local.sh status [DIR]  # the daemons and sinfo
#   sudo scripts/slurm-local.sh stop [DIR]    # stops the daemons (DIR stays, with the logs)
#
# DIR defaults to ${TMPDIR:-/tmp}/slurm-local. Everything lives in DIR (its own munge key and
# socket, free ports, one partition "local" with every CPU and most of the memory, no GPUs, no
# accounting database): nothing else on the machine is configured. The daemons run as root, so
# start and stop need root; jobs run as whoever submits them. A requeued job waits
# AuthInfo=cred_expire seconds (5 here, the least SLURM takes; 120 by default) before it runs
# again, and the scheduler passes every 2 s (sched_interval; 60 s by default), so a requeue costs
# seconds, not minutes. EnforcePartLimits=ALL: sbatch refuses a job no node can hold, as most
# clusters do, instead of queueing it forever.
set -euo pipefail

usage() { echo "usage: $0 start|stop|status [DIR]" >&2; exit 2; }
[ $# -ge 1 ] || usage
action="$1"
dir="${2:-${TMPDIR:-/tmp}/slurm-local}"
conf="$dir/slurm.conf"
say() { echo "[slurm-local] $*" >&2; }
die() { say "$*"; exit 1; }

need_root() {
  [ "$(id -u)" = "0" ] || die "the SLURM daemons run as root: run this as root (sudo $0 $action $dir)"
}

install_packages() {
  local missing=()
  for cmd in slurmctld slurmd sbatch munged; do
    command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin" command -v "$cmd" >/dev/null 2>&1 \
      || missing+=("$cmd")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 \
    || die "${missing[*]} missing and no apt-get here: install SLURM (slurmctld, slurmd, sbatch) and munge"
  say "installing Debian's slurm-wlm and munge (${missing[*]} missing)"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq slurm-wlm munge; } >"$dir/apt.log" 2>&1 \
    || die "could not install slurm-wlm and munge (see $dir/apt.log)"
}

free_port() {  # a TCP port nothing listens on, from $1 up
  local port="$1"
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
  echo "$port"
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_conf() {
  local host cpus mem_mb ctld_port slurmd_port
  host="$(hostname -s)"
  cpus="$(nproc)"
  # the node's memory for jobs: all but 1 GB (at least 1 GB)
  mem_mb=$(( $(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
  [ "$mem_mb" -ge 1024 ] || mem_mb=1024
  ctld_port="$(free_port $((6817 + RANDOM % 2000 * 2)))"
  slurmd_port="$(free_port $((ctld_port + 1)))"
  cat >"$conf" <<EOF
# one-node SLURM written by scripts/slurm-local.sh
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=5
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
JobRequeue=1
EnforcePartLimits=ALL
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmdSpoolDir=$dir/spool
StateSaveLocation=$dir/state
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
  local m="$dir/munge"
  mkdir -p "$m"
  if [ ! -f "$m/munge.key" ]; then
    dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none
  fi
  chown -R munge: "$m"
  chmod 700 "$m"
  chmod 400 "$m/munge.key"
  # clients (sbatch, srun, the daemons) reach munged through the socket in $m
  chmod 755 "$m"
  alive "$m/munged.pid" && return 0
  runuser -u munge -- munged --socket="$m/munge.socket" --key-file="$m/munge.key" \
    --pid-file="$m/munged.pid" --log-file="$m/munged.log" --seed-file="$m/munged.seed"
}

start() {
  need_root
  mkdir -p "$dir"
  chmod 755 "$dir"
  install_packages
  export PATH="$PATH:/usr/sbin"
  if alive "$dir/slurmctld.pid" && alive "$dir/slurmd.pid"; then
    say "already running"
  else
    mkdir -p "$dir/spool" "$dir/state"
    [ -f "$conf" ] || write_conf
    start_munge
    alive "$dir/slurmctld.pid" || slurmctld -f "$conf"
    alive "$dir/slurmd.pid" || slurmd -f "$conf"
  fi
  export SLURM_CONF="$conf"
  local state=""
  for _ in $(seq 120); do
    state="$(sinfo -h -o %T 2>/dev/null || true)"
    case "$state" in idle|mixed|allocated) break ;; esac
    sleep 0.5
  done
  case "$state" in
    idle|mixed|allocated) ;;
    *) die "the node did not come up (state '${state:-none}'); see $dir/slurmctld.log and $dir/slurmd.log" ;;
  esac
  say "one-node SLURM up: partition local, $(nproc) CPUs, no GPUs, no accounting (sacct fails)"
  echo "export SLURM_CONF=$conf"
}

stop_daemons() {  # TERM to each, together; KILL to any still there after 5 s
  local pidfile pids=()
  for pidfile in "$@"; do
    alive "$pidfile" && pids+=("$(cat "$pidfile")")
    rm -f "$pidfile"
  done
  [ ${#pids[@]} -eq 0 ] && return 0
  kill "${pids[@]}" 2>/dev/null || true
  local pid left
  for _ in $(seq 50); do
    left=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
    [ ${#left[@]} -eq 0 ] && return 0
    sleep 0.1
  done
  kill -9 "${left[@]}" 2>/dev/null || true
}

stop() {
  need_root
  stop_daemons "$dir/slurmd.pid" "$dir/slurmctld.pid"
  stop_daemons "$dir/munge/munged.pid"
  say "stopped (logs and state stay in $dir)"
}

status() {
  [ -f "$conf" ] || die "no cluster in $dir (start it with: sudo $0 start $dir)"
  local name
  for name in munge/munged slurmctld slurmd; do
    if alive "$dir/$name.pid"; then say "$(basename "$name") running"; else say "$(basename "$name") not running"; fi
  done
  SLURM_CONF="$conf" sinfo
  echo "export SLURM_CONF=$conf"
}

case "$action" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) usage ;;
esac
