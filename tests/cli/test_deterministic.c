/* --deterministic (train/fixed_point.h): the same global batch computed by
 * 1, 2 or 4 all-reduce workers (processes on loopback), or by 1, 2 or 4
 * in-process replicas, leaves checkpoints whose tensors are the same bytes;
 * and the flag's usage errors. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cluster_procs.h"
#include "dt_test.h"

#define TASK_WAIT_S 240.0

/* The tensor bytes of a checkpoint (everything after the safetensors
 * header: every variable, slot and the step), malloc'd; *len their size. */
static uint8_t *tensor_bytes(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		dt_test_fail(__FILE__, __LINE__, "cannot open checkpoint '%s'", path);
	struct stat st;
	DT_CHECK(fstat(fileno(f), &st) == 0 && st.st_size > 8);
	uint8_t *all = malloc((size_t)st.st_size);
	DT_CHECK(all && fread(all, 1, (size_t)st.st_size, f) == (size_t)st.st_size);
	fclose(f);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | all[i];
	DT_CHECK(8 + n < (uint64_t)st.st_size);
	*len = (size_t)st.st_size - 8 - (size_t)n;
	uint8_t *data = malloc(*len);
	DT_CHECK(data != NULL);
	memcpy(data, all + 8 + n, *len);
	free(all);
	return data;
}

/* Fails unless the step-`step` checkpoints of dirs a and b hold the same tensor bytes. */
static void expect_same_tensors(const char *a, const char *b, int step)
{
	char pa[2400], pb[2400];
	snprintf(pa, sizeof(pa), "%s/model.ckpt-%d.safetensors", a, step);
	snprintf(pb, sizeof(pb), "%s/model.ckpt-%d.safetensors", b, step);
	size_t la, lb;
	uint8_t *da = tensor_bytes(pa, &la), *db = tensor_bytes(pb, &lb);
	DT_CHECK(la == lb);
	size_t first = 0;
	while (first < la && da[first] == db[first])
		first++;
	if (first != la)
		dt_test_fail(__FILE__, __LINE__, "%s and %s differ first at tensor byte %zu of %zu", pa, pb, first, la);
	free(da), free(db);
}

/* `workers` all-reduce workers (or one plain process when 1), batch
 * `global` / workers each (and the hparams `more`: "" or ",name=value..."),
 * with `common` args (--micro_batch=`micro` among them); the chief's output
 * dir `dir`. The method is K's (fixed_point.h): at most 3 micro-batches in
 * the global step, summed in micro-batch order (on 2 or 3 workers the raw
 * gradients all-gathered, session_deal.c), more in fixed point; the chief
 * says which. */
static void train_global(int workers, int global, const char *dir, const char *const *common, const char *more,
			 int micro)
{
	char batch[128], out[2400];
	const int k = global / micro;
	const char *method = k <= 3 ? "gradients summed in micro-batch order" : "gradients summed in 64-bit fixed point";
	snprintf(batch, sizeof(batch), "--hparams=batch_size=%d%s", global / workers, more);
	snprintf(out, sizeof(out), "--output_dir=%s/%s", dt_test_tmpdir(), dir);
	const char *args[24];
	int n = 0;
	for (int i = 0; common[i] && n < 20; i++)
		args[n++] = common[i];
	args[n++] = batch;
	args[n++] = out;
	args[n] = NULL;
	if (workers == 1) {
		const char *argv[26] = { "dtrain", "train" };
		for (int i = 0; i <= n; i++)
			argv[2 + i] = args[i];
		struct dt_run r;
		dt_test_run(&r, argv, NULL, TASK_WAIT_S);
		if (r.exit_code != 0)
			fprintf(stderr, "%s", r.err);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		char want[160];
		snprintf(want, sizeof(want), "deterministic: micro-batches of %d, %d per step on this task (%d in all)",
			 micro, k, k);
		DT_CHECK_CONTAINS(r.err, want);
		DT_CHECK_CONTAINS(r.err, method);
		dt_run_release(&r);
		return;
	}
	struct cluster c;
	cluster_init(&c, NULL, workers, 0);
	struct task *t[4];
	for (int w = workers - 1; w >= 0; w--)
		t[w] = cluster_start_train(&c, "worker", w, args);
	for (int w = 0; w < workers; w++)
		EXPECT_EXIT(&c, t[w], 0, TASK_WAIT_S);
	char *err0 = task_read(t[0], 1);
	DT_CHECK_CONTAINS(err0, "after the backward pass (--deterministic: its method in the line below)");
	char want[64];
	snprintf(want, sizeof(want), "(%d in all)", k);
	DT_CHECK_CONTAINS(err0, want);
	DT_CHECK_CONTAINS(err0, method);
	DT_CHECK_INT_EQ(strstr(err0, "(every task's all-gathered and summed by each)") != NULL, k < 4);
	free(err0);
}

static void train_workers_at(int workers, const char *dir, const char *const *common, const char *more, int micro)
{
	train_global(workers, 64, dir, common, more, micro);
}

static void train_workers_hp(int workers, const char *dir, const char *const *common, const char *more)
{
	train_workers_at(workers, dir, common, more, 16);
}

static void train_workers(int workers, const char *dir, const char *const *common)
{
	train_workers_hp(workers, dir, common, "");
}

static void dir_path(char *buf, size_t cap, const char *name)
{
	snprintf(buf, cap, "%s/%s", dt_test_tmpdir(), name);
}

/* mlp with Adam and weight decay: 1, 2 and 4 workers, global batch 64 in
 * micro-batches of 16 (K = 4: fixed point; fixed_point's unit test shows
 * the float sums of the same terms in two orders differ), the workers' int64
 * sums all-reduced; then 1 and 2 at micro-batches of 32 (K = 2: the ordered
 * sum), the two's raw gradients gathered. */
DT_TEST_TIMEOUT(deterministic, one_two_and_four_workers_write_the_same_checkpoint, 600)
{
	const char *common[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=40", "--log_every=20",
				 "--noeval", "--deterministic", "--micro_batch=16", "--save_checkpoints_steps=40",
				 "--connect_timeout=60", "--hparams_set=mlp_base", NULL };
	train_workers(1, "w1", common);
	train_workers(2, "w2", common);
	train_workers(4, "w4", common);
	char a[2200], b[2200], d[2200];
	dir_path(a, sizeof(a), "w1"), dir_path(b, sizeof(b), "w2"), dir_path(d, sizeof(d), "w4");
	expect_same_tensors(a, b, 40);
	expect_same_tensors(a, d, 40);
	/* one micro-batch of 32 a worker: the two workers' raw gradients all-gathered */
	const char *one_each[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=40", "--log_every=20",
				   "--noeval", "--deterministic", "--micro_batch=32", "--save_checkpoints_steps=40",
				   "--connect_timeout=60", "--hparams_set=mlp_base", NULL };
	train_workers_at(1, "g1", one_each, "", 32);
	train_workers_at(2, "g2", one_each, "", 32);
	dir_path(a, sizeof(a), "g1"), dir_path(b, sizeof(b), "g2");
	expect_same_tensors(a, b, 40);
}

/* K = 3 (the ordered sum's largest): one process summing its three
 * micro-batches and three workers each computing one and summing all three
 * after the all-gather write the same tensor bytes. */
DT_TEST_TIMEOUT(deterministic, three_micro_batches_on_one_and_three_workers_write_the_same_checkpoint, 600)
{
	const char *common[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=40", "--log_every=20",
				 "--noeval", "--deterministic", "--micro_batch=16", "--save_checkpoints_steps=40",
				 "--connect_timeout=60", "--hparams_set=mlp_base", NULL };
	train_global(1, 48, "k3w1", common, "", 16);
	train_global(3, 48, "k3w3", common, "", 16);
	char a[2200], b[2200];
	dir_path(a, sizeof(a), "k3w1"), dir_path(b, sizeof(b), "k3w3");
	expect_same_tensors(a, b, 40);
}

/* clip_grad_norm with --deterministic: clipped after the fixed-point sum,
 * so 1 and 2 workers clip the same mean to the same bits (every step's norm
 * is over 0.05 here: each progress line says 20 of 20 clipped). */
DT_TEST_TIMEOUT(deterministic, clip_grad_norm_on_one_and_two_workers_writes_the_same_checkpoint, 600)
{
	const char *common[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=40", "--log_every=20",
				 "--noeval", "--deterministic", "--micro_batch=16", "--save_checkpoints_steps=40",
				 "--connect_timeout=60", "--hparams_set=mlp_base", NULL };
	train_workers_hp(1, "c1", common, ",clip_grad_norm=0.05");
	train_workers_hp(2, "c2", common, ",clip_grad_norm=0.05");
	train_workers(1, "c0", common);
	char a[2200], b[2200], d[2200];
	dir_path(a, sizeof(a), "c1"), dir_path(b, sizeof(b), "c2"), dir_path(d, sizeof(d), "c0");
	expect_same_tensors(a, b, 40);
	/* and clipping changed the run: the unclipped checkpoint differs */
	char pa[2400], pd[2400];
	snprintf(pa, sizeof(pa), "%s/model.ckpt-40.safetensors", a);
	snprintf(pd, sizeof(pd), "%s/model.ckpt-40.safetensors", d);
	size_t la, ld;
	uint8_t *da = tensor_bytes(pa, &la), *dd = tensor_bytes(pd, &ld);
	DT_CHECK(la == ld && memcmp(da, dd, la) != 0);
	free(da), free(dd);
}

/* `replicas` in-process replicas of cnn, batch `batch` in micro-batches of 8,
 * 6 steps, into dir `name` (its path in dir); the log names the method. */
static void train_replicas(const char *name, int replicas, int batch, char *dir, size_t cap)
{
	char out[2400], reps[32], hp[64];
	dir_path(dir, cap, name);
	snprintf(out, sizeof(out), "--output_dir=%s/%s", dt_test_tmpdir(), name);
	snprintf(reps, sizeof(reps), "--replicas=%d", replicas);
	snprintf(hp, sizeof(hp), "--hparams=batch_size=%d", batch);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=cnn", "--problem=fashion_mnist", "--train_steps=6",
					 "--log_every=0", "--noeval", "--deterministic", "--micro_batch=8", hp, reps, out,
					 NULL },
		    NULL, TASK_WAIT_S);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, batch / 8 <= 3 ? "gradients summed in micro-batch order"
						: "gradients summed in 64-bit fixed point");
	dt_run_release(&r);
}

/* cnn (dropout 0.3: each micro-batch's masks come from its own stream) on
 * 1, 2 and 4 in-process replicas, batch 32 in micro-batches of 8 (K = 4:
 * fixed point); and on 1 and 3, batch 24 (K = 3: the ordered sum, each
 * replica's micro-batch kept at its index in the step, whichever computes it). */
DT_TEST_TIMEOUT(deterministic, one_two_and_four_replicas_write_the_same_checkpoint, 600)
{
	char dirs[3][2200];
	train_replicas("r0", 1, 32, dirs[0], sizeof(dirs[0]));
	train_replicas("r1", 2, 32, dirs[1], sizeof(dirs[1]));
	train_replicas("r2", 4, 32, dirs[2], sizeof(dirs[2]));
	expect_same_tensors(dirs[0], dirs[1], 6);
	expect_same_tensors(dirs[0], dirs[2], 6);
	train_replicas("q1", 1, 24, dirs[0], sizeof(dirs[0]));
	train_replicas("q3", 3, 24, dirs[1], sizeof(dirs[1]));
	expect_same_tensors(dirs[0], dirs[1], 6);
}

DT_TEST_TIMEOUT(deterministic, usage_errors_exit_2, 120)
{
	struct dt_run r;
	/* 24 does not divide 64 */
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=2",
					 "--deterministic", "--micro_batch=24", "--hparams=batch_size=64", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--micro_batch=24 must divide the batch of 64 per worker");
	dt_run_release(&r);
	/* 32 does not fit each of 4 replicas of a batch of 64 */
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=2",
					 "--deterministic", "--micro_batch=32", "--replicas=4", "--hparams=batch_size=64",
					 NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "fit each of its 4 replica(s) (at most 16)");
	dt_run_release(&r);
	/* through parameter servers */
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=2",
					 "--deterministic", "--ps_hosts=127.0.0.1:1", "--worker_hosts=127.0.0.1:2",
					 "--job_name=worker", "--task_index=0", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--deterministic is built for one process, --replicas and all-reduce clusters");
	dt_run_release(&r);
}

/* Resume at another worker count: with --deterministic the input position
 * is the global batch's (the same on every task), so 2 workers' checkpoint
 * resumed by 4 workers, and that one by 1 process, end where one process
 * training straight through ends, to the byte. */
DT_TEST_TIMEOUT(deterministic, a_checkpoint_resumes_at_another_worker_count_bit_for_bit, 600)
{
	const char *first[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=20", "--log_every=10",
				"--noeval", "--deterministic", "--micro_batch=16", "--save_checkpoints_steps=20",
				"--connect_timeout=60", NULL };
	const char *second[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=40", "--log_every=10",
				 "--noeval", "--deterministic", "--micro_batch=16", "--save_checkpoints_steps=20",
				 "--connect_timeout=60", NULL };
	const char *third[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=60", "--log_every=10",
				"--noeval", "--deterministic", "--micro_batch=16", "--save_checkpoints_steps=20",
				"--connect_timeout=60", NULL };
	train_workers(2, "resized", first);
	train_workers(4, "resized", second);
	train_workers(1, "resized", third);
	train_workers(1, "straight", third);
	char a[2200], b[2200];
	dir_path(a, sizeof(a), "resized"), dir_path(b, sizeof(b), "straight");
	expect_same_tensors(a, b, 60);
}

/* `workers` (2 or 3) workers of an elastic ring (--min_workers among the
 * common args), the chief's output dir `dir`; with kill_at, the last worker
 * is SIGKILLed after its progress line kill_at and started again at once.
 * `gathered`: K <= 3, the ordered sum, the raw gradients all-gathered. */
static void elastic_ring(int workers, const char *dir, const char *const *common, const char *kill_at,
			 const char *in_all, int gathered)
{
	const int last = workers - 1;
	char out[2400];
	snprintf(out, sizeof(out), "--output_dir=%s/%s", dt_test_tmpdir(), dir);
	const char *args[24];
	int n = 0;
	for (int i = 0; common[i] && n < 20; i++)
		args[n++] = common[i];
	args[n++] = out;
	args[n] = NULL;
	const char *argv[26] = { "dtrain", "train" };
	for (int i = 0; i <= n; i++)
		argv[2 + i] = args[i];
	struct cluster c;
	cluster_init(&c, NULL, workers, 0);
	struct task *t[3], *again = NULL;
	for (int w = 0; w < workers; w++)
		t[w] = cluster_start_train(&c, "worker", w, args);
	if (kill_at) {
		EXPECT_LOG(&c, t[last], kill_at, TASK_WAIT_S);
		kill(t[last]->pid, SIGKILL);
		DT_CHECK_INT_EQ(task_wait(t[last], 10), 128 + SIGKILL);
		again = cluster_start(&c, "worker", last, "workeragain", argv, NULL);
	}
	EXPECT_EXIT(&c, t[0], 0, TASK_WAIT_S);
	for (int w = 1; w < last; w++)
		EXPECT_EXIT(&c, t[w], 0, 60);
	EXPECT_EXIT(&c, again ? again : t[last], 0, 60);
	char *err0 = task_read(t[0], 1);
	DT_CHECK_CONTAINS(err0, in_all);
	/* 3 micro-batches: summed in order, the raw gradients all-gathered; 6: fixed point */
	DT_CHECK_CONTAINS(err0, gathered ? "gradients summed in micro-batch order" : "gradients summed in 64-bit fixed point");
	if (gathered)
		DT_CHECK_CONTAINS(err0, "(every task's all-gathered and summed by each)");
	if (gathered && kill_at) {
		/* 3 -> 2: the uneven deal, still gathered; 2 -> 1: the chief alone,
		 * no collective (the join flag its own) */
		DT_CHECK_CONTAINS(err0, workers == 3 ? "deterministic: the slices dealt over fewer tasks: blocks of "
							"several slices a task all-gathered"
						     : "deterministic: one task computes every slice: its gradients summed "
						       "in micro-batch order, nothing gathered");
		DT_CHECK_CONTAINS(err0, "deterministic: every task's gradients all-gathered again, one slice a task");
	}
	if (kill_at) {
		/* lost (slices dealt over the rest), then back (one each) */
		char lost[64], ended[80];
		snprintf(lost, sizeof(lost), "%s (worker %d at 127.0.0.1:", workers == 3 ? "workers 0,1" : "worker 0", last);
		snprintf(ended, sizeof(ended), "the ring was re-formed 2 time(s); it ended with %d of %d workers", workers,
			 workers);
		DT_CHECK_CONTAINS(err0, lost);
		DT_CHECK_CONTAINS(err0, "rejoined)");
		DT_CHECK_CONTAINS(err0, ended);
	}
	free(err0);
	cluster_kill_all(&c);
}

/* The "a run that loses and regains a worker matches an undisturbed
 * one bit for bit": with --deterministic the step's micro-batches are the
 * full ring's whoever computes them, so worker 2 killed at a random step
 * (the survivors redo the step in flight, its slice dealt to the chief) and
 * restarted at once (it rejoins and takes its slice back) leaves the final
 * checkpoint's tensors as the undisturbed ring leaves them. Twice, at two
 * random steps: once in fixed point (K = 6, int64 sums throughout), once
 * summed in micro-batch order (K = 3: the raw gradients all-gathered one
 * slice a task before the loss and after the rejoin, and in between in
 * blocks of two slots a task, the chief's two slices and worker 1's one). */
DT_TEST_TIMEOUT(deterministic, elastic_worker_lost_and_rejoined_matches_undisturbed, 600)
{
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	/* micro-batches of 16: six a step, summed in int64 throughout; of 32:
	 * three, all-gathered raw and summed in order throughout (the uneven
	 * deal while the chief computes two included) */
	for (int round = 0; round < 2; round++) {
		const char *common[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=3000", "--log_every=50",
					 "--noeval", "--deterministic", round ? "--micro_batch=32" : "--micro_batch=16",
					 "--save_checkpoints_steps=3000", "--connect_timeout=60", "--hparams_set=mlp_base",
					 "--hparams=batch_size=32", "--min_workers=2", "--step_timeout=4", NULL };
		const char *in_all = round ? "(3 in all)" : "(6 in all)";
		char line[32], dir[32], undisturbed[32], a[2200], b[2200];
		snprintf(undisturbed, sizeof(undisturbed), "undisturbed%d", round);
		elastic_ring(3, undisturbed, common, NULL, in_all, round);
		snprintf(line, sizeof(line), "step %d/", 50 * (2 + rand() % 9)); /* 100..500 of 3000 */
		snprintf(dir, sizeof(dir), "disturbed%d", round);
		double t0 = cli_now_s();
		elastic_ring(3, dir, common, line, in_all, round);
		fprintf(stderr, "worker 2 killed after %s and restarted: %.1f s\n", line, cli_now_s() - t0);
		dir_path(a, sizeof(a), undisturbed), dir_path(b, sizeof(b), dir);
		expect_same_tensors(a, b, 3000);
	}
}

/* The ordered sum on a ring that shrinks to one (--min_workers=1): 2
 * workers at one micro-batch of 32 each (K = 2), worker 1 killed at a
 * random step and restarted; meanwhile the chief sums both micro-batches
 * alone with no collective at all (the join flag its own), then the two
 * gather again. The final checkpoint is the undisturbed ring's, byte for
 * byte. */
DT_TEST_TIMEOUT(deterministic, elastic_ring_of_one_and_back_matches_undisturbed, 600)
{
	srand((unsigned)time(NULL) ^ (unsigned)getpid() ^ 0x5a5au);
	const char *common[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=2000", "--log_every=50",
				 "--noeval", "--deterministic", "--micro_batch=32", "--save_checkpoints_steps=2000",
				 "--connect_timeout=60", "--hparams_set=mlp_base", "--hparams=batch_size=32",
				 "--min_workers=1", "--step_timeout=4", NULL };
	char line[32], a[2200], b[2200];
	elastic_ring(2, "one_undisturbed", common, NULL, "(2 in all)", 1);
	snprintf(line, sizeof(line), "step %d/", 50 * (2 + rand() % 9)); /* 100..500 of 2000 */
	elastic_ring(2, "one_disturbed", common, line, "(2 in all)", 1);
	dir_path(a, sizeof(a), "one_undisturbed"), dir_path(b, sizeof(b), "one_disturbed");
	expect_same_tensors(a, b, 2000);
}
