/* The chaos suite's engine (chaos.h): jobs in every mode, drawn failures,
 * their documented outcomes, and one record line per failure. */
#include "chaos.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/rng.h"
#include "cluster_procs.h"
#include "dt_test.h"

#define SAVE_EVERY 100
#define LOG_EVERY 25
#define MAX_ROLES 4
#define MAX_PER_SCENARIO 3
#define CONNECT_TIMEOUT_S 60.0 /* --connect_timeout */
#define END_WAIT_S 150.0  /* a whole job's remaining run, restarts included, on a loaded machine */

/* Each mode's job and the deadlines its documentation promises. */
struct mode_info {
	const char *name;
	const char *head;                  /* cluster_init's */
	int workers, ps;
	int steps;
	int evaluator;                     /* an evaluator task too (async) */
	int restart_job;                   /* a lost task: every task exits 3, a restart resumes */
	double timeout_s;                  /* --sync_timeout / --step_timeout */
	double stop_ok_s;                  /* a SIGSTOP shorter than this is survived in place */
};

static const struct mode_info modes[CHAOS_MODES] = {
	[CHAOS_ASYNC] = { "async_ps", "chief", 1, 1, 6000, 1, 0, 0, 6.0 },
	[CHAOS_SYNC] = { "sync_ps", "chief", 1, 1, 2500, 0, 1, 5, 2.5 },
	[CHAOS_ALLREDUCE] = { "allreduce", NULL, 2, 0, 2500, 0, 1, 5, 2.5 },
	[CHAOS_INGRAPH] = { "in_graph", "master", 0, 2, 2500, 0, 1, 5, 2.5 },
};

enum kind { KILL, STOP, SILENT, SLOW, GARBAGE, KINDS };
static const char *const kind_names[KINDS] = { "kill", "stop", "silent", "slow", "garbage" };

struct role {
	const char *type;
	int index, std;                    /* std: an in-graph std server (no training flags) */
};

struct job {
	enum chaos_mode mode;
	const struct mode_info *mi;
	struct cluster c;
	struct role roles[MAX_ROLES];
	struct task tasks[MAX_ROLES];      /* the current incarnation of each role */
	int left_dead[MAX_ROLES];          /* killed after the run ended: not restarted, 137 expected */
	int n, gen, scenario;
	char logs[64][32];                 /* every task name started, for the report */
	int nlogs;
	pid_t strangers[16];
	int nstrangers;
};

/* One injected failure, printed when its scenario ends. */
struct record {
	enum kind kind;
	char victim[32], detail[48], expect[64], actual[160], why[200];
	double at_s;
	int bad;
};

/* ---- the environment -------------------------------------------------------------- */

struct chaos_profile chaos_profile_from_env(void)
{
	const char *p = getenv("DTRAIN_CHAOS_PROFILE");
	int full = p && strcmp(p, "full") == 0;
	return (struct chaos_profile){ .long_stops = full, .in_graph_long_stops = 1, .async_ps_long_stop = full,
				       .rendezvous_silent = full, .kill_in_recovery = full, .kill_std_server = 1 };
}

uint64_t chaos_seed_from_env(uint64_t fallback)
{
	const char *s = getenv("DTRAIN_CHAOS_SEED");
	uint64_t seed = s && *s ? strtoull(s, NULL, 0) : fallback;
	fprintf(stderr, "chaos seed %llu (DTRAIN_CHAOS_SEED=%llu reproduces)\n", (unsigned long long)seed,
		(unsigned long long)seed);
	return seed;
}

int chaos_failures_from_env(int fallback)
{
	const char *s = getenv("DTRAIN_CHAOS_FAILURES");
	int n = s && *s ? atoi(s) : fallback;
	return n > 0 ? n : fallback;
}

static double draw(struct dt_rng *r, double lo, double hi)
{
	return lo + (hi - lo) * (double)(dt_rng_next(r) >> 11) / 9007199254740992.0;
}

/* ---- the job ------------------------------------------------------------------------ */

static void job_init(struct job *j, enum chaos_mode mode, int scenario)
{
	memset(j, 0, sizeof(*j));
	j->mode = mode;
	j->mi = &modes[mode];
	j->scenario = scenario;
	cluster_init(&j->c, j->mi->head, j->mi->workers, j->mi->ps);
	char dir[64];
	snprintf(dir, sizeof(dir), "%s-%d", j->mi->name, scenario);
	cluster_output_dir(&j->c, dir);
	/* Servers first, so trainers find them sooner (any order works). */
	for (int i = 0; i < j->mi->ps; i++)
		j->roles[j->n++] = (struct role){ "ps", i, mode == CHAOS_INGRAPH };
	if (j->mi->head)
		j->roles[j->n++] = (struct role){ j->mi->head, 0, 0 };
	for (int i = 0; i < j->mi->workers; i++)
		j->roles[j->n++] = (struct role){ "worker", i, 0 };
	if (j->mi->evaluator)
		j->roles[j->n++] = (struct role){ "evaluator", 0, 0 };
}

/* Starts role i (again): a new name, so each incarnation's logs are its own. */
static void job_start_role(struct job *j, int i)
{
	j->left_dead[i] = 0;
	const struct role *r = &j->roles[i];
	const struct mode_info *mi = j->mi;
	char steps[32], tf[1400], name[32], to[40];
	snprintf(steps, sizeof(steps), "--train_steps=%d", mi->steps);
	snprintf(to, sizeof(to), "--%s_timeout=%g", j->mode == CHAOS_ALLREDUCE ? "step" : "sync", mi->timeout_s);
	cluster_tf_config(&j->c, r->type, r->index, tf, sizeof(tf));
	snprintf(name, sizeof(name), "s%d-%s%d-%d", j->scenario, r->type, r->index, ++j->gen);
	const char *argv[24] = { "dtrain", "train", "--model=mlp", "--problem=fashion_mnist" };
	int n = 4;
	if (r->std) {
		argv[n++] = "--schedule=run_std_server";
	} else {
		argv[n++] = steps;
		argv[n++] = "--log_every=25";
		argv[n++] = "--save_checkpoints_steps=100";
		argv[n++] = j->c.out_flag;
		argv[n++] = "--connect_timeout=60"; /* CONNECT_TIMEOUT_S */
		if (j->mode == CHAOS_SYNC || j->mode == CHAOS_INGRAPH)
			argv[n++] = "--sync";
		if (mi->timeout_s > 0)
			argv[n++] = to;
		if (strcmp(r->type, "evaluator") == 0)
			argv[n++] = "--eval_timeout_secs=60";
	}
	argv[n] = NULL;
	const char *env[] = { tf, NULL };
	task_start(&j->tasks[i], name, argv, env);
	if (j->nlogs < 64)
		snprintf(j->logs[j->nlogs++], sizeof(j->logs[0]), "%s", name);
}

static void job_start_all(struct job *j)
{
	for (int i = 0; i < j->n; i++)
		job_start_role(j, i);
}

static int running(struct job *j, int i)
{
	return j->tasks[i].pid && task_wait(&j->tasks[i], 0) == -1;
}

static int any_running(struct job *j)
{
	int any = 0;
	for (int i = 0; i < j->n; i++)
		any |= running(j, i);
	return any;
}

/* The role whose final evaluation is the job's: the chief, the master, rank 0. */
static int head_role(const struct job *j)
{
	for (int i = 0; i < j->n; i++)
		if (!j->roles[i].std && strcmp(j->roles[i].type, "ps") != 0)
			return i;
	return 0;
}

static void job_kill_all(struct job *j)
{
	for (int i = 0; i < j->n; i++)
		if (j->tasks[i].pid) {
			kill(j->tasks[i].pid, SIGCONT);
			task_kill(&j->tasks[i]);
		}
	for (int i = 0; i < j->nstrangers; i++) {
		kill(j->strangers[i], SIGKILL);
		waitpid(j->strangers[i], NULL, 0);
	}
	j->nstrangers = 0;
}

/* Waits until every task exited or `timeout_s` passed; 1 when all did. */
static int wait_all(struct job *j, double timeout_s)
{
	double end = cli_now_s() + timeout_s;
	for (;;) {
		if (!any_running(j))
			return 1;
		if (cli_now_s() > end)
			return 0;
		cli_sleep_ms(100);
	}
}

/* "ps0:3 chief0:137 ..." of the current incarnations. */
static void codes(struct job *j, char *buf, size_t cap)
{
	size_t at = 0;
	buf[0] = '\0';
	for (int i = 0; i < j->n && at < cap; i++)
		at += (size_t)snprintf(buf + at, cap - at, "%s%s%d:%d", i ? " " : "", j->roles[i].type,
				       j->roles[i].index, task_wait(&j->tasks[i], 0));
}

/* ---- strangers ---------------------------------------------------------------------- */

/* A child that connects to 127.0.0.1:port (retrying for up to 3 s, the
 * task may still be starting) and then stays silent, trickles a byte every
 * 300 ms, or sends garbage, for hold_s; it exits on its own. */
static void stranger(struct job *j, enum kind k, int port, double hold_s, uint64_t seed)
{
	pid_t pid = fork();
	DT_CHECK(pid >= 0);
	if (pid > 0) {
		if (j->nstrangers < 16)
			j->strangers[j->nstrangers++] = pid;
		return;
	}
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = -1;
	for (int tries = 0; tries < 30; tries++) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			break;
		if (fd >= 0)
			close(fd);
		fd = -1;
		usleep(100000);
	}
	if (fd < 0)
		_exit(0);
	signal(SIGPIPE, SIG_IGN);
	struct dt_rng r;
	dt_rng_seed(&r, seed);
	double end = cli_now_s() + hold_s;
	if (k == GARBAGE) {
		char junk[4096];
		size_t len = 1 + dt_rng_next(&r) % sizeof(junk);
		for (size_t i = 0; i < len; i++)
			junk[i] = (char)dt_rng_next(&r);
		(void)!write(fd, junk, len);
	}
	while (cli_now_s() < end) {
		if (k == SLOW) {
			char b = (char)dt_rng_next(&r);
			if (write(fd, &b, 1) != 1)
				break;
		}
		usleep(300000);
	}
	close(fd);
	_exit(0);
}

/* ---- logs ----------------------------------------------------------------------------- */

/* The largest step a log shows: "(global N/" (ps modes) or "step N/". */
static long max_step(const char *text)
{
	long best = -1;
	for (const char *p = text; (p = strstr(p, "step ")); p += 5) {
		long a = -1, b = -1;
		if (sscanf(p, "step %ld (global %ld/", &a, &b) == 2 || sscanf(p, "step %ld/", &b) == 1)
			best = b > best ? b : best;
	}
	return best;
}

static long max_step_of_job(struct job *j)
{
	long best = -1;
	for (int i = 0; i < j->n; i++) {
		char *e = task_read(&j->tasks[i], 1);
		long s = max_step(e);
		best = s > best ? s : best;
		free(e);
	}
	return best;
}

/* The step a restarted job resumed at ("restored step N" / "resuming at ...
 * step N"), 0 when it started afresh (no checkpoint yet), -1 when unknown. */
static long resumed_step(struct job *j)
{
	char *e = task_read(&j->tasks[head_role(j)], 1);
	long s = -1;
	const char *p;
	if ((p = strstr(e, "restored step ")))
		s = atol(p + strlen("restored step "));
	else if ((p = strstr(e, "in-graph replica resuming at step ")) || (p = strstr(e, "in-graph replicas resuming at step ")))
		s = atol(strstr(p, "at step ") + strlen("at step "));
	else if (strstr(e, "step ") && !strstr(e, "restor"))
		s = 0;
	free(e);
	return s;
}

/* Lost steps of the ps chief's restores in place: the largest X - Y of "global step X -> Y". */
static long async_lost(struct job *j, int *restores)
{
	long worst = 0;
	*restores = 0;
	for (int g = 0; g < j->nlogs; g++) {
		if (!strstr(j->logs[g], j->mi->head ? j->mi->head : "worker0"))
			continue;
		char path[700];
		snprintf(path, sizeof(path), "%s/%s.err", dt_test_tmpdir(), j->logs[g]);
		char *e = cli_read_file(path);
		for (const char *p = e; p && (p = strstr(p, "onto the parameter servers: global step ")); p++) {
			long x, y;
			if (sscanf(p, "onto the parameter servers: global step %ld -> %ld", &x, &y) == 2) {
				worst = x - y > worst ? x - y : worst;
				(*restores)++;
			}
		}
		free(e);
	}
	return worst;
}

static double final_accuracy(struct job *j)
{
	char *out = task_read(&j->tasks[head_role(j)], 0);
	const char *last = NULL;
	for (const char *p = out; (p = strstr(p, "accuracy = ")); p++)
		last = p;
	double a = last ? atof(last + strlen("accuracy = ")) : -1;
	free(out);
	return a;
}

static void dump_logs(struct job *j)
{
	for (int g = 0; g < j->nlogs; g++) {
		char path[700];
		snprintf(path, sizeof(path), "%s/%s.err", dt_test_tmpdir(), j->logs[g]);
		char *e = cli_read_file(path);
		size_t len = e ? strlen(e) : 0;
		fprintf(stderr, "---- %s (last 1500 bytes of stderr)\n%s\n", j->logs[g], e ? e + (len > 1500 ? len - 1500 : 0) : "");
		free(e);
	}
}

/* ---- one scenario --------------------------------------------------------------------- */

/* After a lost task in a restart-the-job mode: every other task exits 3
 * within the deadline (0 is fine once the head finished the run); then the
 * job starts again. Returns the record's verdict. */
static void survivors_then_restart(struct job *j, int victim, struct record *rec, long *lost)
{
	/* A trainer's wait for a peer is bounded by --connect_timeout (60 s: the
	 * first step's, and a reconnect's) or the step deadline; 20 s of slack
	 * for a loaded machine. */
	double deadline = CONNECT_TIMEOUT_S + j->mi->timeout_s + 20;
	long before = max_step_of_job(j);
	int all = wait_all(j, deadline);
	codes(j, rec->actual, sizeof(rec->actual));
	int head_done = task_wait(&j->tasks[head_role(j)], 0) == 0;
	/* At the very end a survivor may have finished its last collective
	 * before the loss: 0 is its right answer then. */
	int at_end = head_done || before >= j->mi->steps - 2 * LOG_EVERY;
	snprintf(rec->expect, sizeof(rec->expect), "others exit 3 within %.0f s%s", deadline,
		 at_end ? " (or 0: run was over)" : "");
	if (!all) {
		rec->bad = 1;
		snprintf(rec->why, sizeof(rec->why), "a task still ran %.0f s after the loss (hang)", deadline);
		job_kill_all(j);
	}
	for (int i = 0; i < j->n && !rec->bad; i++) {
		int st = task_wait(&j->tasks[i], 0);
		if (i == victim || st == 3 || (at_end && st == 0))
			continue;
		rec->bad = 1;
		snprintf(rec->why, sizeof(rec->why), "%s%d exited %d", j->roles[i].type, j->roles[i].index, st);
	}
	if (head_done)
		return; /* the run was complete: nothing to resume */
	job_start_all(j); /* the supervisor's restart: same commands, same output dir */
	cli_sleep_ms(1500);
	long at = resumed_step(j);
	if (before >= 0 && at >= 0 && before - at > *lost)
		*lost = before - at;
}

/* Runs one scenario; fills recs (one per injected failure). Returns how many. */
static int scenario(enum chaos_mode mode, int index, struct dt_rng *rng, int budget, const struct chaos_profile *p,
		    double calm, struct record *recs, double *wall, long *lost_out, double *acc_out, char *why, size_t why_cap)
{
	struct job j;
	job_init(&j, mode, index);
	double t0 = cli_now_s();
	int nrec = 0;
	long lost = 0;
	why[0] = '\0';

	/* A stranger at the rendezvous: on a server's port as the job starts. */
	int rendezvous = dt_rng_next(rng) % 3 == 0 && budget > 0;
	enum kind rk = (enum kind)(SILENT + dt_rng_next(rng) % 3);
	if (rendezvous && rk != GARBAGE && (mode == CHAOS_ALLREDUCE || mode == CHAOS_INGRAPH) && !p->rendezvous_silent)
		rk = GARBAGE;
	job_start_all(&j);
	if (rendezvous) {
		int victim = (int)(dt_rng_next(rng) % (uint64_t)j.n);
		if (strcmp(j.roles[victim].type, "evaluator") == 0)
			victim = 0;
		struct record *r = &recs[nrec++];
		memset(r, 0, sizeof(*r));
		r->kind = rk;
		snprintf(r->victim, sizeof(r->victim), "%s%d", j.roles[victim].type, j.roles[victim].index);
		double hold = draw(rng, 2, 12);
		snprintf(r->detail, sizeof(r->detail), "at rendezvous, %.1f s", hold);
		snprintf(r->expect, sizeof(r->expect), "that connection closed, the run goes on");
		stranger(&j, rk, cluster_port(&j.c, j.roles[victim].type, j.roles[victim].index), hold, dt_rng_next(rng));
	}

	int after_restart = 0;
	while (nrec < budget && nrec < MAX_PER_SCENARIO) {
		double delay = after_restart && p->kill_in_recovery && dt_rng_next(rng) % 2 ? draw(rng, 0, 1)
											: draw(rng, 0.5, 3.0);
		after_restart = 0;
		cli_sleep_ms((int)(delay * 1000));
		if (task_wait(&j.tasks[head_role(&j)], 0) != -1)
			break; /* the run is over (or its head is down): nothing more to inject */
		int victim;
		do
			victim = (int)(dt_rng_next(rng) % (uint64_t)j.n);
		while (!running(&j, victim));
		struct record *r = &recs[nrec++];
		memset(r, 0, sizeof(*r));
		r->at_s = cli_now_s() - t0;
		const struct role *ro = &j.roles[victim];
		snprintf(r->victim, sizeof(r->victim), "%s%d", ro->type, ro->index);
		int is_eval = strcmp(ro->type, "evaluator") == 0;
		unsigned pick = (unsigned)(dt_rng_next(rng) % 10);
		r->kind = pick < 4 ? KILL : pick < 7 ? STOP : (enum kind)(SILENT + pick - 7);
		if (is_eval && r->kind >= SILENT)
			r->kind = STOP;
		if (r->kind == KILL && ro->std && !p->kill_std_server)
			r->kind = STOP;
		if (r->kind == KILL) {
			task_kill(&j.tasks[victim]);
			/* A ps of synchronous training is restored in place too (issue 18 part 2). */
			const int in_place = !j.mi->restart_job || (mode == CHAOS_SYNC && strcmp(ro->type, "ps") == 0);
			if (in_place) {
				double gap = draw(rng, 0, 1.5);
				snprintf(r->detail, sizeof(r->detail), "restarted after %.1f s", gap);
				snprintf(r->expect, sizeof(r->expect), "recovers in place, all exit 0");
				cli_sleep_ms((int)(gap * 1000));
				/* A supervisor restarts a dead task; once the chief has
				 * ended the run there is nothing to rejoin (but the
				 * evaluator still has the final checkpoint to evaluate). */
				if (task_wait(&j.tasks[head_role(&j)], 0) == -1 || victim == head_role(&j) || is_eval)
					job_start_role(&j, victim);
				else
					j.left_dead[victim] = 1;
				after_restart = 1;
			} else {
				snprintf(r->detail, sizeof(r->detail), "job restarted");
				survivors_then_restart(&j, victim, r, &lost);
				after_restart = 1;
				if (r->bad)
					break;
			}
		} else if (r->kind == STOP) {
			int long_stop = (mode == CHAOS_INGRAPH ? p->in_graph_long_stops : p->long_stops) &&
					dt_rng_next(rng) % 3 == 0;
			if (mode == CHAOS_ASYNC && strcmp(ro->type, "ps") == 0 && long_stop && !p->async_ps_long_stop)
				long_stop = 0;
			double s = long_stop ? (j.mi->restart_job ? j.mi->timeout_s + draw(rng, 2, 5)
								  : draw(rng, 20, 30))
					     : draw(rng, 0.2, j.mi->stop_ok_s);
			snprintf(r->detail, sizeof(r->detail), "SIGSTOP %.1f s", s);
			kill(j.tasks[victim].pid, SIGSTOP);
			cli_sleep_ms((int)(s * 1000));
			kill(j.tasks[victim].pid, SIGCONT);
			if (long_stop && j.mi->restart_job) {
				survivors_then_restart(&j, -1, r, &lost);
				after_restart = 1;
				if (r->bad)
					break;
			} else {
				snprintf(r->expect, sizeof(r->expect), "survived in place, all exit 0");
			}
		} else {
			double hold = draw(rng, 2, 12);
			snprintf(r->detail, sizeof(r->detail), "during training, %.1f s", hold);
			snprintf(r->expect, sizeof(r->expect), "that connection closed, the run goes on");
			if (is_eval || !cluster_port(&j.c, ro->type, ro->index))
				victim = 0;
			stranger(&j, r->kind, cluster_port(&j.c, j.roles[victim].type, j.roles[victim].index), hold,
				 dt_rng_next(rng));
		}
	}

	/* The end: every task of the last incarnation exits 0. */
	int ended = wait_all(&j, END_WAIT_S);
	char final_codes[128];
	codes(&j, final_codes, sizeof(final_codes));
	int all_zero = ended;
	for (int i = 0; i < j.n; i++)
		all_zero &= task_wait(&j.tasks[i], 0) == (j.left_dead[i] ? 128 + SIGKILL : 0);
	*wall = cli_now_s() - t0;
	*acc_out = final_accuracy(&j);
	if (mode == CHAOS_ASYNC || mode == CHAOS_SYNC) {
		int restores;
		long l = async_lost(&j, &restores);
		lost = l > lost ? l : lost;
	}
	*lost_out = lost;
	if (!ended)
		snprintf(why, why_cap, "still running %.0f s after the last failure (hang): %s", END_WAIT_S, final_codes);
	else if (!all_zero)
		snprintf(why, why_cap, "final exit codes %s, expected all 0", final_codes);
	else if (lost > SAVE_EVERY + 2 * LOG_EVERY)
		snprintf(why, why_cap, "%ld steps lost, more than one checkpoint interval (%d) + %d", lost, SAVE_EVERY,
			 2 * LOG_EVERY);
	else if (!(*acc_out >= calm - 0.01 && *acc_out <= calm + 0.01))
		snprintf(why, why_cap, "accuracy %.4f, undisturbed %.4f (more than 1 %% apart)", *acc_out, calm);
	for (int i = 0; i < nrec; i++)
		if (!recs[i].actual[0])
			snprintf(recs[i].actual, sizeof(recs[i].actual), "end: %s", final_codes);
	int any_bad = why[0] != '\0';
	for (int i = 0; i < nrec; i++)
		any_bad |= recs[i].bad;
	if (any_bad)
		dump_logs(&j);
	job_kill_all(&j);
	return nrec;
}

/* The job of `mode` with no failure: its final accuracy. */
static double undisturbed(enum chaos_mode mode)
{
	struct job j;
	job_init(&j, mode, 0);
	job_start_all(&j);
	int ended = wait_all(&j, END_WAIT_S);
	char c[128];
	codes(&j, c, sizeof(c));
	int ok = ended;
	for (int i = 0; i < j.n; i++)
		ok &= task_wait(&j.tasks[i], 0) == 0;
	double acc = final_accuracy(&j);
	if (!ok || acc < 0.7) {
		dump_logs(&j);
		job_kill_all(&j);
		dt_test_fail(__FILE__, __LINE__, "the undisturbed %s job failed: exit codes %s, accuracy %.4f",
			     modes[mode].name, c, acc);
	}
	return acc;
}

void chaos_run_mode(enum chaos_mode mode, uint64_t seed, int failures, const struct chaos_profile *p,
		    struct chaos_totals *t)
{
	struct dt_rng rng;
	dt_rng_seed(&rng, seed * 4 + (uint64_t)mode);
	double calm = undisturbed(mode);
	fprintf(stderr, "chaos %s: undisturbed accuracy %.4f\n", modes[mode].name, calm);
	const char *rec_path = getenv("DTRAIN_CHAOS_RECORD");
	FILE *rec_file = rec_path && *rec_path ? fopen(rec_path, "a") : NULL;
	memset(t, 0, sizeof(*t));
	double t0 = cli_now_s();
	/* No new scenario past 360 s: one more (at most END_WAIT_S, twice) stays
	 * inside the test's 590 s. A long run asks for more seeds instead. */
	for (int s = 1; t->injected < failures && s <= failures && cli_now_s() - t0 < 360; s++) {
		struct record recs[MAX_PER_SCENARIO + 1];
		double wall, acc;
		long lost;
		char why[256];
		int budget = failures - t->injected;
		int n = scenario(mode, s, &rng, budget, p, calm, recs, &wall, &lost, &acc, why, sizeof(why));
		t->scenarios++;
		for (int i = 0; i < n; i++) {
			struct record *r = &recs[i];
			int bad = r->bad || why[0];
			const char *reason = r->bad ? r->why : why;
			char line[900];
			snprintf(line, sizeof(line),
				 "chaos\t%llu\t%s\t%d\t%s\t%s\t%.1f\t%s\t%s\t%s\t%.1f\t%ld\t%.4f\t%.4f\t%s\t%s\n",
				 (unsigned long long)seed, modes[mode].name, s, kind_names[r->kind], r->victim, r->at_s,
				 r->detail, r->expect, r->actual, wall, lost, acc, calm, bad ? "BAD" : "ok",
				 bad ? reason : "");
			fputs(line, stderr);
			if (rec_file) {
				fputs(line, rec_file);
				fflush(rec_file); /* a long run's table counts what a killed test did */
			}
			t->injected++;
			bad ? t->bad++ : t->ok++;
		}
		if (n == 0)
			break; /* the run ended before the first draw: the job is too fast to inject into */
	}
	if (rec_file)
		fclose(rec_file);
	fprintf(stderr, "chaos %s: seed %llu, %d scenario(s), %d failure(s) injected, %d as documented, %d not\n",
		modes[mode].name, (unsigned long long)seed, t->scenarios, t->injected, t->ok, t->bad);
	DT_CHECK_INT_EQ(t->bad, 0);
	DT_CHECK(t->injected > 0);
}
