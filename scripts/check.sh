#!/usr/bin/env bash
# Runs every test dtrain has, in order, and ends with one summary line:
#   1. the unit, kernel, gradient-check and CLI suites (build/, -O2)
#   2. the same suites under AddressSanitizer + UndefinedBehaviorSanitizer (build-san/),
#      less the long accuracy runs (SAN_EXCLUDE below)
#   3. each libFuzzer target for a short, fixed-seed run (build-fuzz/)
# Each fuzz target counts as one test. Exit status is non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."

JOBS=${JOBS:-2}
# Left out of the sanitizer pass only: the long accuracy runs (cnn to a target
# accuracy, the README's whole-cluster example). They take minutes under ASan
# and exercise no code path the mlp/short variants of the same suites do not;
# the plain pass runs them. The chaos suite too: it is about timing (deadlines,
# pauses, restarts) of code the other suites run under the sanitizers. And the
# README's tour, which checks that the documented lines run (MobileNetV2 at
# 224x224 among them: minutes under ASan), not code the other suites miss.
SAN_EXCLUDE=${SAN_EXCLUDE:-"-x launch_slow. -x accuracy_cnn -x chaos. -x readme_tour.every"}
passed=0; failed=0; skipped=0
log_dir=build/check-logs
mkdir -p "$log_dir"

tally() { # tally LOGFILE: add the runner's closing counts
	local line
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$1" | tail -1)
	if [ -z "$line" ]; then
		echo "check: $1 has no summary line (the runner crashed?)"; failed=$((failed + 1)); return
	fi
	read -r p _ f _ s _ <<<"${line//,/}"
	passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
}

echo "== build (warnings are errors)"
make -j"$JOBS" WERROR=1 all build/dtrain-tests || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }

echo "== tests"
make --no-print-directory test TESTFLAGS="-j$JOBS" 2>&1 | tee "$log_dir/tests.log"
tally "$log_dir/tests.log"

echo "== tests under address,undefined sanitizers"
if make -j"$JOBS" WERROR=1 SANITIZE=address,undefined all build-san/dtrain-tests; then
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		make --no-print-directory test SANITIZE=address,undefined TESTFLAGS="-j$JOBS $SAN_EXCLUDE" 2>&1 | tee "$log_dir/tests-san.log"
	tally "$log_dir/tests-san.log"
else
	echo "check: sanitizer build failed"; failed=$((failed + 1))
fi

echo "== fuzz targets (short fixed-seed runs)"
for src in tests/fuzz/*.c; do
	[ -e "$src" ] || continue
	name=$(basename "$src" .c)
	if make --no-print-directory "build-fuzz/$name" >"$log_dir/fuzz-$name.build.log" 2>&1 &&
	   make --no-print-directory fuzz FUZZ_BIN="build-fuzz/$name" FUZZ_RUNS="${FUZZ_RUNS:-20000}" >"$log_dir/fuzz-$name.log" 2>&1; then
		echo "PASS fuzz.$name"; passed=$((passed + 1))
	else
		echo "FAIL fuzz.$name (see $log_dir/fuzz-$name*.log)"; tail -20 "$log_dir/fuzz-$name.log" 2>/dev/null
		failed=$((failed + 1))
	fi
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
