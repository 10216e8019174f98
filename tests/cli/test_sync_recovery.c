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

#include "dt_test.h"
#include "ps_cluster.h"

#define STEPS 1000
#define WAIT_S 120.0

struct cluster {
	char spec[512];
	char env[PS_MAX_TASKS][900];
	char out_dir[600], out_flag[640];
	struct ps_task tasks[PS_MAX_TASKS];
	int n;
};

static void cluster_dir(struct cluster *c, const char *name)
{
	snprintf(c->out_dir, sizeof(c->out_dir), "%s/%s", dt_test_tmpdir(), name);
	snprintf(c->out_flag, sizeof(c->out_flag), "--output_dir=%s", c->out_dir);
}

/* Layout 1: chief, worker:0 and ps:0, trainers with --sync. */
static void cluster_ps(struct cluster *c, const char *name)
{
	memset(c, 0, sizeof(*c));
	int ports[3];
	ps_free_ports(ports, 3);
	snprintf(c->spec, sizeof(c->spec),
		 "{\"chief\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\"], \"ps\": [\"127.0.0.1:%d\"]}", ports[0],
		 ports[1], ports[2]);
	cluster_dir(c, name);
}

/* Layout 2: master:0 and two std servers (what make-configs prints for one master). */
static void cluster_in_graph(struct cluster *c, const char *name)
{
	memset(c, 0, sizeof(*c));
	int ports[3];
	ps_free_ports(ports, 3);
	snprintf(c->spec, sizeof(c->spec),
		 "{\"master\": [\"127.0.0.1:%d\"], \"ps\": [\"127.0.0.1:%d\", \"127.0.0.1:%d\"]}", ports[0], ports[1],
		 ports[2]);
	cluster_dir(c, name);
}

/* Starts type:index as task `name` (the name picks its log files: every
 * task of a test, a restarted one included, gets its own). A std server (std = 1) takes no training flags. */
static struct ps_task *start(struct cluster *c, const char *type, int index, const char *name, int std)
{
	DT_CHECK(c->n < PS_MAX_TASKS);
	int k = c->n++;
	char spec[sizeof(c->spec)];
	memcpy(spec, c->spec, sizeof(spec));
	snprintf(c->env[k], sizeof(c->env[k]), "TF_CONFIG={\"cluster\": %s, \"task\": {\"type\": \"%s\", \"index\": %d}}",
		 spec, type, index);
	char steps[32];
	snprintf(steps, sizeof(steps), "--train_steps=%d", STEPS);
	const char *train[] = { "dtrain", "train", "--model=mlp", "--problem=fashion_mnist", steps, "--log_every=100",
				"--save_checkpoints_steps=100", "--save_summary_steps=100", c->out_flag, "--sync",
				"--sync_timeout=4", "--connect_timeout=60", NULL };
	const char *std_server[] = { "dtrain", "train", "--schedule=run_std_server", "--model=mlp",
				     "--problem=fashion_mnist", NULL };
	const char *env[] = { c->env[k], NULL };
	ps_task_start(&c->tasks[k], name, std ? std_server : train, env);
	return &c->tasks[k];
}

static void kill_all(struct cluster *c)
{
	for (int i = 0; i < c->n; i++)
		ps_task_kill(&c->tasks[i]);
}

static void expect_exit(struct cluster *c, struct ps_task *t, int code, double timeout_s)
{
	int st = ps_task_wait(t, timeout_s);
	if (st != code) {
		ps_tasks_dump(c->tasks, c->n);
		kill_all(c);
		dt_test_fail(__FILE__, __LINE__, "%s exited with %d, expected %d", t->name, st, code);
	}
}

static void expect_log(struct cluster *c, struct ps_task *t, const char *text, double timeout_s)
{
	if (!ps_task_wait_log(t, text, timeout_s)) {
		ps_tasks_dump(c->tasks, c->n);
		kill_all(c);
		dt_test_fail(__FILE__, __LINE__, "%s never logged '%s'", t->name, text);
	}
}

/* The test accuracy the chief printed, or -1. */
static double accuracy_of(const struct ps_task *t)
{
	char *out = ps_task_read(t, 0);
	const char *p = strstr(out, "accuracy = ");
	double a = p ? atof(p + strlen("accuracy = ")) : -1;
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

static void check_contains(struct cluster *c, const struct ps_task *t, int err, const char *text, int line)
{
	char *s = ps_task_read(t, err);
	int ok = strstr(s, text) != NULL;
	free(s);
	if (!ok) {
		ps_tasks_dump(c->tasks, c->n);
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
	struct ps_task *ups = start(&u, "ps", 0, "u-ps", 0);
	struct ps_task *uw = start(&u, "worker", 0, "u-worker", 0);
	struct ps_task *uc = start(&u, "chief", 0, "u-chief", 0);
	expect_exit(&u, uc, 0, WAIT_S);
	expect_exit(&u, uw, 0, 30);
	expect_exit(&u, ups, 0, 30);
	double undisturbed = accuracy_of(uc);

	struct cluster c;
	cluster_ps(&c, "killed");
	struct ps_task *ps = start(&c, "ps", 0, "ps", 0);
	struct ps_task *w = start(&c, "worker", 0, "worker", 0);
	struct ps_task *chief = start(&c, "chief", 0, "chief", 0);
	expect_log(&c, chief, "(global 300/", WAIT_S);
	ps_task_kill(w);
	expect_exit(&c, ps, 3, 30);
	expect_exit(&c, chief, 3, 30);
	long saved = latest_step(&c);
	fprintf(stderr, "worker:0 killed; newest checkpoint: step %ld\n", saved);
	DT_CHECK(saved >= 300 && saved < STEPS && saved % 100 == 0);

	ps = start(&c, "ps", 0, "ps-again", 0);
	w = start(&c, "worker", 0, "worker-again", 0);
	chief = start(&c, "chief", 0, "chief-again", 0);
	expect_exit(&c, chief, 0, WAIT_S);
	expect_exit(&c, w, 0, 30);
	expect_exit(&c, ps, 0, 30);
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
	struct ps_task *us0 = start(&u, "ps", 0, "u-std0", 1);
	struct ps_task *us1 = start(&u, "ps", 1, "u-std1", 1);
	struct ps_task *um = start(&u, "master", 0, "u-master", 0);
	expect_exit(&u, um, 0, WAIT_S);
	expect_exit(&u, us0, 0, 30);
	expect_exit(&u, us1, 0, 30);

	struct cluster c;
	cluster_in_graph(&c, "killed");
	struct ps_task *s0 = start(&c, "ps", 0, "std0", 1);
	struct ps_task *s1 = start(&c, "ps", 1, "std1", 1);
	struct ps_task *m = start(&c, "master", 0, "master", 0);
	expect_log(&c, m, "(global 300/", WAIT_S);
	ps_task_kill(m);
	expect_exit(&c, s0, 3, 30);
	expect_exit(&c, s1, 3, 30);
	long saved = latest_step(&c);
	fprintf(stderr, "master:0 killed; newest checkpoint: step %ld\n", saved);
	DT_CHECK(saved >= 300 && saved < STEPS && saved % 100 == 0);

	s0 = start(&c, "ps", 0, "std0-again", 1);
	s1 = start(&c, "ps", 1, "std1-again", 1);
	m = start(&c, "master", 0, "master-again", 0);
	expect_exit(&c, m, 0, WAIT_S);
	expect_exit(&c, s0, 0, 30);
	expect_exit(&c, s1, 0, 30);
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
	char *a = ps_task_read(um, 0), *b = ps_task_read(m, 0);
	fprintf(stderr, "undisturbed: %sresumed:     %s", a, b);
	DT_CHECK_CONTAINS(a, "at global step 1000: accuracy = ");
	DT_CHECK(accuracy_of(um) > 0.8);
	DT_CHECK_STR_EQ(b, a);
	free(a), free(b);
}
