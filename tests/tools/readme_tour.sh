#!/usr/bin/env bash
# tests/tools/readme_tour.sh REPO BIN_DIR WORK — runs the tour: every command line of the ```sh
# blocks that README.md, docs/DATA.md and docs/MODELS.md mark with "<!-- tour", in order, as
# written, in WORK (a fresh folder standing for a clone after `make run`: build/ is BIN_DIR,
# scripts/ the repo's, examples/ a copy), with these changes only, so that it takes a minute:
#   - every `dtrain train` trains 1 step (its --train_steps replaced, or added);
#   - make_flowers.py writes 100 images (--count 100: 80 to train, more than a batch of 64), not 3,670;
#   - the launched spec (examples/fashion_mnist.yaml) trains 40 steps, checkpointing every 20, and
#     the sweep's (examples/seed001.yaml) trials 20 steps each;
#   - /tmp/ is WORK/tmp/, and the state of `dtrain launch` goes to WORK/home ($DTRAIN_HOME);
#   - ID and DIR are the last launched experiment's number and output dir (its first line; a sweep's
#     launch leaves them as they were: ID and DIR name one experiment).
# Prints each line as run; exits 1 at the first line that exits non-zero, naming the file, the line
# as written and its output's tail; ends with "tour: N lines ran".
set -uo pipefail
repo=$1 bin_dir=$2 work=$3
mkdir -p "$work/tmp" "$work/home" "$work/examples" || exit 1
cp -r "$repo/examples/." "$work/examples/" || exit 1
ln -sfn "$bin_dir" "$work/build" && ln -sfn "$repo/scripts" "$work/scripts" || exit 1
sed -i 's/^train_steps: .*/train_steps: 40/; s/--save_checkpoints_steps=[0-9]*/--save_checkpoints_steps=20/' \
	"$work/examples/fashion_mnist.yaml"
sed -i -E 's/--train_steps=[0-9]+/--train_steps=20/' "$work/examples/seed001.yaml"
export DTRAIN_HOME="$work/home" TF_CONFIG=
cd "$work" || exit 1

# The lines of the marked blocks, continuations joined, comment-only and blank lines left out,
# each prefixed with "FILE:LINE|".
lines() {
	awk -v f="$1" '
		/<!-- tour/ { mark = 1; next }
		mark && /^```sh/ { in_block = 1; mark = 0; next }
		in_block && /^```/ { in_block = 0; next }
		!in_block { next }
		{ if (cont == "") at = FNR
		  if (sub(/\\$/, "")) { cont = cont $0 " "; next }
		  line = cont $0; cont = ""
		  if (line ~ /^[ \t]*(#|$)/) next
		  print f ":" at "|" line }' "$repo/$1"
}

n=0 id="" dir=""
for doc in README.md docs/DATA.md docs/MODELS.md; do
	while IFS= read -r entry; do
		where=${entry%%|*} line=${entry#*|}
		cmd=$line
		cmd=${cmd//\/tmp\//$work/tmp/}
		if [[ $cmd == *"dtrain train"* ]]; then
			if [[ $cmd == *--train_steps=* ]]; then
				cmd=$(sed -E 's/--train_steps=[0-9]+/--train_steps=1/g' <<<"$cmd")
			else
				cmd=${cmd/dtrain train/dtrain train --train_steps=1}
			fi
		fi
		cmd=${cmd/make_flowers.py/make_flowers.py --count 100}
		if [[ -n $id ]]; then
			cmd=$(sed -E "s#\\bID\\b#$id#g; s#\\bDIR\\b#$dir#g" <<<"$cmd")
		fi
		echo "tour: $where: $cmd"
		t0=$(date +%s.%N); out=$(bash -c "$cmd" 2>&1 </dev/null)
		rc=$?; echo "tour:   took $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f s", b - a}')"
		if (( rc != 0 )); then
			printf 'tour: %s exited %d: %s\n%s\n' "$where" "$rc" "$line" "$(tail -n 25 <<<"$out")"
			exit 1
		fi
		if [[ $cmd == *"dtrain launch "* && $cmd != *--emit* ]] && ! grep -q -- '--> STARTING sweep' <<<"$out"; then
			first=$(grep -m1 -- '--> STARTING experiment' <<<"$out")
			id=$(awk '{print $1}' <<<"$first")
			dir=$(sed -E 's/.*output dir ([^;]+);.*/\1/' <<<"$first")
			[[ -n $id && -d $dir ]] || { echo "tour: $where: no experiment number or output dir in: $first"; exit 1; }
		fi
		n=$((n + 1))
	done < <(lines "$doc")
done
echo "tour: $n lines ran"
