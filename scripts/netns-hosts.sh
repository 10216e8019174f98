#!/usr/bin/env bash
# netns-hosts.sh — N emulated hosts on this machine: network namespaces joined
# through a switch, with rate-limited links (docs/TESTING.md "Emulated hosts").
#
#   scripts/netns-hosts.sh check                      exit 0 if `ip netns add` is permitted here, 77 if not
#   scripts/netns-hosts.sh up N RATE [DELAY]          make the hosts; prints the set's name (e.g. dth4711x4712)
#   scripts/netns-hosts.sh down NAME                  remove them (and everything they hold)
#   scripts/netns-hosts.sh exec NAME I CMD...         run CMD in host I (0..N-1)
#   scripts/netns-hosts.sh addr I                     host I's address: 10.99.0.(I+1)
#   scripts/netns-hosts.sh run N RATE [DELAY] -- CMD...
#                                                     up, run CMD with NETNS_HOSTS=NAME in its environment,
#                                                     down on every exit (CMD's status, a signal, an error)
#   scripts/netns-hosts.sh gc                         remove the sets whose creating process is gone
#
# RATE is tc's rate ("10gbit", "1gbit", "0" for no limit); DELAY netem's one-way
# delay ("100us", "1ms"; default none).
#
# Layout: host I is the namespace NAME-I with one interface eth0 at
# 10.99.0.(I+1)/24; the switch is the namespace NAME-sw holding a bridge br0,
# the far ends p0..p(N-1) of the hosts' veth pairs, and the address 10.99.0.254
# on br0 (a head node: launchers such as mpirun run there; its own traffic is
# not shaped). Nothing is created in the calling namespace, and NAME is
# "dth<owner>x<pid>" (the owner is the caller of `up`, or this script under
# `run`; pid is this script's), so concurrent sets cannot collide, even on the
# same addresses; `gc` removes the sets whose owner is gone. Each link is shaped
# both ways, as a full-duplex NIC: a token bucket (tc tbf) of RATE on the host's
# eth0 (what it sends) and on the switch's pI (what it receives); DELAY, if
# given, is a netem qdisc above the host's tbf. Deleting a namespace deletes its
# veth ends, so `down` is `ip netns del` of each; `up` that fails part-way
# removes what it made before it exits.
set -euo pipefail

NET=10.99.0
UP_NAME=""
die() { echo "netns-hosts: $*" >&2; exit 2; }

set_members() { # NAME -> the namespaces of that set
	ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1-([0-9]+|sw)\$" | sort -t- -k2,2n || true
}

cmd_down() {
	local name=$1 ns
	[[ $name =~ ^dth[0-9]+x[0-9]+$ ]] || die "down: '$name' is not a set's name (dthPIDxPID)"
	for ns in $(set_members "$name"); do
		ip netns del "$ns" 2>/dev/null || true
	done
	return 0
}

# tc's rate -> bytes per millisecond, the token bucket's depth (at least 64 KB,
# the size of one segmentation-offload packet, which tbf must be able to pass).
burst_for() {
	local r=$1 bits
	case "$r" in
	*gbit) bits=$((${r%gbit} * 1000000000)) ;;
	*mbit) bits=$((${r%mbit} * 1000000)) ;;
	*kbit) bits=$((${r%kbit} * 1000)) ;;
	*) die "rate '$r': give it as Ngbit, Nmbit or Nkbit" ;;
	esac
	local b=$((bits / 8 / 1000))
	echo $((b < 65536 ? 65536 : b))
}

shape() { # NS DEV RATE DELAY
	local ns=$1 dev=$2 rate=$3 delay=$4 parent="root"
	if [ -n "$delay" ]; then
		tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000 || {
			echo "netns-hosts: no netem delay here (the kernel lacks sch_netem: modprobe sch_netem)" >&2
			return 1
		}
		parent="parent 1:"
	fi
	if [ "$rate" != 0 ]; then
		# shellcheck disable=SC2086 # parent is two words on purpose
		tc -n "$ns" qdisc add dev "$dev" $parent handle 10: tbf rate "$rate" burst "$(burst_for "$rate")" latency 20ms
	fi
}

cmd_up() {
	local n=$1 rate=$2 delay=${3:-}
	if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1 || n > 64)); then die "up: N must be 1..64, got '$n'"; fi
	[ "$rate" = 0 ] || burst_for "$rate" >/dev/null
	local owner=${4:-$PPID} name sw i
	name="dth${owner}x$$"
	UP_NAME=$name # for the trap, which may run after this function's locals are gone
	sw="$name-sw"
	[ -z "$(set_members "$name")" ] || die "up: $name exists already (scripts/netns-hosts.sh down $name)"
	trap 'cmd_down "$UP_NAME"; exit 2' ERR INT TERM HUP
	ip netns add "$sw"
	ip -n "$sw" link add br0 type bridge
	ip -n "$sw" addr add "$NET.254/24" dev br0
	ip -n "$sw" link set br0 up
	ip -n "$sw" link set lo up
	for ((i = 0; i < n; i++)); do
		ip netns add "$name-$i"
		ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$name-$i"
		ip -n "$sw" link set "p$i" master br0 up
		ip -n "$name-$i" addr add "$NET.$((i + 1))/24" dev eth0
		ip -n "$name-$i" link set eth0 up
		ip -n "$name-$i" link set lo up
		shape "$name-$i" eth0 "$rate" "$delay"
		shape "$sw" "p$i" "$rate" ""
	done
	# The bridge forwards only once its ports leave the listening state; wait
	# (bounded) until host 0 reaches the last host.
	local last=$((n - 1)) t
	for ((t = 0; t < 50; t++)); do
		# a refused connection proves the path: the peer's kernel answered with a reset
		local said
		said=$(timeout 1 ip netns exec "$name-0" bash -c "exec 3<>/dev/tcp/$NET.$((last + 1))/9" 2>&1 || true)
		[[ $said == *refused* ]] && break
		sleep 0.1
	done
	((t < 50)) || { cmd_down "$name"; die "up: host 0 cannot reach $NET.$((last + 1)) after 5 s"; }
	trap - ERR INT TERM HUP
	echo "$name"
}

cmd_exec() {
	local name=$1 i=$2
	shift 2
	[[ $i =~ ^[0-9]+$ ]] || die "exec: host index '$i' is not a number"
	ip netns list | awk '{print $1}' | grep -qx "$name-$i" || die "exec: no host $name-$i (is the set up?)"
	exec ip netns exec "$name-$i" "$@"
}

cmd_check() {
	local probe="dth$$-probe"
	if ip netns add "$probe" 2>/dev/null; then
		ip netns del "$probe"
		command -v tc >/dev/null || { echo "netns-hosts: tc not found (iproute2)" >&2; exit 77; }
		return 0
	fi
	echo "netns-hosts: 'ip netns add' is not permitted here (needs root / CAP_SYS_ADMIN and iproute2)" >&2
	exit 77
}

cmd_gc() {
	local set
	for set in $(ip netns list 2>/dev/null | awk '{print $1}' | sed -n 's/^\(dth[0-9]\+x[0-9]\+\)-.*/\1/p' | sort -u); do
		local owner=${set#dth}
		kill -0 "${owner%x*}" 2>/dev/null || { echo "netns-hosts: removing $set (its creator is gone)" >&2; cmd_down "$set"; }
	done
}

child=""
pass_on() { [ -z "$child" ] || kill -"$1" -- -"$child" 2>/dev/null || true; }

cmd_run() {
	local n=$1 rate=$2 delay="" name rc=0
	shift 2
	if [ "${1:-}" != "--" ]; then delay=${1:-}; shift || true; fi
	[ "${1:-}" = "--" ] || die "run: usage: run N RATE [DELAY] -- CMD..."
	shift
	[ $# -gt 0 ] || die "run: no command"
	name="dth$$x$$"
	# From here on, every way out of this shell removes the set: the command's
	# end, an error, or a signal, which is passed on to the command first (the
	# exit status then says 128+signal, as a shell's would). The command runs
	# in the background so that `wait` returns at once on a signal (bash runs
	# no trap while a foreground command runs); its stdin is /dev/null.
	# Only SIGKILL escapes: `gc` removes what it leaves.
	# The command is a process group of its own (set -m) so that the signal
	# reaches all it started.
	child=""
	trap 'cmd_down "$name"' EXIT
	cmd_up "$n" "$rate" "$delay" $$ >/dev/null # removes what it made if it fails or is signalled
	trap 'pass_on INT; exit 130' INT
	trap 'pass_on TERM; exit 143' TERM
	trap 'pass_on HUP; exit 129' HUP
	set -m
	NETNS_HOSTS=$name "$@" </dev/null &
	child=$!
	set +m
	wait "$child" || rc=$?
	child=""
	exit "$rc"
}

case "${1:-}" in
check) cmd_check ;;
up) [ $# -ge 3 ] || die "usage: up N RATE [DELAY]"; cmd_up "$2" "$3" "${4:-}" ;;
down) [ $# -eq 2 ] || die "usage: down NAME"; cmd_down "$2" ;;
exec) [ $# -ge 4 ] || die "usage: exec NAME I CMD..."; shift; cmd_exec "$@" ;;
addr) [ $# -eq 2 ] || die "usage: addr I"; echo "$NET.$(($2 + 1))" ;;
run) [ $# -ge 4 ] || die "usage: run N RATE [DELAY] -- CMD..."; shift; cmd_run "$@" ;;
gc) cmd_gc ;;
*) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
