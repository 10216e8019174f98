/*
 * ps_bench — push+pull throughput through dtrain's parameter servers on
 * loopback, beside a raw TCP copy of the same bytes in the same run.
 *
 * For each model size (1, 10, 100 MB of float32, one variable split by rows
 * as the placement splits it) and each number of ps (1, 2), the ps tasks run
 * as child processes (distribute/ps_server.h with SGD), and this process is the
 * trainer (distribute/ps_client.h): every round pushes the whole gradient buffer
 * and pulls the whole parameter buffer (2 × size bytes on the wire). The raw
 * copy sends size bytes to a child that reads them and sends size bytes back
 * (also 2 × size), over TCP with the congestion control the ps connections
 * take (net/congestion.h; DTRAIN_TCP_CONGESTION=host keeps the host's). Rates are MB/s of bytes moved, medians of --reps,
 * measured interleaved: raw, 1 ps, 2 ps, raw, ...
 *
 * Prints one JSON object per line: {"what": "raw"|"ps", "mb": 10, "num_ps": 2, "mb_per_s": ...}.
 *
 *   build/bench-ps [REPS]                          the table above
 *   build/bench-ps --wire_security=none|auth|encrypt [--sizes=64K,1M,16M] [--reps=5]
 *       1 ps, every connection with one fixed cluster secret (auth: every frame
 *       tagged; encrypt: encrypted; docs/SECURITY.md); one line per size:
 *       {"what": "ps", "bytes": 65536, "num_ps": 1, "wire": "auth", "mb_per_s": ...}
 *       (run it per mode, interleaved, to compare: bench/wire_security.sh).
 *       --ps_netns=NS --ps_host=IP: the ps child runs in network namespace NS
 *       (/run/netns/NS) listening on IP, the trainer wherever this process
 *       runs (`ip netns exec` another): emulated hosts, bench/wire_security_hosts.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "distribute/placement.h"
#include "distribute/ps_client.h"
#include "distribute/ps_server.h"
#include "distribute/ps_wire.h"
#include "net/auth.h"
#include "net/congestion.h"
#include "net/handshake.h"
#include "net/loop.h"
#include "net/socket.h"
#include "nn/hparams.h"

#define COLS 1024

static void die(const char *what, const struct dt_err *err)
{
	fprintf(stderr, "ps_bench: %s: %s\n", what, err ? err->msg : "");
	exit(1);
}

struct model {
	struct dt_variable var;
	struct dt_placement pl;
	struct dt_hparams hp;
	size_t n;
};

/* Every hello of this run: with a secret when --wire_security is auth or encrypt. */
static struct dt_auth bench_auth;
static const struct dt_auth *bench_use;
/* Where the ps children listen (--ps_host) and in which network namespace (--ps_netns, or NULL). */
static const char *ps_host = "127.0.0.1";
static const char *ps_netns;

/* Moves this (forked, single-threaded) process into network namespace `name`. */
static void enter_netns(const char *name)
{
	char path[300];
	snprintf(path, sizeof(path), "/run/netns/%s", name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
		fprintf(stderr, "ps_bench: cannot enter network namespace %s: %s (root? scripts/netns-hosts.sh up)\n",
			path, strerror(errno));
		exit(1);
	}
	close(fd);
}

static void model_make(struct model *m, size_t bytes, int num_ps)
{
	struct dt_err err = DT_ERR_INIT;
	memset(m, 0, sizeof(*m));
	int64_t rows = (int64_t)(bytes / 4 / COLS);
	m->var = (struct dt_variable){ .name = "bench/kernel", .ndim = 2, .shape = { rows, COLS }, .count = (size_t)rows * COLS };
	m->n = m->var.count;
	if (dt_placement_compute(&m->var, 1, num_ps, 0, &m->pl, &err))
		die("placement", &err);
	if (dt_hparams_from_set("mlp_base", &m->hp, &err))
		die("hparams", &err);
	snprintf(m->hp.optimizer, sizeof(m->hp.optimizer), "sgd");
}

static void hello_for(struct dt_hello *h, const struct model *m, const char *role, uint32_t index)
{
	struct dt_err err = DT_ERR_INIT;
	dt_hello_init(h, role, index, 42);
	h->auth = bench_use;
	if (dt_ps_signature_add_vars(&h->signature, &m->var, 1, &err))
		die("signature", &err);
}

/* A ps child: serves until the chief ends the run; writes its port to `fd`. */
static pid_t start_ps(const struct model *m, int index, int *port)
{
	int p[2];
	if (pipe(p))
		die("pipe", NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		if (ps_netns)
			enter_netns(ps_netns);
		struct dt_err err = DT_ERR_INIT;
		struct dt_loop *loop;
		struct dt_hello h;
		hello_for(&h, m, "ps", (uint32_t)index);
		struct dt_ps_server *s;
		struct dt_ps_server_config sc = { .host = ps_host, .index = index, .local = &h, .placement = &m->pl,
						  .num_params = m->n, .hp = &m->hp, .chief_role = "chief" };
		if (dt_loop_new(&loop, &err) || dt_ps_server_new(loop, &sc, &s, &err))
			die("ps", &err);
		int port_now = dt_ps_server_port(s);
		if (write(p[1], &port_now, sizeof(port_now)) != sizeof(port_now))
			_exit(1);
		int64_t deadline = dt_deadline_in(600);
		while (!dt_ps_server_ended(s) && !dt_deadline_passed(deadline))
			if (dt_loop_run_once(loop, dt_deadline_in(1), &err))
				die("ps loop", &err);
		dt_ps_server_shutdown(s);
		dt_ps_server_free(s);
		_exit(0);
	}
	close(p[1]);
	if (read(p[0], port, sizeof(*port)) != sizeof(*port))
		die("ps did not start", NULL);
	close(p[0]);
	return pid;
}

static double ps_rate_bytes(size_t bytes, int num_ps, int rounds)
{
	struct model m;
	model_make(&m, bytes, num_ps);
	pid_t pids[2];
	char addr[2][64];
	const char *addrs[2];
	for (int i = 0; i < num_ps; i++) {
		int port;
		pids[i] = start_ps(&m, i, &port);
		snprintf(addr[i], sizeof(addr[i]), "%s:%d", ps_host, port);
		addrs[i] = addr[i];
	}
	struct dt_err err = DT_ERR_INIT;
	struct dt_loop *loop;
	struct dt_hello h;
	hello_for(&h, &m, "chief", 0);
	float *params = calloc(m.n, sizeof(float)), *grads = calloc(m.n, sizeof(float));
	struct dt_ps_client *c;
	struct dt_ps_client_config cc = { .ps_addrs = addrs, .local = &h, .placement = &m.pl, .params = params, .grads = grads };
	if (dt_loop_new(&loop, &err) || dt_ps_client_new(loop, &cc, dt_deadline_in(30), &c, &err))
		die("client", &err);
	for (int i = 0; i < num_ps; i++)
		if (dt_ps_client_init(c, i, dt_deadline_in(60), &err))
			die("init", &err);
	if (dt_ps_client_round(c, 1, 0.0f, -1, 1, NULL, dt_deadline_in(60), &err)) /* warm-up */
		die("round", &err);
	int64_t t0 = dt_now_ns();
	for (int r = 0; r < rounds; r++)
		if (dt_ps_client_round(c, 1, 0.0f, -1, 1, NULL, dt_deadline_in(60), &err))
			die("round", &err);
	double secs = (double)(dt_now_ns() - t0) / 1e9;
	if (dt_ps_client_end(c, dt_deadline_in(30), &err))
		die("end", &err);
	dt_ps_client_free(c);
	for (int i = 0; i < num_ps; i++)
		waitpid(pids[i], NULL, 0);
	dt_loop_free(loop);
	dt_hello_release(&h);
	dt_placement_release(&m.pl);
	free(params), free(grads);
	return 2.0 * (double)(m.n * 4) / (1 << 20) * rounds / secs;
}

static double ps_rate(int mb, int num_ps, int rounds)
{
	return ps_rate_bytes((size_t)mb << 20, num_ps, rounds);
}

static double raw_rate(int mb, int rounds)
{
	struct dt_err err = DT_ERR_INIT;
	size_t len = (size_t)mb << 20;
	int lfd, port;
	/* the congestion control the ps connections take (net/congestion.h), on
	 * both ends, so that the copy is the same TCP as theirs */
	char cc[DT_TCP_CC_MAX];
	if (dt_tcp_cc_choose(NULL, NULL, cc, &err))
		die("congestion control", &err);
	if (dt_sock_listen("127.0.0.1", 0, 1, &lfd, &port, &err))
		die("listen", &err);
	if (dt_tcp_cc_set(lfd, cc) != 0)
		die("congestion control", &err);
	pid_t pid = fork();
	if (pid == 0) {
		char *buf = malloc(len);
		int fd = -1;
		int64_t deadline = dt_deadline_in(60);
		while (fd < 0 && !dt_deadline_passed(deadline)) {
			if (dt_sock_accept(lfd, &fd, NULL, 0, &err))
				die("accept", &err);
			if (fd < 0)
				usleep(1000);
		}
		for (int r = 0; r <= rounds; r++)
			if (dt_sock_recv_all(fd, buf, len, dt_deadline_in(60), "bench", &err) ||
			    dt_sock_send_all(fd, buf, len, dt_deadline_in(60), "bench", &err))
				die("raw child", &err);
		_exit(0);
	}
	close(lfd);
	int fd;
	char *buf = calloc(1, len);
	struct dt_connect_opts opts = { .congestion = cc };
	if (dt_sock_connect("127.0.0.1", port, "bench", dt_deadline_in(10), &opts, &fd, &err))
		die("connect", &err);
	int64_t t0 = 0;
	for (int r = 0; r <= rounds; r++) {
		if (r == 1)
			t0 = dt_now_ns(); /* round 0 is the warm-up */
		if (dt_sock_send_all(fd, buf, len, dt_deadline_in(60), "bench", &err) ||
		    dt_sock_recv_all(fd, buf, len, dt_deadline_in(60), "bench", &err))
			die("raw", &err);
	}
	double secs = (double)(dt_now_ns() - t0) / 1e9;
	close(fd);
	waitpid(pid, NULL, 0);
	free(buf);
	return 2.0 * mb * rounds / secs;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* --wire_security: one mode, 1 ps, the given sizes. */
static int wire_main(int argc, char **argv)
{
	enum dt_wire_security mode = DT_WIRE_NONE;
	int reps = 5;
	size_t sizes[16] = { 64u << 10, 1u << 20, 16u << 20 };
	int nsizes = 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strncmp(a, "--wire_security=", 16) && dt_wire_security_parse(a + 16, &mode) == 0) {
			continue;
		} else if (!strncmp(a, "--ps_netns=", 11)) {
			ps_netns = a + 11;
		} else if (!strncmp(a, "--ps_host=", 10)) {
			ps_host = a + 10;
		} else if (!strncmp(a, "--reps=", 7) && atoi(a + 7) >= 1 && atoi(a + 7) <= 50) {
			reps = atoi(a + 7);
		} else if (!strncmp(a, "--sizes=", 8)) {
			nsizes = 0;
			for (const char *p = a + 8; *p && nsizes < 16;) {
				char *end;
				size_t v = strtoull(p, &end, 10);
				if (*end == 'K' || *end == 'k')
					v <<= 10, end++;
				else if (*end == 'M' || *end == 'm')
					v <<= 20, end++;
				if (end == p || v < 4 * COLS || (*end && *end != ',')) {
					fprintf(stderr, "ps_bench: bad --sizes '%s' (e.g. 64K,1M,16M; at least 4K)\n", a + 8);
					return 2;
				}
				sizes[nsizes++] = v;
				p = *end ? end + 1 : end;
			}
		} else {
			fprintf(stderr, "usage: bench-ps [REPS] | bench-ps --wire_security=none|auth|encrypt "
					"[--sizes=64K,1M,16M] [--reps=5] [--ps_netns=NS --ps_host=IP]\n");
			return 2;
		}
	}
	memset(bench_auth.secret, 0x5a, sizeof(bench_auth.secret));
	bench_auth.mode = mode;
	bench_use = mode == DT_WIRE_NONE ? NULL : &bench_auth;
	for (int si = 0; si < nsizes; si++) {
		/* About 64 MB moved per measurement, at least 3 rounds. */
		int rounds = (int)((64u << 20) / sizes[si]);
		rounds = rounds < 3 ? 3 : rounds > 500 ? 500 : rounds;
		double r[50];
		for (int k = 0; k < reps; k++)
			r[k] = ps_rate_bytes(sizes[si], 1, rounds);
		qsort(r, (size_t)reps, sizeof(double), cmp);
		printf("{\"what\": \"ps\", \"bytes\": %zu, \"num_ps\": 1, \"wire\": \"%s\", \"mb_per_s\": %.0f}\n",
		       sizes[si], dt_wire_security_name(mode), r[reps / 2]);
		fflush(stdout);
	}
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc > 1 && argv[1][0] == '-')
		return wire_main(argc, argv);
	int reps = argc > 1 ? atoi(argv[1]) : 5;
	if (reps < 1 || reps > 50)
		reps = 5;
	signal(SIGPIPE, SIG_IGN);
	const int sizes[] = { 1, 10, 100 };
	for (int si = 0; si < 3; si++) {
		int mb = sizes[si], rounds = mb >= 100 ? 3 : mb >= 10 ? 20 : 100;
		double raw[50], ps1[50], ps2[50];
		for (int r = 0; r < reps; r++) {
			raw[r] = raw_rate(mb, rounds);
			ps1[r] = ps_rate(mb, 1, rounds);
			ps2[r] = ps_rate(mb, 2, rounds);
		}
		qsort(raw, (size_t)reps, sizeof(double), cmp);
		qsort(ps1, (size_t)reps, sizeof(double), cmp);
		qsort(ps2, (size_t)reps, sizeof(double), cmp);
		printf("{\"what\": \"raw\", \"mb\": %d, \"num_ps\": 0, \"mb_per_s\": %.0f}\n", mb, raw[reps / 2]);
		printf("{\"what\": \"ps\", \"mb\": %d, \"num_ps\": 1, \"mb_per_s\": %.0f, \"of_raw\": %.2f}\n", mb,
		       ps1[reps / 2], ps1[reps / 2] / raw[reps / 2]);
		printf("{\"what\": \"ps\", \"mb\": %d, \"num_ps\": 2, \"mb_per_s\": %.0f, \"of_raw\": %.2f}\n", mb,
		       ps2[reps / 2], ps2[reps / 2] / raw[reps / 2]);
		fflush(stdout);
	}
	return 0;
}
