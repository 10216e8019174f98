/* Restart-resume in synchronous training (issue 7 §6 for the layouts of
 * train/sync_roles.h), as separate dtrain processes on loopback: a sync job
 * killed mid-run (every task exits, the retryable 3 where it notices the
 * loss), started again with the same commands and output dir, resumes from
 * the newest checkpoint, redoes only the steps after it, and ends where an
 * undisturbed run of the same cluster ends. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_procs.h"
#include "dt_test.h"

#define STEPS 1000
#define WAIT_S 120.0

/* Layout 1: chief, worker:0 and ps:0, trainers with --sync. */
static void cluster_ps(struct cluster *c, const char *name)
{
	cluster_init(c, "chief", 1, 1);
	cluster_output_dir(c, name);
}

/* Layout 2: master:0 and two std servers (what make-configs prints for one master). */
static void cluster_in_graph(struct cluster *c, const char *name)
{
	cluster_init(c, "master", 0, 2);
	cluster_output_dir(c, name);
}

/* Starts type:index as task `name` (the name picks its log files: every
 * task of a test, a restarted one included, gets its own). A std server (std = 1) takes no training flags. */
static struct task *start(struct cluster *c, const char *type, int index, const char *name, int std)
{
	char steps[32];
	snprintf(steps, sizeof(steps), "--train_steps=%d", STEPS);
	const char *train[] = { "dtrain", "train", "--model=mlp", "--problem=fashion_mnist", steps, "--log_every=100",
				"--save_checkpoints_steps=100", "--save_summary_steps=100", c->out_flag, "--sync",
				"--sync_timeout=4", "--connect_timeout=60", NULL };
	const char *std_server[] = { "dtrain", "train", "--schedule=run_std_server", "--model=mlp",
				     "--problem=fashion_mnist", NULL };
	return cluster_start(c, type, index, name, std ? std_server : train, NULL);
}

/* The test accuracy the chief printed, or -1. */
static double accuracy_of(const struct task *t)
{
	char *out = task_read(t, 0);
	double a = cli_accuracy_of(out);
	free(out);
	return a;
}

/* The step of the newest checkpoint the state file names, or -1. */
static long latest_step(const struct cluster *c)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/checkpoint", c->out_dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[512];
	long step = -1;
	if (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "model_checkpoint_path: \"model.ckpt-");
		if (p)
			step = atol(p + strlen("model_checkpoint_path: \"model.ckpt-"));
	}
	fclose(f);
	return step;
}

/* How many TensorBoard event files the output dir holds. */
static int event_files(const struct cluster *c)
{
	DIR *d = opendir(c->out_dir);
	if (!d)
		return 0;
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += strncmp(e->d_name, "events.out.tfevents.", 20) == 0;
	closedir(d);
	return n;
}

static void check_contains(struct cluster *c, const struct task *t, int err, const char *text, int line)
{
	char *s = task_read(t, err);
	int ok = strstr(s, text) != NULL;
	free(s);
	if (!ok) {
		tasks_dump(c->tasks, c->n);
		dt_test_fail(__FILE__, line, "%s's %s lacks '%s'", t->name, err ? "stderr" : "stdout", text);
	}
}
#define EXPECT_LOG_HAS(c, t, text) check_contains(c, t, 1, text, __LINE__)

/* Layout 1: worker:0 SIGKILLed with no backups → the step times out and every
 * task exits 3 (as issue 5 builds it); started again, the chief restores the
 * newest checkpoint onto the empty ps, the synchronous step included, and the
 * ps applies exactly the steps after it. */
DT_TEST_TIMEOUT(sync_recovery, through_the_ps_a_restart_resumes_from_the_latest_checkpoint, 300)
{
	struct cluster u;
	cluster_ps(&u, "undisturbed");
	struct task *ups = start(&u, "ps", 0, "u-ps", 0);
	struct task *uw = start(&u, "worker", 0, "u-worker", 0);
	struct task *uc = start(&u, "chief", 0, "u-chief", 0);
	EXPECT_EXIT(&u, uc, 0, WAIT_S);
	EXPECT_EXIT(&u, uw, 0, 30);
	EXPECT_EXIT(&u, ups, 0, 30);
	double undisturbed = accuracy_of(uc);

	struct cluster c;
	cluster_ps(&c, "killed");
	struct task *ps = start(&c, "ps", 0, "ps", 0);
	struct task *w = start(&c, "worker", 0, "worker", 0);
	struct task *chief = start(&c, "chief", 0, "chief", 0);
	EXPECT_LOG(&c, chief, "(global 300/", WAIT_S);
	task_kill(w);
	EXPECT_EXIT(&c, ps, 3, 30);
	EXPECT_EXIT(&c, chief, 3, 30);
	long saved = latest_step(&c);
	fprintf(stderr, "worker:0 killed; newest checkpoint: step %ld\n", saved);
	DT_CHECK(saved >= 300 && saved < STEPS && saved % 100 == 0);

	ps = start(&c, "ps", 0, "ps-again", 0);
	w = start(&c, "worker", 0, "worker-again", 0);
	chief = start(&c, "chief", 0, "chief-again", 0);
	EXPECT_EXIT(&c, chief, 0, WAIT_S);
	EXPECT_EXIT(&c, w, 0, 30);
	EXPECT_EXIT(&c, ps, 0, 30);
	char text[200];
	snprintf(text, sizeof(text), "model.ckpt-%ld.safetensors (global step %ld) onto 1 parameter server(s)", saved,
		 saved);
	EXPECT_LOG_HAS(&c, chief, text);
	snprintf(text, sizeof(text), "resuming at synchronous step %ld", saved);
	EXPECT_LOG_HAS(&c, chief, text);
	EXPECT_LOG_HAS(&c, w, text);
	/* Steps are never counted twice: 2 trainers x 6 shards per step, only
	 * for the steps after the checkpoint. */
	snprintf(text, sizeof(text), "run over: %ld synchronous gradients accumulated, 0 dropped as stale, global step %d",
		 (STEPS - saved) * 12, STEPS);
	EXPECT_LOG_HAS(&c, ps, text);
	snprintf(text, sizeof(text), "saved checkpoint for step %d", STEPS);
	EXPECT_LOG_HAS(&c, chief, text);
	DT_CHECK_INT_EQ(latest_step(&c), STEPS);
	DT_CHECK_INT_EQ(event_files(&c), 2); /* one per chief process */
	double resumed = accuracy_of(chief);
	fprintf(stderr, "accuracy: undisturbed %.4f, killed and resumed %.4f\n", undisturbed, resumed);
	DT_CHECK(undisturbed > 0.8);
	DT_CHECK_NEAR(resumed, undisturbed, 0.01);
}

/* Layout 2: the master SIGKILLed → both std servers exit 3; started again,
 * the master restores its variables and optimizer from the newest
 * checkpoint and the std servers position their data at its step. The
 * in-graph step is deterministic (mlp has no dropout), so the resumed run
 * ends at the undisturbed run's model, to the printed digit. */
DT_TEST_TIMEOUT(sync_recovery, in_graph_a_restart_resumes_from_the_latest_checkpoint, 300)
{
	struct cluster u;
	cluster_in_graph(&u, "undisturbed");
	struct task *us0 = start(&u, "ps", 0, "u-std0", 1);
	struct task *us1 = start(&u, "ps", 1, "u-std1", 1);
	struct task *um = start(&u, "master", 0, "u-master", 0);
	EXPECT_EXIT(&u, um, 0, WAIT_S);
	EXPECT_EXIT(&u, us0, 0, 30);
	EXPECT_EXIT(&u, us1, 0, 30);

	struct cluster c;
	cluster_in_graph(&c, "killed");
	struct task *s0 = start(&c, "ps", 0, "std0", 1);
	struct task *s1 = start(&c, "ps", 1, "std1", 1);
	struct task *m = start(&c, "master", 0, "master", 0);
	EXPECT_LOG(&c, m, "(global 300/", WAIT_S);
	task_kill(m);
	EXPECT_EXIT(&c, s0, 3, 30);
	EXPECT_EXIT(&c, s1, 3, 30);
	long saved = latest_step(&c);
	fprintf(stderr, "master:0 killed; newest checkpoint: step %ld\n", saved);
	DT_CHECK(saved >= 300 && saved < STEPS && saved % 100 == 0);

	s0 = start(&c, "ps", 0, "std0-again", 1);
	s1 = start(&c, "ps", 1, "std1-again", 1);
	m = start(&c, "master", 0, "master-again", 0);
	EXPECT_EXIT(&c, m, 0, WAIT_S);
	EXPECT_EXIT(&c, s0, 0, 30);
	EXPECT_EXIT(&c, s1, 0, 30);
	char text[800];
	snprintf(text, sizeof(text), "restored step %ld from %s/model.ckpt-%ld.safetensors", saved, c.out_dir, saved);
	EXPECT_LOG_HAS(&c, m, text);
	snprintf(text, sizeof(text), "in-graph replica resuming at step %ld", saved);
	EXPECT_LOG_HAS(&c, s0, text);
	EXPECT_LOG_HAS(&c, s1, text);
	/* Only the steps after the checkpoint were computed again. */
	snprintf(text, sizeof(text), "run over: computed %ld in-graph replica steps", STEPS - saved);
	EXPECT_LOG_HAS(&c, s0, text);
	DT_CHECK_INT_EQ(latest_step(&c), STEPS);
	DT_CHECK_INT_EQ(event_files(&c), 2);
	char *a = task_read(um, 0), *b = task_read(m, 0);
	fprintf(stderr, "undisturbed: %sresumed:     %s", a, b);
	DT_CHECK_CONTAINS(a, "at global step 1000: accuracy = ");
	DT_CHECK(accuracy_of(um) > 0.8);
	DT_CHECK_STR_EQ(b, a);
	free(a), free(b);
}

/* ---- a ps killed and restarted in synchronous training (issue 18 part 2) ---- */

#define INPLACE_STEPS 4000
#define INPLACE_SAVE 100

/* chief, worker:0 and two ps, trainers with --sync; the ps's step deadline
 * (--sync_timeout) must outlast a restart, the trainers' reconnect
 * (--connect_timeout) too. */
static struct task *start_inplace(struct cluster *c, const char *type, int index, const char *name)
{
	char steps[32], save[48];
	snprintf(steps, sizeof(steps), "--train_steps=%d", INPLACE_STEPS);
	snprintf(save, sizeof(save), "--save_checkpoints_steps=%d", INPLACE_SAVE);
	const char *train[] = { "dtrain", "train", "--model=mlp", "--problem=fashion_mnist", steps, "--log_every=50",
				save, c->out_flag, "--sync", "--sync_timeout=30", "--connect_timeout=60", NULL };
	return cluster_start(c, type, index, name, train, NULL);
}

/* The bytes of `path` (malloc'd, *n their count), or NULL. */
static char *read_bytes(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t cap = 0;
	*n = 0;
	for (;;) {
		if (*n == cap) {
			cap = cap ? 2 * cap : 1 << 20;
			buf = realloc(buf, cap);
			DT_CHECK(buf != NULL);
		}
		size_t got = fread(buf + *n, 1, cap - *n, f);
		*n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	return buf;
}

/* How many times `text` occurs in t's stderr. */
static int count_in_log(const struct task *t, const char *text)
{
	char *e = task_read(t, 1);
	int n = 0;
	for (const char *p = e; (p = strstr(p, text)); p++)
		n++;
	free(e);
	return n;
}

/* The largest X - Y over the chief's "global step X -> Y" restores; *n gets how many. */
static long steps_redone(const struct task *chief, int *n)
{
	char *e = task_read(chief, 1);
	long worst = 0;
	*n = 0;
	for (const char *p = e; (p = strstr(p, "onto the parameter servers: global step ")); p++) {
		long x, y;
		if (sscanf(p, "onto the parameter servers: global step %ld -> %ld", &x, &y) == 2) {
			worst = x - y > worst ? x - y : worst;
			(*n)++;
		}
	}
	free(e);
	return worst;
}

/* `nps` ps: a ps drawn at random SIGKILLed at a drawn moment of the run and
 * started again 0-1 s later, `kills` times (each after the previous
 * recovery): the trainers hold the step, the chief restores the newest
 * checkpoint onto every ps, the barrier resumes, every task exits 0, at most
 * one checkpoint interval (+ the step in flight) is redone each time, and
 * the run ends with the undisturbed run's accuracy — and bytes. The seed
 * (DTRAIN_TEST_SEED) draws the victims and moments; the timing of a loaded
 * host draws the rest. */
static void killed_ps_restored_in_place(int nps, int kills)
{
	const char *seed_env = getenv("DTRAIN_TEST_SEED");
	unsigned long long seed = seed_env ? strtoull(seed_env, NULL, 10) : 18;
	fprintf(stderr, "seed %llu (DTRAIN_TEST_SEED=%llu reproduces the draws)\n", seed, seed);
	srand((unsigned)seed);

	struct cluster u;
	cluster_init(&u, "chief", 1, nps);
	cluster_output_dir(&u, "undisturbed");
	struct task *ups[2] = { NULL, NULL };
	for (int i = 0; i < nps; i++) {
		char name[16];
		snprintf(name, sizeof(name), "u-ps%d", i);
		ups[i] = start_inplace(&u, "ps", i, name);
	}
	struct task *uw = start_inplace(&u, "worker", 0, "u-worker");
	struct task *uc = start_inplace(&u, "chief", 0, "u-chief");
	EXPECT_EXIT(&u, uc, 0, WAIT_S);
	EXPECT_EXIT(&u, uw, 0, 30);
	for (int i = 0; i < nps; i++)
		EXPECT_EXIT(&u, ups[i], 0, 30);
	double undisturbed = accuracy_of(uc);

	struct cluster c;
	cluster_init(&c, "chief", 1, nps);
	cluster_output_dir(&c, "killed");
	struct task *ps[2] = { NULL, NULL };
	for (int i = 0; i < nps; i++) {
		char name[16];
		snprintf(name, sizeof(name), "ps%d", i);
		ps[i] = start_inplace(&c, "ps", i, name);
	}
	struct task *w = start_inplace(&c, "worker", 0, "worker");
	struct task *chief = start_inplace(&c, "chief", 0, "chief");
	EXPECT_LOG(&c, chief, "(global 300/", WAIT_S); /* after a first checkpoint */
	for (int k = 0; k < kills; k++) {
		/* Two progress lines (100 steps) after the previous recovery, then a drawn moment. */
		int lines = count_in_log(chief, "(global ");
		for (int i = 0; i < 240 && count_in_log(chief, "(global ") < lines + 2; i++)
			cli_sleep_ms(250);
		int victim = rand() % nps;
		int delay_ms = rand() % 600, gap_ms = rand() % 1000;
		cli_sleep_ms(delay_ms);
		fprintf(stderr, "kill %d: ps:%d, %d ms after progress line %d, restarted %d ms later\n", k + 1, victim,
			delay_ms, lines + 2, gap_ms);
		if (task_wait(chief, 0) != -1) {
			tasks_dump(c.tasks, c.n);
			dt_test_fail(__FILE__, __LINE__, "kill %d: the run ended before it", k + 1);
		}
		task_kill(ps[victim]);
		cli_sleep_ms(gap_ms);
		char name[32];
		snprintf(name, sizeof(name), "ps%d-again%d", victim, k + 1);
		ps[victim] = start_inplace(&c, "ps", victim, name);
		/* Held, restored, resumed: the chief and the worker each say so. */
		for (int i = 0; i < 60 && count_in_log(chief, "continuing at synchronous step") < k + 1; i++)
			cli_sleep_ms(500);
		for (int i = 0; i < 60 && count_in_log(w, "continuing at synchronous step") < k + 1; i++)
			cli_sleep_ms(500);
		if (count_in_log(chief, "continuing at synchronous step") < k + 1 ||
		    count_in_log(w, "continuing at synchronous step") < k + 1) {
			tasks_dump(c.tasks, c.n);
			dt_test_fail(__FILE__, __LINE__, "kill %d: the trainers did not continue within 30 s", k + 1);
		}
	}
	EXPECT_EXIT(&c, chief, 0, WAIT_S);
	EXPECT_EXIT(&c, w, 0, 30);
	for (int i = 0; i < nps; i++)
		EXPECT_EXIT(&c, ps[i], 0, 30);
	EXPECT_LOG_HAS(&c, chief, "holding the step until it is restored");
	EXPECT_LOG_HAS(&c, w, "holding the step until it is restored");
	int restores = 0;
	long redone = steps_redone(chief, &restores);
	fprintf(stderr, "%d restore(s), at most %ld step(s) redone\n", restores, redone);
	DT_CHECK_INT_EQ(restores, kills);
	DT_CHECK(redone >= 0 && redone <= INPLACE_SAVE + 1);
	DT_CHECK_INT_EQ(latest_step(&c), INPLACE_STEPS);
	/* The steps redone read the same batches (the input is repositioned at
	 * the restored step) and the ps sums two gradients, which commutes: the
	 * run ends with the undisturbed run's bytes. */
	char a_path[700], b_path[700];
	snprintf(a_path, sizeof(a_path), "%s/model.ckpt-%d.safetensors", u.out_dir, INPLACE_STEPS);
	snprintf(b_path, sizeof(b_path), "%s/model.ckpt-%d.safetensors", c.out_dir, INPLACE_STEPS);
	size_t na = 0, nb = 0;
	char *fa = read_bytes(a_path, &na), *fb = read_bytes(b_path, &nb);
	DT_CHECK(fa && fb);
	DT_CHECK_INT_EQ((long long)na, (long long)nb);
	DT_CHECK(fa && fb && na == nb && memcmp(fa, fb, na) == 0);
	free(fa), free(fb);
	double acc = accuracy_of(chief);
	fprintf(stderr, "accuracy: undisturbed %.4f, a ps killed %d time(s) %.4f\n", undisturbed, kills, acc);
	DT_CHECK(undisturbed > 0.8);
	DT_CHECK_NEAR(acc, undisturbed, 0.01);
}

DT_TEST_TIMEOUT(sync_recovery, through_the_ps_a_killed_ps_is_restored_in_place, 400)
{
	killed_ps_restored_in_place(2, 2);
}

DT_TEST_TIMEOUT(sync_recovery, through_the_ps_the_only_ps_killed_is_restored_in_place, 400)
{
	killed_ps_restored_in_place(1, 2);
}
