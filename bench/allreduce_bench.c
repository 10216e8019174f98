/*
 * allreduce_bench.c — dtrain's ring all-reduce timed the way the peers are
 * (bench/allreduce runs it beside Open MPI and gloo; docs/BENCHMARKS.md).
 *
 *   build/bench-allreduce --ranks=N [--sizes=4096,65536,...] [--samples=9]
 *                         [--min_sample_ms=50] [--spin_us=0] [--segment_bytes=0] [--algorithm=auto]
 *                         [--wire_security=none|auth|encrypt] [--no_cma] [--no_shm] [--tcp_congestion=NAME]
 *                         [--netns=NS0,NS1,... --addrs=HOST:PORT,...]
 * (0 = the library's defaults; --algorithm=ring|doubling|halving forces one instead of the cost model's choice; auth and
 * encrypt give every rank one fixed cluster secret, so every ring frame is tagged or encrypted
 * (docs/SECURITY.md); --no_cma sends every byte over TCP, as between machines, instead of
 * reading large segments from the neighbour's memory; --no_shm sends the frames over loopback TCP
 * rather than shared-memory rings, and reports the rows as impl "dtrain_tcp"; --tcp_congestion sets
 * the comm's tcp_congestion ("host" keeps the host's default, docs/COLLECTIVES.md); --netns puts rank i in
 * the network namespace NSi (/run/netns/NSi), listening on the i-th of --addrs,
 * the emulated hosts of scripts/netns-hosts.sh: bench/allreduce_hosts)
 *
 * Forks N rank processes on loopback (127.0.0.1, kernel-chosen ports). For
 * each size (bytes, float32 elements): 3 warm-up calls; rank 0 times a few
 * calls and picks `inner` so that one sample lasts >= min_sample_ms, and
 * broadcasts it; then `samples` samples of `inner` back-to-back
 * dt_allreduce_sum_f32 calls. A sample's time per call is the maximum over
 * the ranks; the median sample is reported, with bus bandwidth
 * 2(n-1)/n * bytes / time (nccl-tests' convention). Rank 0 prints one JSON
 * line per size:
 *   {"impl": "dtrain", "ranks": 2, "bytes": 4096, "us": 21.3, "busbw_gbs": 0.19, "min_us": .., "max_us": ..,
 *    "inner": .., "wire": "none"}
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "distribute/collective.h"
#include "net/auth.h"
#include "net/handshake.h"
#include "net/socket.h"

#define MAX_RANKS 64
#define MAX_SIZES 64

struct opts {
	int ranks, samples, min_sample_ms;
	unsigned spin_us;
	size_t segment_bytes;
	int algorithm;
	size_t sizes[MAX_SIZES];
	int nsizes;
	enum dt_wire_security wire;
	int no_cma;
	char *netns[MAX_RANKS]; /* --netns: rank i's namespace, or all NULL */
	char *addrs[MAX_RANKS]; /* --addrs: rank i's listening address with --netns */
	int no_shm; /* frames over loopback TCP, not shared memory; reported as impl "dtrain_tcp" */
	const char *tcp_congestion; /* NULL: the library's choice */
};

/* Splits a comma-separated list in place into out[0..n); returns n. */
static int split_list(char *s, char **out, int cap)
{
	int n = 0;
	for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ","))
		out[n++] = tok;
	return n;
}

/* Moves this (single-threaded, forked) process into the named network
 * namespace, as `ip netns exec` does. */
static int enter_netns(const char *name)
{
	char path[300];
	snprintf(path, sizeof(path), "/run/netns/%s", name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
		fprintf(stderr, "bench-allreduce: cannot enter network namespace %s: %s (root? scripts/netns-hosts.sh up)\n",
			path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int run_rank(const struct opts *o, const struct dt_comm_peer *peers, int rank, int listen_fd)
{
	struct dt_auth auth = { .mode = o->wire };
	memset(auth.secret, 0x5a, sizeof(auth.secret)); /* every rank the same secret */
	struct dt_hello hello;
	dt_hello_init(&hello, "worker", (uint32_t)rank, 0);
	hello.auth = o->wire != DT_WIRE_NONE ? &auth : NULL;
	struct dt_comm_config cfg = { .nranks = o->ranks, .rank = rank, .peers = peers, .listen_fd = listen_fd,
				      .listen_fd_set = listen_fd >= 0, .segment_bytes = o->segment_bytes, .spin_us = o->spin_us,
				      .algorithm = o->algorithm, .no_cma = o->no_cma,
				      .no_shm = o->no_shm, .tcp_congestion = o->tcp_congestion, .hello = &hello };
	struct dt_comm *comm = NULL;
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st = dt_comm_new(&cfg, dt_deadline_in(60), &comm, &err);
	size_t maxb = 0;
	for (int k = 0; k < o->nsizes; k++)
		if (o->sizes[k] > maxb)
			maxb = o->sizes[k];
	float *buf = dt_xcalloc(maxb / 4 + 1, sizeof(float));
	float *times = dt_xcalloc((size_t)o->ranks, sizeof(float));
	double *samples = dt_xcalloc((size_t)o->samples, sizeof(double));
	for (int k = 0; k < o->nsizes && !st; k++) {
		size_t count = o->sizes[k] / 4;
		double deadline_s = 60;
		for (int w = 0; w < 3 && !st; w++)
			st = dt_allreduce_sum_f32(comm, buf, count, "bench/warmup", dt_deadline_in(deadline_s), &err);
		uint32_t inner = 1;
		if (!st && rank == 0) {
			int64_t t0 = dt_now_ns();
			for (int w = 0; w < 3 && !st; w++)
				st = dt_allreduce_sum_f32(comm, buf, count, "bench/calibrate", dt_deadline_in(deadline_s), &err);
			double per = (double)(dt_now_ns() - t0) / 3e9;
			double want = o->min_sample_ms / 1e3 / (per > 1e-7 ? per : 1e-7);
			inner = want < 1 ? 1 : want > 100000 ? 100000 : (uint32_t)ceil(want);
		} else {
			for (int w = 0; w < 3 && !st; w++)
				st = dt_allreduce_sum_f32(comm, buf, count, "bench/calibrate", dt_deadline_in(deadline_s), &err);
		}
		if (!st)
			st = dt_broadcast(comm, &inner, sizeof(inner), 0, "bench/inner", dt_deadline_in(deadline_s), &err);
		for (int s = 0; s < o->samples && !st; s++) {
			int64_t t0 = dt_now_ns();
			for (uint32_t i = 0; i < inner && !st; i++)
				st = dt_allreduce_sum_f32(comm, buf, count, "bench/sample", dt_deadline_in(deadline_s), &err);
			double per = (double)(dt_now_ns() - t0) / 1e3 / inner;
			memset(times, 0, (size_t)o->ranks * sizeof(float));
			times[rank] = (float)per;
			if (!st)
				st = dt_allreduce_sum_f32(comm, times, (size_t)o->ranks, "bench/times", dt_deadline_in(deadline_s),
							  &err);
			double mx = 0;
			for (int q = 0; q < o->ranks; q++)
				mx = (double)times[q] > mx ? (double)times[q] : mx;
			samples[s] = mx;
		}
		if (!st && rank == 0) {
			qsort(samples, (size_t)o->samples, sizeof(double), cmp_double);
			double us = samples[o->samples / 2];
			double bus = 2.0 * (o->ranks - 1) / o->ranks * (double)(count * 4) / (us * 1e-6) / 1e9;
			printf("{\"impl\": \"%s\", \"ranks\": %d, \"bytes\": %zu, \"us\": %.2f, \"busbw_gbs\": %.3f, "
			       "\"min_us\": %.2f, \"max_us\": %.2f, \"inner\": %u, \"wire\": \"%s\"}\n",
			       o->no_shm ? "dtrain_tcp" : "dtrain", o->ranks, count * 4, us, bus, samples[0], samples[o->samples - 1], inner,
			       dt_wire_security_name(o->wire));
			fflush(stdout);
		}
	}
	if (st)
		fprintf(stderr, "bench-allreduce: rank %d: error: %s\n", rank, err.msg);
	free(buf);
	free(times);
	free(samples);
	dt_comm_free(comm);
	dt_hello_release(&hello);
	return dt_status_exit_code(st);
}

static int parse_sizes(const char *s, struct opts *o)
{
	o->nsizes = 0;
	while (*s && o->nsizes < MAX_SIZES) {
		char *end;
		unsigned long long v = strtoull(s, &end, 10);
		if (end == s)
			return -1;
		if (*end == 'K' || *end == 'k')
			v <<= 10, end++;
		else if (*end == 'M' || *end == 'm')
			v <<= 20, end++;
		o->sizes[o->nsizes++] = (size_t)v & ~(size_t)3;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return o->nsizes ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct opts o = { .ranks = 2, .samples = 9, .min_sample_ms = 50 };
	int nnetns = 0, naddrs = 0;
	parse_sizes("4K,16K,64K,256K,1M,4M,16M,64M", &o);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strncmp(a, "--ranks=", 8))
			o.ranks = atoi(a + 8);
		else if (!strncmp(a, "--samples=", 10))
			o.samples = atoi(a + 10);
		else if (!strncmp(a, "--min_sample_ms=", 16))
			o.min_sample_ms = atoi(a + 16);
		else if (!strncmp(a, "--spin_us=", 10))
			o.spin_us = (unsigned)atoi(a + 10);
		else if (!strncmp(a, "--segment_bytes=", 16))
			o.segment_bytes = (size_t)atoll(a + 16);
		else if (!strncmp(a, "--algorithm=", 12))
			o.algorithm = !strcmp(a + 12, "ring")       ? DT_COMM_ALG_RING
				      : !strcmp(a + 12, "doubling") ? DT_COMM_ALG_DOUBLING
				      : !strcmp(a + 12, "halving")  ? DT_COMM_ALG_HALVING
								    : DT_COMM_ALG_AUTO;
		else if (!strncmp(a, "--wire_security=", 16)) {
			if (dt_wire_security_parse(a + 16, &o.wire) != 0) {
				fprintf(stderr, "bench-allreduce: --wire_security must be none, auth or encrypt\n");
				return 2;
			}
		} else if (!strcmp(a, "--no_cma"))
			o.no_cma = 1;
		else if (!strncmp(a, "--netns=", 8))
			nnetns = split_list(argv[i] + 8, o.netns, MAX_RANKS);
		else if (!strncmp(a, "--addrs=", 8))
			naddrs = split_list(argv[i] + 8, o.addrs, MAX_RANKS);
		else if (!strcmp(a, "--no_shm"))
			o.no_shm = 1;
		else if (!strncmp(a, "--tcp_congestion=", 17))
			o.tcp_congestion = a + 17;
		else if (!strncmp(a, "--sizes=", 8)) {
			if (parse_sizes(a + 8, &o)) {
				fprintf(stderr, "bench-allreduce: bad --sizes '%s' (e.g. 4K,64K,1M)\n", a + 8);
				return 2;
			}
		} else {
			fprintf(stderr, "usage: bench-allreduce --ranks=N [--sizes=4K,64K,1M] [--samples=9] "
					"[--min_sample_ms=50] [--spin_us=0] [--segment_bytes=0] [--algorithm=auto] "
					"[--wire_security=none|auth|encrypt] [--no_cma] [--no_shm] [--tcp_congestion=NAME] "
					"[--netns=NS0,.. --addrs=H:P,..]\n");
			return 2;
		}
	}
	if (o.ranks < 1 || o.ranks > MAX_RANKS || o.samples < 1) {
		fprintf(stderr, "bench-allreduce: --ranks must be 1..%d and --samples >= 1\n", MAX_RANKS);
		return 2;
	}
	if (nnetns != naddrs || (nnetns && nnetns != o.ranks)) {
		fprintf(stderr, "bench-allreduce: --netns and --addrs need one entry per rank (%d)\n", o.ranks);
		return 2;
	}
	int fds[MAX_RANKS];
	char addrs[MAX_RANKS][DT_COMM_ADDR_MAX];
	struct dt_comm_peer peers[MAX_RANKS];
	struct dt_err err = DT_ERR_INIT;
	if (nnetns) { /* each rank binds its own address in its namespace */
		for (int i = 0; i < o.ranks; i++) {
			fds[i] = -1;
			snprintf(addrs[i], sizeof(addrs[i]), "%s", o.addrs[i]);
		}
	} else if (dt_comm_listen_loopback(o.ranks, fds, addrs, &err)) {
		fprintf(stderr, "bench-allreduce: error: %s\n", err.msg);
		return 1;
	}
	for (int i = 0; i < o.ranks; i++)
		peers[i] = (struct dt_comm_peer){ addrs[i], "worker", (uint32_t)i };
	pid_t pids[MAX_RANKS];
	for (int i = 0; i < o.ranks; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			perror("bench-allreduce: fork");
			return 1;
		}
		if (pids[i] == 0) {
			for (int j = 0; j < o.ranks; j++)
				if (j != i && fds[j] >= 0)
					dt_sock_close(fds[j]);
			if (o.netns[i] && enter_netns(o.netns[i]) != 0)
				_exit(1);
			_exit(run_rank(&o, peers, i, fds[i]));
		}
	}
	for (int i = 0; i < o.ranks; i++)
		if (fds[i] >= 0)
			dt_sock_close(fds[i]);
	int worst = 0;
	for (int i = 0; i < o.ranks; i++) {
		int status;
		while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR)
			;
		int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
		if (code > worst)
			worst = code;
	}
	return worst;
}
