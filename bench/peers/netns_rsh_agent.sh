#!/bin/sh
# Open MPI's launch agent for emulated hosts (bench/allreduce_hosts): mpirun
# calls it as ssh, `AGENT HOST COMMAND...`, with HOST a network namespace made
# by scripts/netns-hosts.sh. The command (orted's) runs in that namespace, under
# its own hostname (a new UTS namespace) so that Open MPI takes each namespace
# for a separate node, as the command line's words joined, as sshd would run them.
ns=$1
shift
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && eval "$1"' "$ns" "$*"
