/* Resume at another worker count (issue 18 part 3): a checkpoint written by
 * N all-reduce workers resumes on M (2 -> 3 -> 1), and one written by N
 * in-process replicas on M (2 -> 3 -> 1), and every example of the training
 * split is read exactly once per epoch across the resizes. The lock-step
 * modes read the data as one global stream, each task a slice of each global
 * batch (data/pipeline.h), so the saved position is global. The examples each
 * task trains on come from the input trace (the test hook
 * DTRAIN_TEST_INPUT_TRACE: one line "epoch index index ..." per batch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_procs.h"
#include "dt_test.h"

#define TASK_WAIT_S 240.0
#define EXAMPLES 60000 /* Fashion-MNIST's training split */
#define BATCH 50       /* per worker (or, with replicas, the whole batch) */

/* "<tmpdir>/<dir>.trace.<name>.<w>": where task w of stage `name` appends its batches. */
static void trace_path(char *buf, size_t cap, const char *dir, const char *name, int w)
{
	snprintf(buf, cap, "%s/%s.trace.%s.%d", dt_test_tmpdir(), dir, name, w);
}

/* The DTRAIN_TEST_INPUT_TRACE entry of task w of stage `name`. */
static void trace_env(char *buf, size_t cap, const char *dir, const char *name, int w)
{
	char path[760];
	trace_path(path, sizeof(path), dir, name, w);
	snprintf(buf, cap, "DTRAIN_TEST_INPUT_TRACE=%s", path);
}

/* The command line of every stage's tasks: mlp on fashion_mnist to `steps`,
 * a checkpoint every 100 steps in the output dir `dir` (which the next stage
 * resumes from), then `extra` (NULL: none). */
struct stage_cmd {
	char out[700], steps[32], batch[64];
	const char *argv[16];
};

static void stage_cmd(struct stage_cmd *a, const char *dir, int steps, const char *extra)
{
	snprintf(a->out, sizeof(a->out), "--output_dir=%s/%s", dt_test_tmpdir(), dir);
	snprintf(a->steps, sizeof(a->steps), "--train_steps=%d", steps);
	snprintf(a->batch, sizeof(a->batch), "--hparams=batch_size=%d", BATCH);
	const char *argv[] = { "dtrain", "train", "--model=mlp", "--problem=fashion_mnist", a->steps, "--log_every=100",
			       "--noeval", "--save_checkpoints_steps=100", "--connect_timeout=60", a->batch, a->out,
			       extra, NULL };
	memcpy(a->argv, argv, sizeof(argv));
}

/* One more argument after stage_cmd's. */
static void stage_cmd_add(struct stage_cmd *a, const char *arg)
{
	int n = 0;
	while (a->argv[n])
		n++;
	DT_CHECK(n + 2 <= (int)(sizeof(a->argv) / sizeof(a->argv[0])));
	a->argv[n] = arg;
	a->argv[n + 1] = NULL;
}

/* One stage of a resized run: `workers` all-reduce workers (1: one plain
 * process, with `replicas` in-process replicas) training to `steps` in the
 * output dir `dir`, each appending its batches to its trace_path. */
static void stage(const char *dir, const char *name, int workers, int replicas, int steps)
{
	char reps[32];
	snprintf(reps, sizeof(reps), "--replicas=%d", replicas);
	struct stage_cmd cmd;
	stage_cmd(&cmd, dir, steps, reps);
	char trace[4][800];
	DT_CHECK(workers >= 1 && workers <= 4);
	for (int w = 0; w < workers; w++)
		trace_env(trace[w], sizeof(trace[w]), dir, name, w);
	if (workers == 1) {
		const char *env[] = { trace[0], NULL };
		struct dt_run r;
		dt_test_run(&r, cmd.argv, env, TASK_WAIT_S);
		if (r.exit_code != 0)
			fprintf(stderr, "%s", r.err);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		dt_run_release(&r);
		return;
	}
	struct cluster c;
	cluster_init(&c, NULL, workers, 0);
	struct task *t[4];
	for (int w = workers - 1; w >= 0; w--) {
		const char *env[] = { trace[w], NULL };
		char tname[32];
		snprintf(tname, sizeof(tname), "%s-worker%d", name, w);
		t[w] = cluster_start(&c, "worker", w, tname, cmd.argv, env);
	}
	for (int w = 0; w < workers; w++)
		EXPECT_EXIT(&c, t[w], 0, TASK_WAIT_S);
	char *err0 = task_read(t[0], 1);
	char want[128];
	snprintf(want, sizeof(want), "data: slice 0 of %d of every global batch %d", workers, BATCH * workers);
	DT_CHECK_CONTAINS(err0, want);
	free(err0);
}

/* One stage of a resized run through one ps: `trainers` trainers (the chief
 * and trainers - 1 workers) with `mode` (--sync, --ps_overlap or
 * --nops_overlap) and a fresh ps (the chief restores the checkpoint onto
 * it), traces as stage()'s; every task exits 0. Returns the chief (in c). */
static struct task *ps_stage(struct cluster *c, const char *dir, const char *name, int trainers, int steps,
			     const char *mode)
{
	struct stage_cmd cmd;
	stage_cmd(&cmd, dir, steps, mode);
	cluster_init(c, "chief", trainers - 1, 1);
	char tname[48];
	snprintf(tname, sizeof(tname), "%s-ps", name);
	struct task *ps = cluster_start(c, "ps", 0, tname, cmd.argv, NULL);
	struct task *t[4];
	char trace[4][800];
	DT_CHECK(trainers >= 1 && trainers <= 4);
	for (int w = 0; w < trainers; w++) {
		trace_env(trace[w], sizeof(trace[w]), dir, name, w);
		const char *env[] = { trace[w], NULL };
		snprintf(tname, sizeof(tname), "%s-trainer%d", name, w);
		t[w] = cluster_start(c, w == 0 ? "chief" : "worker", w == 0 ? 0 : w - 1, tname, cmd.argv, env);
	}
	for (int w = 0; w < trainers; w++)
		EXPECT_EXIT(c, t[w], 0, TASK_WAIT_S);
	EXPECT_EXIT(c, ps, 0, 30);
	return t[0];
}

/* A synchronous stage (ps_stage). */
static void sync_stage(const char *dir, const char *name, int trainers, int steps)
{
	struct cluster c;
	ps_stage(&c, dir, name, trainers, steps, "--sync");
}

/* An asynchronous stage (ps_stage), with or without --ps_overlap: the
 * trainers are dealt units, and each reported where it stopped. */
static void async_stage(const char *dir, const char *name, int trainers, int steps, int overlap)
{
	struct cluster c;
	struct task *chief = ps_stage(&c, dir, name, trainers, steps, overlap ? "--ps_overlap" : "--nops_overlap");
	char *err0 = task_read(chief, 1);
	char want[96];
	snprintf(want, sizeof(want), "batches an epoch, trainer 0 of %d", trainers);
	DT_CHECK_CONTAINS(err0, want);
	DT_CHECK(strstr(err0, "did not report their last data position") == NULL);
	free(err0);
}

/* Adds the examples of every trace file of `dir` to seen[epoch][index]
 * (epochs 0 and 1); returns the batches read. */
static long count_traces(const char *dir, const char *const *names, const int *workers, int stages,
			 unsigned char (*seen)[EXAMPLES])
{
	long batches = 0;
	for (int s = 0; s < stages; s++)
		for (int w = 0; w < workers[s]; w++) {
			char path[800];
			trace_path(path, sizeof(path), dir, names[s], w);
			FILE *f = fopen(path, "r");
			if (!f)
				dt_test_fail(__FILE__, __LINE__, "no input trace '%s'", path);
			char line[8192];
			while (fgets(line, sizeof(line), f)) {
				char *p = line, *end;
				long epoch = strtol(p, &end, 10);
				DT_CHECK(end != p && epoch >= 0);
				p = end;
				int n = 0;
				for (long idx; (idx = strtol(p, &end, 10)), end != p; p = end, n++) {
					DT_CHECK(idx >= 0 && idx < EXAMPLES);
					if (epoch < 2 && seen[epoch][idx] < 255)
						seen[epoch][idx]++;
				}
				DT_CHECK(n > 0 && n <= BATCH);
				batches++;
			}
			fclose(f);
		}
	return batches;
}

/* Every example of `epoch` read at most once, and `expect` of them in all. */
static void expect_once(unsigned char (*seen)[EXAMPLES], int epoch, long expect)
{
	long once = 0, twice = 0;
	for (int i = 0; i < EXAMPLES; i++) {
		once += seen[epoch][i] == 1;
		twice += seen[epoch][i] > 1;
	}
	fprintf(stderr, "epoch %d: %ld examples read once, %ld more than once (expected %ld once)\n", epoch, once,
		twice, expect);
	DT_CHECK_INT_EQ(twice, 0);
	DT_CHECK_INT_EQ(once, expect);
}

/* 2 workers to step 200 (epoch 0: 200 global batches of 100), 3 to step 480
 * (the rest of epoch 0, 39,900 examples in 266 global batches of 150, the
 * last 100 not a whole global batch; then 14 batches of epoch 1), 1 process to
 * step 1640 (the rest of epoch 1: 1,158 batches of 50, then 2 of epoch 2). */
DT_TEST_TIMEOUT(resize, allreduce_2_to_3_to_1_workers_read_each_example_once_per_epoch, 300)
{
	stage("ar", "two", 2, 1, 200);
	stage("ar", "three", 3, 1, 480);
	stage("ar", "one", 1, 1, 1640);
	static unsigned char seen[2][EXAMPLES];
	const char *names[] = { "two", "three", "one" };
	const int workers[] = { 2, 3, 1 };
	long batches = count_traces("ar", names, workers, 3, seen);
	DT_CHECK_INT_EQ(batches, 200 * 2 + 280 * 3 + 1160);
	expect_once(seen, 0, 200 * 100 + 266 * 150);
	expect_once(seen, 1, EXAMPLES);
}

/* Replicas split each batch of the one input stream: 2 replicas to step 300,
 * 3 to step 1300 (epoch 0 ends at step 1200: 60,000 / 50), 1 to step 2410
 * (epoch 1 ends at 2400). */
DT_TEST_TIMEOUT(resize, replicas_2_to_3_to_1_read_each_example_once_per_epoch, 300)
{
	stage("reps", "two", 1, 2, 300);
	stage("reps", "three", 1, 3, 1300);
	stage("reps", "one", 1, 1, 2410);
	static unsigned char seen[2][EXAMPLES];
	const char *names[] = { "two", "three", "one" };
	const int workers[] = { 1, 1, 1 };
	long batches = count_traces("reps", names, workers, 3, seen);
	DT_CHECK_INT_EQ(batches, 2410);
	expect_once(seen, 0, EXAMPLES);
	expect_once(seen, 1, EXAMPLES);
}

/* Synchronous training through a ps, the same stages as the all-reduce
 * test: 2 trainers to step 200, 3 to 480, 1 to 1640. The chief's
 * checkpoints save its global position, which every trainer of the next
 * stage resumes from. */
DT_TEST_TIMEOUT(resize, sync_ps_2_to_3_to_1_trainers_read_each_example_once_per_epoch, 300)
{
	sync_stage("sync", "two", 2, 200);
	sync_stage("sync", "three", 3, 480);
	sync_stage("sync", "one", 1, 1640);
	static unsigned char seen[2][EXAMPLES];
	const char *names[] = { "two", "three", "one" };
	const int workers[] = { 2, 3, 1 };
	long batches = count_traces("sync", names, workers, 3, seen);
	DT_CHECK_INT_EQ(batches, 200 * 2 + 280 * 3 + 1160);
	expect_once(seen, 0, 200 * 100 + 266 * 150);
	expect_once(seen, 1, EXAMPLES);
}

/* Asynchronous training through a ps (issue 18 part 3): 2 trainers to
 * global step 200, 3 to 1300, 1 to 2420. The trainers do not step
 * together, so each reads units (whole batches of one epoch order) dealt
 * round-robin, and each round tells ps:0 where its trainer is; the chief's
 * checkpoints hold every trainer's position, and the next stage deals out
 * the batches of the epoch nobody read yet (data/units.h). A trainer racing
 * for the last step may read one batch more than the step count says, so
 * the counts are of epochs 0 and 1 (1,200 batches each), which the stages
 * finish: every example of both read exactly once. */
DT_TEST_TIMEOUT(resize, async_ps_2_to_3_to_1_trainers_read_each_example_once_per_epoch, 300)
{
	async_stage("async", "two", 2, 200, 0);
	async_stage("async", "three", 3, 1300, 0);
	async_stage("async", "one", 1, 2420, 0);
	static unsigned char seen[2][EXAMPLES];
	const char *names[] = { "two", "three", "one" };
	const int workers[] = { 2, 3, 1 };
	long batches = count_traces("async", names, workers, 3, seen);
	DT_CHECK(batches >= 2420 && batches <= 2420 + 2 + 3);
	expect_once(seen, 0, EXAMPLES);
	expect_once(seen, 1, EXAMPLES);
}

/* The same with --ps_overlap (the default): a trainer computes its next
 * step's gradient while its round is in flight, so at the end of a stage it
 * has read one batch whose gradient was never pushed; its saved position is
 * before it, and the next stage reads it again. So at most one batch per
 * trainer of a stage (2 + 3 + 1) is read twice, and every example of epochs
 * 0 and 1 at least once. */
DT_TEST_TIMEOUT(resize, async_ps_with_overlap_reads_again_only_each_trainers_last_batch, 300)
{
	async_stage("asyncov", "two", 2, 200, 1);
	async_stage("asyncov", "three", 3, 1300, 1);
	async_stage("asyncov", "one", 1, 2420, 1);
	static unsigned char seen[2][EXAMPLES];
	const char *names[] = { "two", "three", "one" };
	const int workers[] = { 2, 3, 1 };
	(void)count_traces("asyncov", names, workers, 3, seen);
	long never = 0, twice = 0;
	for (int e = 0; e < 2; e++)
		for (int i = 0; i < EXAMPLES; i++) {
			never += seen[e][i] == 0;
			twice += seen[e][i] > 1;
		}
	fprintf(stderr, "epochs 0 and 1: %ld examples never read, %ld more than once\n", never, twice);
	DT_CHECK_INT_EQ(never, 0);
	DT_CHECK(twice <= (2 + 3 + 1) * BATCH);
}

/* One ps, the chief and one worker of `cmd`, the worker started once the
 * chief's log shows `chief_at` (the run at its last step); all three must
 * exit 0. The worker's and the chief's stderr into *werr and *cerr (the
 * caller frees them). Task names start with `name`. */
static void run_late_trainer(const struct stage_cmd *cmd, const char *name, const char *const *chief_env,
			     const char *chief_at, char **werr, char **cerr)
{
	char ps_name[32], chief_name[32], worker_name[32];
	snprintf(ps_name, sizeof(ps_name), "%s-ps", name);
	snprintf(chief_name, sizeof(chief_name), "%s-chief", name);
	snprintf(worker_name, sizeof(worker_name), "%s-worker", name);
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	struct task *ps = cluster_start(&c, "ps", 0, ps_name, cmd->argv, NULL);
	struct task *chief = cluster_start(&c, "chief", 0, chief_name, cmd->argv, chief_env);
	EXPECT_LOG(&c, chief, chief_at, 60);
	struct task *worker = cluster_start(&c, "worker", 0, worker_name, cmd->argv, NULL);
	EXPECT_EXIT(&c, worker, 0, 60);
	EXPECT_EXIT(&c, chief, 0, 60);
	EXPECT_EXIT(&c, ps, 0, 30);
	*werr = task_read(worker, 1);
	*cerr = task_read(chief, 1);
}

/* A trainer that starts after the run reached its step count (late, or
 * restarted near the end) takes no step, but still does one round: it
 * pulls the run's variables and reports its data position, which the
 * chief's final checkpoint waits for. The chief trains the 200 steps
 * alone; the worker starts while the chief waits for every position (it
 * logs "did N of M global steps" just before, and waits up to 10 s). Under
 * load this is what the stages above met when a worker started late: the
 * chief waited 10 s and warned that a trainer did not report. */
DT_TEST_TIMEOUT(resize, a_trainer_starting_after_the_last_step_pulls_and_reports_its_position, 120)
{
	struct stage_cmd cmd;
	stage_cmd(&cmd, "late", 200, "--nops_overlap");
	char *werr, *cerr;
	run_late_trainer(&cmd, "late", NULL, "did 200 of ", &werr, &cerr);
	DT_CHECK_CONTAINS(werr, "before this trainer's first step: took none, pulled the run's variables");
	DT_CHECK_CONTAINS(werr, "did 0 of 200 global steps"); /* the run's step, not "0 of 0" */
	DT_CHECK(strstr(cerr, "did not report their last data position") == NULL);
	DT_CHECK_CONTAINS(cerr, "ended the run on 1 parameter server(s) at global step 200");
	free(werr), free(cerr);
}

/* The same in synchronous training: a trainer that starts after the run's
 * last step takes none, but pulls the run's variables (a synchronous ps
 * keeps no trainer positions: the chief's checkpoints hold the global one).
 * The chief trains the 200 steps alone (--replicas_to_aggregate=1: the
 * worker is a backup) and holds the end of the run 20 s
 * (DTRAIN_TEST_END_DELAY_S: the window is otherwise one checkpoint's save),
 * in which the worker starts, finds the run at its last step and pulls. */
DT_TEST_TIMEOUT(resize, a_sync_trainer_starting_after_the_last_step_pulls_the_runs_variables, 120)
{
	struct stage_cmd cmd;
	stage_cmd(&cmd, "latesync", 200, "--sync");
	stage_cmd_add(&cmd, "--replicas_to_aggregate=1");
	const char *chief_env[] = { "DTRAIN_TEST_END_DELAY_S=20", NULL };
	char *werr, *cerr;
	run_late_trainer(&cmd, "latesync", chief_env, "the chief holds the end of the run", &werr, &cerr);
	DT_CHECK_CONTAINS(werr, "the run had reached synchronous global step 200 (--train_steps=200) before this "
				"trainer's first step: took none, pulled the run's variables");
	DT_CHECK_CONTAINS(werr, "did 0 of 200 synchronous steps"); /* the run's step, not "0 of 0" */
	DT_CHECK_CONTAINS(cerr, "did 200 of 200 synchronous steps");
	DT_CHECK_CONTAINS(cerr, "ended the run on 1 parameter server(s) at global step 200");
	free(werr), free(cerr);
}
