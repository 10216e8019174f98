#!/usr/bin/env bash
# A long run of the chaos suite (tests/cli/chaos.h, docs/TESTING.md): runs the
# four `chaos.` tests again and again, each time with the next seed, until at
# least COUNT failures have been injected, then prints a table of outcomes
# (mode x failure kind: how many as documented, how many not) and every
# outcome that differed.
#
#   scripts/chaos.sh [SEED [COUNT [PROFILE]]]     defaults: 1 200 full
#
# PROFILE "full" draws every failure, the known-broken ones included; "ci"
# only what CI runs. Each test injects DTRAIN_CHAOS_FAILURES (default 12)
# failures per mode and seed. Records go to build/chaos-<SEED>.tsv (one line
# per failure: seed, mode, scenario, kind, victim, at_s, detail, expected,
# actual exit codes, wall_s, steps lost, accuracy, undisturbed accuracy,
# verdict, reason); the runner's output to build/chaos-<SEED>.log.
set -uo pipefail
cd "$(dirname "$0")/.."

seed=${1:-1}
count=${2:-200}
profile=${3:-full}
per=${DTRAIN_CHAOS_FAILURES:-12}
rec=build/chaos-$seed.tsv
log=build/chaos-$seed.log
make -j2 WERROR=1 build/dtrain build/dtrain-tests >/dev/null || exit 1
: >"$rec"
: >"$log"
start=$SECONDS
s=$seed
while [ "$(wc -l <"$rec")" -lt "$count" ]; do
	echo "== seed $s ($(wc -l <"$rec") of $count injected, $((SECONDS - start)) s)" | tee -a "$log"
	DTRAIN_CHAOS_SEED=$s DTRAIN_CHAOS_FAILURES=$per DTRAIN_CHAOS_PROFILE=$profile DTRAIN_CHAOS_RECORD=$PWD/$rec \
		DTRAIN_BIN=$PWD/build/dtrain build/dtrain-tests -j1 chaos. >>"$log" 2>&1
	s=$((s + 1))
done

echo "chaos: seeds $seed..$((s - 1)), profile $profile, $((SECONDS - start)) s; records in $rec"
awk -F'\t' '
	{ k = $3 "\t" $5; n[k]++; if ($15 == "ok") ok[k]++; else bad[k]++; tot++; if ($15 == "ok") tok++
	  lost[$3] = ($12 > lost[$3] ? $12 : lost[$3]); wall[$3] += $11 }
	END {
		printf "%-10s %-8s %6s %6s %6s\n", "mode", "failure", "count", "ok", "BAD"
		for (k in n) { split(k, a, "\t"); printf "%-10s %-8s %6d %6d %6d\n", a[1], a[2], n[k], ok[k], bad[k] }
		printf "total: %d injected, %d as documented, %d not\n", tot, tok, tot - tok
		for (m in lost) printf "%s: most steps lost in one scenario %d\n", m, lost[m]
	}' "$rec" | sort
echo "outcomes that differed from the documented ones:"
awk -F'\t' '$15 != "ok" { print "  seed " $2 " " $3 " scenario " $4 ": " $5 " " $6 " at " $7 " s (" $8 "): expected " $9 "; got " $10 "; " $16 }' "$rec" | sort | uniq -c | sort -rn | head -40
