#!/usr/bin/env bash
# Starts a private one-node Slurm (munged, slurmctld -D -i, slurmd -D; no systemd) for one test.
#
#   tests/slurm/start-cluster.sh DIR CTLD_PORT SLURMD_PORT
#
# DT_SLURM_CPUS, when set, is the node's CPU count in slurm.conf (default: nproc). A test that
# needs an allocation of one CPU per task for more tasks than this machine has cores declares
# more (SlurmdParameters=config_overrides lets slurmd accept a node larger than the machine).
#
# Everything lives in DIR (which must exist and be empty): slurm.conf, munge key and socket,
# state, spool, logs. Each daemon runs in the foreground, in the background of this script,
# and its pid is written to DIR/<name>.pid before anything waits on it, so the caller can
# always stop what was started (kill the pids; see the C test). Waits at most ~20 s for the
# node to be idle.
#
# Exit: 0 the node is idle; 77 Slurm cannot run here (the reason is the last line on stdout);
# anything else is a bug in this script.
set -u
dir=$1 ctld_port=$2 slurmd_port=$3
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "$*"; exit 77; }
log_tail() { for f in "$@"; do [ -f "$f" ] && { echo "--- $f"; tail -n 5 "$f"; }; done; }

for cmd in munged mungekey munge slurmctld slurmd srun sinfo; do
  command -v "$cmd" >/dev/null 2>&1 || skip "slurm cannot start: '$cmd' is not installed (Debian: slurmctld slurmd slurm-client munge)"
done
[ "$(id -u)" -eq 0 ] || skip "slurm cannot start: slurmd needs root here (SlurmdUser=root)"

host=$(hostname -s)
mkdir -p "$dir/state" "$dir/spool"
chmod 700 "$dir"
sed -e "s|@HOST@|$host|g" -e "s|@CTLD_PORT@|$ctld_port|g" -e "s|@SLURMD_PORT@|$slurmd_port|g" \
    -e "s|@DIR@|$dir|g" -e "s|@CPUS@|${DT_SLURM_CPUS:-$(nproc)}|g" "$here/slurm.conf.in" > "$dir/slurm.conf"
export SLURM_CONF=$dir/slurm.conf

mungekey -c -k "$dir/munge.key" >"$dir/mungekey.out" 2>&1 || skip "slurm cannot start: mungekey failed: $(tail -n1 "$dir/mungekey.out")"
munged -F --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" --pid-file="$dir/munged.pidfile" \
       --seed-file="$dir/munged.seed" --log-file="$dir/munged.log" >"$dir/munged.out" 2>&1 &
echo $! > "$dir/munged.pid"
for _ in $(seq 50); do [ -S "$dir/munge.sock" ] && break; sleep 0.1; done
munge -n -S "$dir/munge.sock" 2>/dev/null | unmunge -S "$dir/munge.sock" >/dev/null 2>&1 \
  || skip "slurm cannot start: munged does not answer on $dir/munge.sock: $(tail -n1 "$dir/munged.out" 2>/dev/null)"

slurmctld -D -i -f "$dir/slurm.conf" >"$dir/slurmctld.out" 2>&1 &
echo $! > "$dir/slurmctld.pid"
slurmd -D -f "$dir/slurm.conf" >"$dir/slurmd.out" 2>&1 &
echo $! > "$dir/slurmd.pid"

state=""
for _ in $(seq 200); do
  kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null || { log_tail "$dir/slurmctld.out" "$dir/slurmctld.log"; skip "slurm cannot start: slurmctld exited"; }
  kill -0 "$(cat "$dir/slurmd.pid")" 2>/dev/null || { log_tail "$dir/slurmd.out" "$dir/slurmd.log"; skip "slurm cannot start: slurmd exited"; }
  state=$(sinfo -h -o %t 2>/dev/null)
  [ "$state" = idle ] && { echo "node $host idle"; exit 0; }
  sleep 0.1
done
log_tail "$dir/slurmctld.log" "$dir/slurmd.log"
skip "slurm cannot start: node $host not idle after 20 s (state '${state:-unknown}')"
