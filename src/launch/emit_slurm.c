/*
 * emit_slurm.c — the sbatch script of an experiment (see emit.h).
 *
 * The script is written for Slurm users' expectations:
 *   - the allocation spreads the tasks: --nodes (the spec's `nodes`),
 *     --ntasks and --ntasks-per-node, --cpus-per-task from the resources
 *     (the largest group's; 1 when none is given), never --overcommit;
 *   - each task is its own job step (srun -N1 -n1 --exact -w <node>), the
 *     evaluator included, placed in block order (tasks 0..k-1 on the first
 *     node, ...), with the TF_CONFIG `dtrain launch` would give it, naming
 *     the allocation's real host names (scontrol show hostnames);
 *   - ports cannot collide between jobs: $DTRAIN_PORT_BASE when set, else a
 *     block of 64 derived from the job id (20000 + (id mod 600) * 64), so
 *     two jobs on one node differ unless their ids are 600 apart; a task
 *     whose port is taken anyway exits 3, which the restart rules retry;
 *   - the restart policy and backoff_limit are applied by the script around
 *     each step (restart within the allocation, the same rules and waits as
 *     `dtrain launch`), and --requeue is asked for when the policy restarts,
 *     so a node failure requeues the whole job;
 *   - OUTPUT_DIR is absolute: the spec's when absolute, else under
 *     $SLURM_SUBMIT_DIR (default "<name>-<job id>": one per job, as
 *     `launch` gives one per experiment; a requeued job keeps its id and
 *     so resumes from its checkpoints);
 *   - the cluster secret (SECURITY.md): `dtrain secret new` makes one at
 *     run time, 0600, as $OUTPUT_DIR/cluster_secret.<job id> (the shared
 *     directory), unless DTRAIN_CLUSTER_SECRET_FILE names one already; every
 *     step gets DTRAIN_CLUSTER_SECRET_FILE through srun's environment;
 *   - teardown as `launch` does it: the chief failing for good stops every
 *     step; once the trainers end, the ps get 5 s and the evaluator
 *     evaluator_timeout, then SIGTERM, SIGKILL after grace_period. The
 *     script exits with the first failure's code.
 */
#include "launch/emit.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "launch/tasks.h"

/* A bash word in single quotes: ' becomes '\''. Any byte string round-trips. */
static void shq(FILE *out, const char *s)
{
	fputc('\'', out);
	for (; *s; s++) {
		if (*s == '\'')
			fputs("'\\''", out);
		else
			fputc(*s, out);
	}
	fputc('\'', out);
}

static const char *spec_name(const struct dt_launch_spec *s)
{
	return s->name ? s->name : "dtrain";
}

/* Bash that sets $cluster to the TF_CONFIG cluster object: chief, worker,
 * ps in that order, each address "$(addr <task index>)"; the evaluator is
 * not listed (TensorFlow's and the training operator's layout). */
static void cluster_json(FILE *out, const struct dt_launch_task *tasks, int n)
{
	static const enum dt_job order[] = { DT_JOB_CHIEF, DT_JOB_WORKER, DT_JOB_PS };
	fputs("cluster=\"{", out);
	int first_job = 1;
	for (size_t j = 0; j < DT_ARRAY_LEN(order); j++) {
		int first = 1;
		for (int i = 0; i < n; i++) {
			if (tasks[i].ref.job != order[j])
				continue;
			if (first)
				fprintf(out, "%s\\\"%s\\\": [", first_job ? "" : ", ", dt_job_name(order[j]));
			fprintf(out, "%s\\\"$(addr %d)\\\"", first ? "" : ", ", i);
			first = first_job = 0;
		}
		if (!first)
			fputs("]", out);
	}
	fputs("}\"\n", out);
}

enum dt_status dt_launch_emit_slurm(const struct dt_launch_spec *s, const char *bin, FILE *out, struct dt_err *err)
{
	struct dt_launch_task tasks[DT_LAUNCH_MAX_TASKS];
	int n = dt_launch_tasks(s, tasks);
	const char *name = spec_name(s);
	int nodes = s->nodes > 0 ? s->nodes : 1;
	if (nodes > n)
		return dt_err_set(err, DT_CONFIG, "'nodes: %d' is more than the experiment's %d tasks", nodes, n);
	int per_node = (n + nodes - 1) / nodes;
	int cpus = 1;
	int64_t mem_per_cpu = 0; /* MiB */
	for (int g = 0; g < DT_GROUP_COUNT; g++) {
		int c = s->res[g].cpus > 0 ? s->res[g].cpus : 1;
		if (c > cpus)
			cpus = c;
		int64_t m = s->res[g].mem_bytes > 0 ? ((s->res[g].mem_bytes >> 20) + c - 1) / c : 0;
		if (m > mem_per_cpu)
			mem_per_cpu = m;
	}
	int restarts = s->restart != DT_RESTART_NEVER && s->backoff_limit > 0;
	/* An elastic all-reduce ring (DISTRIBUTED.md) goes on without a lost
	 * task: a node that fails must not end the allocation (--no-kill), and
	 * the restarted step rejoins. Each task is a step of one task of its own,
	 * so a step's failure never kills another (srun's --kill-on-bad-exit acts
	 * within a step only). */
	int elastic = 0;
	for (int i = 0; i < s->nargs; i++)
		elastic |= s->mode == DT_LAUNCH_MIRRORED && strncmp(s->args[i], "--min_workers", 13) == 0;

	fprintf(out, "#!/bin/bash\n");
	fprintf(out, "# dtrain launch --emit=slurm: experiment '%s', mode %s, %d tasks on %d node%s.\n", name,
		dt_launch_mode_name(s->mode), n, nodes, nodes == 1 ? "" : "s");
	fprintf(out, "# Each task is a job step of its own with the TF_CONFIG `dtrain launch` gives it (real host\n"
		     "# names, ports from the job id); restart policy %s, backoff_limit %d. Submit: sbatch <this file>\n",
		dt_restart_policy_name(s->restart), s->backoff_limit);
	fprintf(out, "#SBATCH --job-name=%s\n#SBATCH --nodes=%d\n#SBATCH --ntasks=%d\n#SBATCH --ntasks-per-node=%d\n", name,
		nodes, n, per_node);
	fprintf(out, "#SBATCH --cpus-per-task=%d\n", cpus);
	if (mem_per_cpu > 0)
		fprintf(out, "#SBATCH --mem-per-cpu=%lldM\n", (long long)mem_per_cpu);
	fprintf(out, "#SBATCH --output=%s-%%j.out\n", name);
	if (elastic)
		fprintf(out, "# Elastic all-reduce (--min_workers): a failed node does not end the job; the ring goes on\n"
			     "# without its tasks while enough remain, and a restarted step rejoins it.\n#SBATCH --no-kill\n");
	if (restarts)
		fprintf(out, "#SBATCH --requeue\n");
	fprintf(out, "set -u\n: \"${SLURM_JOB_ID:?run this script with sbatch}\"\nDTRAIN=${DTRAIN:-");
	shq(out, bin);
	fprintf(out, "}\nsubmit=${SLURM_SUBMIT_DIR:-$PWD}\n");
	const char *od = s->output_dir;
	if (od && od[0] == '/') {
		fprintf(out, "export OUTPUT_DIR=${OUTPUT_DIR:-");
		shq(out, od);
		fprintf(out, "}\n");
	} else {
		fprintf(out, "export OUTPUT_DIR=${OUTPUT_DIR:-\"$submit\"/");
		if (od)
			shq(out, od);
		else /* one per job, as `launch` gives one per experiment; a requeued job keeps its id */
			fprintf(out, "%s-\"$SLURM_JOB_ID\"", name);
		fprintf(out, "}\n");
	}
	fprintf(out, "export EXPERIMENT_ID=%s-$SLURM_JOB_ID\nunset TF_CONFIG\nmkdir -p \"$OUTPUT_DIR\" || exit 4\n", name);
	/* The cluster secret: made here at run time (never in this script, which
	 * others may read), one per job (a requeued job keeps its id and its
	 * secret), 0600 in the output dir that every node shares; srun passes
	 * the environment on to every step. */
	fprintf(out, "export DTRAIN_CLUSTER_SECRET_FILE=${DTRAIN_CLUSTER_SECRET_FILE:-\"$OUTPUT_DIR/cluster_secret.$SLURM_JOB_ID\"}\n"
		     "[ -e \"$DTRAIN_CLUSTER_SECRET_FILE\" ] || \"$DTRAIN\" secret new \"$DTRAIN_CLUSTER_SECRET_FILE\" >/dev/null "
		     "|| exit 4\n");
	fprintf(out, "state=$(mktemp -d)\necho 0 > \"$state/restarts\"\n");
	fprintf(out, "port_base=${DTRAIN_PORT_BASE:-$((20000 + SLURM_JOB_ID %% 600 * 64))}\n");
	fprintf(out, "mapfile -t hosts < <(scontrol show hostnames \"$SLURM_JOB_NODELIST\")\n");
	fprintf(out, "[ \"${#hosts[@]}\" -ge 1 ] || { echo \"no hosts in SLURM_JOB_NODELIST\" >&2; exit 2; }\n");
	fprintf(out, "per_node=%d\n", per_node);
	fprintf(out, "host_of() { echo \"${hosts[$(( $1 / per_node %% ${#hosts[@]} ))]}\"; }\n");
	fprintf(out, "addr() { echo \"$(host_of \"$1\"):$((port_base + $1 %% per_node))\"; }\n");
	cluster_json(out, tasks, n);

	/* Restart rules: dt_launch_should_restart's, in bash. */
	fprintf(out, "restartable() {\n");
	switch (s->restart) {
	case DT_RESTART_NEVER:
		fprintf(out, "  return 1\n");
		break;
	case DT_RESTART_ON_FAILURE:
		fprintf(out, "  [ \"$1\" -ne 0 ]\n");
		break;
	case DT_RESTART_EXIT_CODE:
		fprintf(out, "  case $1 in 3|130|137|138|143) return 0;; esac\n  [ \"$1\" -gt 128 ]\n");
		break;
	}
	fprintf(out, "}\n");
	/* One restart from the experiment's budget, under a lock (the runners
	 * are concurrent subshells of this script). */
	fprintf(out, "take_restart() {\n  ( flock -x 9; n=$(cat \"$state/restarts\"); [ \"$n\" -lt %d ] || exit 1\n"
		     "    echo $((n + 1)) > \"$state/restarts\" ) 9>\"$state/lock\"\n}\n", s->backoff_limit);
	fprintf(out, "say() { echo \"[$(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ)] %s.$1 --> $2\"; }\n", name);
	/* run_task NAME TYPE INDEX TASK CPUS ARGV...: one step, restarted per the rules. */
	fprintf(out,
		"run_task() {\n"
		"  local name=$1 type=$2 index=$3 i=$4 c=$5 code tries=0 delay; shift 5\n"
		"  while :; do\n"
		"    say \"$name\" \"RUNNING on $(host_of \"$i\") port $((port_base + i %% per_node))\"\n"
		"    TF_CONFIG=\"{\\\"cluster\\\": $cluster, \\\"task\\\": {\\\"type\\\": \\\"$type\\\", \\\"index\\\": $index}, "
		"\\\"environment\\\": \\\"cloud\\\"}\" \\\n"
		"    TASK_TYPE=$type TASK_INDEX=$index DTRAIN_TASK=$name \\\n"
		"      srun --nodes=1 --ntasks=1 --exact --cpus-per-task=\"$c\" -w \"$(host_of \"$i\")\" --job-name=\"$name\" "
		"\"$@\" &\n"
		"    echo $! > \"$state/$name.pid\"\n"
		"    wait $!; code=$?\n"
		"    [ \"$code\" -eq 0 ] && { say \"$name\" FINISHED; return 0; }\n"
		"    if [ ! -e \"$state/stop\" ] && restartable \"$code\" && take_restart; then\n"
		"      tries=$((tries + 1)); delay=$(( tries >= 4 ? 8 : 1 << (tries - 1) ))\n"
		"      say \"$name\" \"FAILED (exit code $code), restart in $delay s\"; sleep \"$delay\"; continue\n"
		"    fi\n"
		"    say \"$name\" \"FAILED (exit code $code)\"; return \"$code\"\n"
		"  done\n"
		"}\n");
	fprintf(out, "stop_task() { local p; p=$(cat \"$state/$1.pid\" 2>/dev/null) && kill -TERM \"$p\" 2>/dev/null; }\n");
	fprintf(out, "kill_task() { local p; p=$(cat \"$state/$1.pid\" 2>/dev/null) && kill -KILL \"$p\" 2>/dev/null; }\n");
	/* wait_for PID SECONDS: 0 once PID ended within SECONDS, else 1. */
	fprintf(out, "wait_for() { local k; for ((k = 0; k < $2 * 5; k++)); do kill -0 \"$1\" 2>/dev/null || return 0;"
		     " sleep 0.2; done; ! kill -0 \"$1\" 2>/dev/null; }\n");
	fprintf(out, "trap 'touch \"$state/stop\"; for t in \"${names[@]}\"; do stop_task \"$t\"; done' TERM INT\n");
	fprintf(out, "names=(); pids=(); jobs_of=()\n");

	for (int i = 0; i < n; i++) {
		const struct dt_launch_task *t = &tasks[i];
		int c = s->res[t->group].cpus > 0 ? s->res[t->group].cpus : 1;
		int argc;
		char **argv = dt_launch_argv(s, t, "dtrain", NULL, &argc);
		fprintf(out, "run_task %s %s %d %d %d", t->name, dt_job_name(t->ref.job), t->ref.index, i, c);
		for (int a = 0; a < argc; a++) {
			fputc(' ', out);
			if (a == 0 && !s->ncommand)
				fputs("\"$DTRAIN\"", out);
			else
				shq(out, argv[a]);
		}
		dt_launch_argv_free(argv);
		fprintf(out, " &\nnames+=(%s); pids+=($!); jobs_of+=(%s)\n", t->name, dt_job_name(t->ref.job));
	}
	/* Teardown, as run.h's rules. */
	fprintf(out,
		"rc=0\n"
		"note_rc() { [ \"$rc\" -eq 0 ] && [ \"$1\" -ne 0 ] && rc=$1; return 0; }\n"
		"for k in \"${!names[@]}\"; do\n"
		"  case ${jobs_of[$k]} in chief|worker) ;; *) continue;; esac\n"
		"  wait \"${pids[$k]}\"; code=$?; note_rc \"$code\"\n"
		"  if [ \"${jobs_of[$k]}\" = chief ] && [ \"$code\" -ne 0 ]; then\n"
		"    say chief \"failed: stopping every task\"; touch \"$state/stop\"\n"
		"    for t in \"${names[@]}\"; do stop_task \"$t\"; done\n"
		"  fi\n"
		"done\n"
		"for k in \"${!names[@]}\"; do\n"
		"  case ${jobs_of[$k]} in ps) limit=5;; evaluator) limit=%d;; *) continue;; esac\n"
		"  if ! wait_for \"${pids[$k]}\" \"$limit\"; then\n"
		"    say \"${names[$k]}\" \"still running $limit s after the trainers ended: stopping it\"\n"
		"    touch \"$state/stop\"; stop_task \"${names[$k]}\"\n"
		"    wait_for \"${pids[$k]}\" %d || kill_task \"${names[$k]}\"\n"
		"    wait \"${pids[$k]}\"\n"
		"  else\n"
		"    wait \"${pids[$k]}\"; note_rc $?\n"
		"  fi\n"
		"done\n"
		"rm -rf \"$state\"\n"
		"say experiment \"$([ \"$rc\" -eq 0 ] && echo FINISHED || echo FAILED) (exit code $rc)\"\n"
		"exit \"$rc\"\n",
		(int)(s->evaluator_timeout_s + 0.999), (int)(s->grace_s + 0.999));
	if (fflush(out) != 0 || ferror(out))
		return dt_err_set(err, DT_IO, "cannot write the batch script");
	return DT_OK;
}
