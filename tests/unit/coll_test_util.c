/*
 * coll_test_util.c — the collective tests' shared helpers (coll_test_util.h).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "distribute/collective.h"
#include "distribute/ring_wire.h"
#include "dt_test.h"
#include "net/bytes.h"
#include "net/auth.h"
#include "net/handshake.h"
#include "net/socket.h"
#include "coll_test_util.h"

/* ---- a group of ranks on threads ---- */

void *coll_rank_main(void *p)
{
	struct coll_rank_arg *a = p;
	struct coll_group *g = a->g;
	struct dt_comm_config cfg = { .nranks = g->n, .rank = a->rank, .peers = g->peers, .listen_fd = g->fds[a->rank],
				      .listen_fd_set = 1, .segment_bytes = g->seg_bytes, .algorithm = g->algorithm,
				      .no_cma = g->no_cma, .cma_min_bytes = g->cma_min_bytes, .no_shm = g->no_shm,
				      .tcp_congestion = g->tcp_congestion, .hello = g->hellos ? &g->hellos[a->rank] : NULL,
				      .cost_alpha_us = g->cost_alpha_us[a->rank], .cost_beta_ps = g->cost_beta_ps[a->rank],
				      .measure_costs = g->measure_costs[a->rank] };
	struct dt_comm *comm = NULL;
	struct dt_err *err = &g->err[a->rank];
	enum dt_status st = dt_comm_new(&cfg, dt_deadline_in(g->connect_s), &comm, err);
	if (!st) {
		g->reads_left[a->rank] = dt_comm_reads_left_memory(comm);
		g->shm_links[a->rank] = dt_comm_shared_memory_links(comm);
	}
	if (!st && g->fn)
		st = g->fn(g, a->rank, comm, err);
	dt_comm_free(comm);
	g->st[a->rank] = st;
	return NULL;
}

void coll_group_init(struct coll_group *g, int n)
{
	memset(g, 0, sizeof(*g));
	g->n = n;
	g->connect_s = 20;
	g->absent = -1;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_comm_listen_loopback(n, g->fds, g->addrs, &err), &err);
	for (int i = 0; i < n; i++)
		g->peers[i] = (struct dt_comm_peer){ g->addrs[i], "worker", (uint32_t)i };
}

void coll_group_run(struct coll_group *g)
{
	pthread_t th[COLL_MAXR];
	struct coll_rank_arg args[COLL_MAXR];
	for (int i = 0; i < g->n; i++) {
		g->st[i] = DT_INTERNAL;
		if (i == g->absent) {
			dt_sock_close(g->fds[i]);
			continue;
		}
		args[i] = (struct coll_rank_arg){ g, i };
		DT_CHECK(pthread_create(&th[i], NULL, coll_rank_main, &args[i]) == 0);
	}
	for (int i = 0; i < g->n; i++)
		if (i != g->absent)
			pthread_join(th[i], NULL);
}

void coll_group_expect_ok(struct coll_group *g)
{
	for (int i = 0; i < g->n; i++)
		if (g->st[i] != DT_OK)
			dt_test_fail(__FILE__, __LINE__, "rank %d of %d failed: %s", i, g->n, g->err[i].msg);
}

/* Small integers: every partial sum is exact in float32, so the ring's
 * order of additions cannot matter and results compare exactly. */
float coll_value(int rank, size_t i, int round)
{
	return (float)((int)((i * 7u + (size_t)rank * 13u + (size_t)round * 5u) % 101u) - 50);
}

/* Large int64s (far beyond float32's 24 bits, of both signs) whose sum over
 * up to COLL_MAXR ranks stays below 2^62: the int64 all-reduce must be exact. */
int64_t coll_ivalue(int rank, size_t i, int round)
{
	return (int64_t)coll_value(rank, i, round) * ((int64_t)1 << 52) + (int64_t)(i * 977u + (size_t)rank * 31u + (size_t)round);
}
/* Whether this kernel lets a process read memory with process_vm_readv at
 * all (a seccomp filter or Yama may forbid it; the ring then stays on TCP). */
int coll_kernel_allows_cma(void)
{
	char src[8] = "dtrain", dst[8] = "";
	struct iovec l = { dst, sizeof(dst) }, r = { src, sizeof(src) };
	return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)sizeof(dst) && strcmp(dst, "dtrain") == 0;
}

enum dt_status coll_leaving_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	float buf[1000] = { 0 };
	if (rank == 1)
		return DT_OK; /* leaves: its comm is freed, its sockets close */
	return dt_allreduce_sum_f32(comm, buf, 1000, "grads/gone", dt_deadline_in(20), err);
}

/* ---- ranks as processes ---- */

/* Whether this process still maps a shared-memory region of a comm
 * (comm_shm.c names its memfds "dtrain-coll"). */
int coll_maps_a_region(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return 0;
	char line[512];
	int found = 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "dtrain-coll") != NULL;
	fclose(f);
	return found;
}

/* Entries of /dev/shm whose name mentions dtrain (other jobs on the host
 * may come and go there; ours must never appear). */
int coll_dev_shm_entries(void)
{
	FILE *f = popen("ls -a /dev/shm 2>/dev/null | grep -c dtrain", "r");
	int k = -1;
	if (f) {
		if (fscanf(f, "%d", &k) != 1)
			k = -1;
		pclose(f);
	}
	return k;
}

static void coll_proc_report(int rank, enum dt_status st, const struct dt_err *err)
{
	char path[512], name[32];
	snprintf(name, sizeof(name), "rank%d.err", rank);
	dt_test_path(path, sizeof(path), name);
	FILE *f = fopen(path, "w");
	if (f) {
		fprintf(f, "%d %s", (int)st, st ? err->msg : "ok");
		fclose(f);
	}
}

/* rank<N>.ready in the test's directory: the child's comm is built (its
 * rendezvous is over), so a signal to it lands in its collectives. */
static void coll_ready_path(char *path, size_t cap, int rank)
{
	char name[32];
	snprintf(name, sizeof(name), "rank%d.ready", rank);
	dt_test_path(path, cap, name);
}

void coll_procs_start_with(struct coll_procs *p, int n, coll_proc_fn fn, int algorithm, int auth)
{
	memset(p, 0, sizeof(*p));
	p->n = n;
	p->algorithm = algorithm;
	p->auth = auth;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_comm_listen_loopback(n, p->fds, p->addrs, &err), &err);
	for (int i = 0; i < n; i++)
		p->peers[i] = (struct dt_comm_peer){ p->addrs[i], "worker", (uint32_t)i };
	for (int i = 0; i < n; i++) {
		char ready[512];
		coll_ready_path(ready, sizeof(ready), i);
		unlink(ready); /* an earlier group's in the same test */
	}
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();
		DT_CHECK(pid >= 0);
		if (pid == 0) {
			alarm(60); /* a child never outlives a broken test by much */
			for (int j = 0; j < n; j++)
				if (j != i)
					dt_sock_close(p->fds[j]);
			struct dt_auth secret = { .mode = DT_WIRE_AUTH };
			memset(secret.secret, 0x5a, sizeof(secret.secret));
			struct dt_hello hello;
			dt_hello_init(&hello, "worker", (uint32_t)i, 0);
			if (p->auth)
				hello.auth = &secret;
			struct dt_comm_config cfg = { .nranks = n, .rank = i, .peers = p->peers, .listen_fd = p->fds[i],
						      .listen_fd_set = 1, .algorithm = p->algorithm, .hello = &hello };
			struct dt_comm *comm = NULL;
			struct dt_err e = DT_ERR_INIT;
			enum dt_status st = dt_comm_new(&cfg, dt_deadline_in(COLL_CONNECT_S), &comm, &e);
			if (!st) {
				char ready[512];
				coll_ready_path(ready, sizeof(ready), i);
				FILE *f = fopen(ready, "w");
				if (f)
					fclose(f);
				st = fn(comm, i, &e);
			}
			coll_proc_report(i, st, &e);
			dt_comm_free(comm);
			if (coll_maps_a_region())
				_exit(70); /* dt_comm_free left a shared mapping behind */
			_exit(dt_status_exit_code(st));
		}
		p->pid[i] = pid;
	}
	for (int i = 0; i < n; i++)
		dt_sock_close(p->fds[i]);
}

void coll_procs_start(struct coll_procs *p, int n, coll_proc_fn fn)
{
	coll_procs_start_with(p, n, fn, 0, 0);
}

int coll_procs_wait_ready(struct coll_procs *p, double timeout_s)
{
	int64_t end = dt_deadline_in(timeout_s);
	for (int i = 0; i < p->n; i++) {
		char ready[512];
		coll_ready_path(ready, sizeof(ready), i);
		while (access(ready, F_OK) != 0) {
			if (dt_deadline_passed(end))
				return i;
			dt_sleep(0.005);
		}
	}
	return -1;
}

/* Waits for child i (bounded); returns its exit code (128+signal if killed). */
int coll_proc_wait(struct coll_procs *p, int i, double timeout_s)
{
	int64_t end = dt_deadline_in(timeout_s);
	for (;;) {
		int status;
		pid_t got = waitpid(p->pid[i], &status, WNOHANG);
		if (got == p->pid[i]) {
			p->pid[i] = 0;
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		}
		if (dt_deadline_passed(end)) {
			kill(p->pid[i], SIGKILL);
			waitpid(p->pid[i], &status, 0);
			p->pid[i] = 0;
			dt_test_fail(__FILE__, __LINE__, "rank %d did not exit within %.1f s", i, timeout_s);
		}
		dt_sleep(0.005);
	}
}

const char *coll_proc_message(int rank)
{
	static char buf[COLL_MAXR][DT_ERR_MSG_MAX + 16];
	char path[512], name[32];
	snprintf(name, sizeof(name), "rank%d.err", rank);
	dt_test_path(path, sizeof(path), name);
	FILE *f = fopen(path, "r");
	buf[rank][0] = '\0';
	if (f) {
		size_t n = fread(buf[rank], 1, sizeof(buf[rank]) - 1, f);
		buf[rank][n] = '\0';
		fclose(f);
	}
	return buf[rank];
}

/* Three processes on one host: each reads its left neighbour's 400 KB
 * chunks (1.2 MB all-reduces, above the 512 KiB threshold) straight from
 * that process's memory, where the kernel allows it. */

/* 800 KB all-reduces: on one host their segments go by reference, so a
 * killed or stopped rank is also a rank whose memory stops being readable. */
enum dt_status coll_until_failure(struct dt_comm *comm, int rank, struct dt_err *err)
{
	size_t count = 200000;
	float *buf = dt_xcalloc(count, sizeof(float));
	enum dt_status st = DT_OK;
	int64_t end = dt_deadline_in(30);
	for (int round = 0; round < 1000000 && !st && !dt_deadline_passed(end); round++)
		st = dt_allreduce_sum_f32(comm, buf, count, "grads", dt_deadline_in(COLL_FAULT_DEADLINE_S), err);
	free(buf);
	if (!st)
		st = dt_err_set(err, DT_INTERNAL, "rank %d: no failure within 30 s", rank);
	return st;
}

/* Small all-reduces (recursive doubling by the model; every algorithm when forced). */
enum dt_status coll_until_failure_small(struct dt_comm *comm, int rank, struct dt_err *err)
{
	float buf[1031] = { 0 };
	enum dt_status st = DT_OK;
	int64_t end = dt_deadline_in(30);
	for (int round = 0; round < 10000000 && !st && !dt_deadline_passed(end); round++)
		st = dt_allreduce_sum_f32(comm, buf, 1031, "small", dt_deadline_in(COLL_FAULT_DEADLINE_S), err);
	if (!st)
		st = dt_err_set(err, DT_INTERNAL, "rank %d: no failure within 30 s", rank);
	return st;
}

/* n ranks run fn; `victim` gets sig; every other rank must exit 3 within
 * twice the deadline, naming the victim. */
void coll_fault_test(int sig, int n, int victim, coll_proc_fn fn, int algorithm, int auth)
{
	struct coll_procs p;
	coll_procs_start_with(&p, n, fn, algorithm, auth);
	/* The signal must land in the collectives, not in the rendezvous: a
	 * rank stopped or killed there leaves the others in dt_comm_new until
	 * its 20 s deadline, past the 13 s the survivors get below. On a loaded
	 * host the forks, the handshakes and the shared-memory agreement can
	 * take longer than any fixed sleep. */
	int late = coll_procs_wait_ready(&p, COLL_CONNECT_S + 5);
	if (late >= 0) {
		for (int i = 0; i < n; i++)
			kill(p.pid[i], SIGKILL);
		for (int i = 0; i < n; i++)
			coll_proc_wait(&p, i, 10);
		dt_test_fail(__FILE__, __LINE__, "rank %d did not connect within %.1f s", late, COLL_CONNECT_S + 5);
	}
	dt_sleep(0.5); /* looping */
	DT_CHECK(kill(p.pid[victim], sig) == 0);
	int64_t t0 = dt_now_ns();
	char want[32];
	snprintf(want, sizeof(want), "worker:%d at 127.0.0.1:", victim);
	for (int i = 0; i < n; i++) {
		if (i == victim)
			continue;
		int code = coll_proc_wait(&p, i, 4 * COLL_FAULT_DEADLINE_S + 5);
		double took = (double)(dt_now_ns() - t0) / 1e9;
		const char *msg = coll_proc_message(i);
		if (code != 3)
			dt_test_fail(__FILE__, __LINE__, "rank %d exited %d, not 3: %s", i, code, msg);
		if (took > 2 * COLL_FAULT_DEADLINE_S)
			dt_test_fail(__FILE__, __LINE__, "rank %d took %.2f s (more than 2 x %.1f s): %s", i, took,
				     COLL_FAULT_DEADLINE_S, msg);
		DT_CHECK_CONTAINS(msg, want);
		if (sig == SIGSTOP)
			DT_CHECK_CONTAINS(msg, "timed out");
	}
	kill(p.pid[victim], SIGKILL);
	if (sig == SIGSTOP)
		kill(p.pid[victim], SIGCONT);
	int code = coll_proc_wait(&p, victim, 10);
	DT_CHECK_INT_EQ(code, 128 + SIGKILL);
}
