#!/usr/bin/env bash
# A small asynchronous cluster on this machine, started the way seed 000
# says: the lines `dtrain make-configs` prints, each run as its own process.
#
#   scripts/run-cluster.sh [--masters=N] [--ps=N] [extra dtrain train flags...]
#
# Defaults: 2 trainers (the chief and one worker), 1 parameter server, mlp on
# Fashion-MNIST. Each task's output is prefixed with its role. The script
# exits with the chief's exit code and stops every task it started.
# (`dtrain launch`, with states, restarts and teardown rules, is a later issue.)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${DTRAIN_BIN:-build/dtrain}
masters=2 ps=1
args=()
for a in "$@"; do
	case "$a" in
	--masters=*) masters=${a#--masters=} ;;
	--ps=*) ps=${a#--ps=} ;;
	*) args+=("$a") ;;
	esac
done
[ ${#args[@]} -gt 0 ] || args=(--model=mlp --problem=fashion_mnist --train_steps=4000)
# make-configs says --schedule=train (t2t: no evaluation); the chief evaluates at the end all the same.
args+=(--eval)

# Free loopback ports: a port nobody answers on (the kernel's ephemeral range is avoided).
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 12000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
	done
	echo "run-cluster: no free port found" >&2; exit 1
}
join() { local IFS=,; echo "$*"; }
m=(); p=()
for _ in $(seq 1 "$masters"); do m+=("127.0.0.1:$(free_port)"); done
for _ in $(seq 1 "$ps"); do p+=("127.0.0.1:$(free_port)"); done

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

chief_pid=""
n=0
while IFS= read -r line; do
	case "$line" in "#"*|"") continue ;; esac
	# Each line is: TF_CONFIG='...' dtrain train FLAGS
	tf_config=${line#TF_CONFIG=\'}
	tf_config=${tf_config%%\' dtrain train*}
	flags=${line#*dtrain train }
	role=$(sed -E 's/.*"task": \{"type": "([a-z]+)", "index": ([0-9]+)\}.*/\1.\2/' <<<"$line")
	# shellcheck disable=SC2086  # the flags are make-configs' own, space-separated
	eval "set -- $flags"
	TF_CONFIG=$tf_config "$BIN" train "$@" "${args[@]}" 2>&1 | sed -u "s/^/$role | /" &
	pids+=($!)
	# the chief; in the one-master (sync, --masters=1) layout, the master
	case "$role" in chief.0|master.0) chief_pid=$! ;; esac
	n=$((n + 1))
done < <("$BIN" make-configs --masters="$(join "${m[@]}")" --ps="$(join "${p[@]}")" --format=shell)

echo "run-cluster: started $n tasks (trainers ${m[*]}, ps ${p[*]})"
status=0
wait "$chief_pid" || status=$?
for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
exit "$status"
