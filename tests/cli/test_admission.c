/* Strangers at a task's port, as separate dtrain processes on loopback
 * (issue 21, items 3 and 5): a silent connection and a slowloris at the
 * all-reduce rendezvous, at a ps while the chief and a worker train, and at
 * the in-graph std servers, cost nothing but their own connections; a
 * thousand hostile pending connections, each announcing a large HELLO and
 * sending part of it, leave a ps's peak resident memory within 64 MiB of
 * idle and a real trainer still gets in. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "cluster_procs.h"
#include "dt_test.h"
#include "net/frame.h"
#include "net/messages.h"
#include "net/socket.h"

#define TASK_WAIT_S 240.0

/* A connection to 127.0.0.1:port, retrying until the task listens. */
static int stranger(int port)
{
	struct dt_err err = DT_ERR_INIT;
	int fd;
	DT_CHECK_OK(dt_sock_connect("127.0.0.1", port, "the task", dt_deadline_in(60), NULL, &fd, &err), &err);
	return fd;
}

static void send_hello_header(int fd, uint64_t length)
{
	uint8_t hdr[DT_FRAME_HEADER_SIZE];
	struct dt_frame_header h = { DT_PROTOCOL_VERSION, DT_MSG_HELLO, 0, 0, length };
	dt_frame_header_pack(&h, hdr);
	DT_CHECK(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) == (ssize_t)sizeof(hdr));
}

/* While any of tasks[0..n) runs (at most timeout_s): one byte of the
 * slowloris' hello every 0.2 s, until the task closes it. */
static void trickle_while_running(int slow, struct task **tasks, int n, double timeout_s)
{
	double end = cli_now_s() + timeout_s;
	int sending = 1;
	while (cli_now_s() < end) {
		int running = 0;
		for (int i = 0; i < n; i++)
			running += task_wait(tasks[i], 0) == -1;
		if (!running)
			return;
		if (sending) {
			char z = 0;
			sending = send(slow, &z, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1;
		}
		cli_sleep_ms(200);
	}
}

/* Issue 21 item 3: on 153f7c5 both workers exited 3 (the silent connection
 * was judged first, alone, and its timeout was fatal). */
DT_TEST_TIMEOUT(admission, strangers_at_the_allreduce_rendezvous_do_not_stop_the_job, 240)
{
	const char *args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=100", "--log_every=0",
			       "--connect_timeout=60", NULL };
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	int port = cluster_port(&c, "worker", 0);
	int silent = stranger(port), slow = stranger(port);
	send_hello_header(slow, 400);
	cli_sleep_ms(300);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	trickle_while_running(slow, (struct task *[]){ w0, w1 }, 2, TASK_WAIT_S);
	EXPECT_EXIT(&c, w0, 0, 10);
	EXPECT_EXIT(&c, w1, 0, 10);
	char *out = task_read(w0, 0);
	DT_CHECK_CONTAINS(out, "at global step 100: accuracy = ");
	free(out);
	close(silent), close(slow);
}

DT_TEST_TIMEOUT(admission, strangers_at_a_ps_do_not_disturb_the_chief_and_worker, 240)
{
	const char *args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=600", "--log_every=200", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, args);
	int port = cluster_port(&c, "ps", 0);
	int silent = stranger(port), slow = stranger(port);
	send_hello_header(slow, 400);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	trickle_while_running(slow, (struct task *[]){ chief, worker }, 2, TASK_WAIT_S);
	EXPECT_EXIT(&c, chief, 0, 10);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps0, 0, 30);
	char *out = task_read(chief, 0);
	DT_CHECK(cli_accuracy_of(out) > 0.6);
	free(out);
	close(silent), close(slow);
}

/* The in-graph std servers accept the master through the same server. */
DT_TEST_TIMEOUT(admission, strangers_at_the_std_servers_do_not_disturb_in_graph_training, 240)
{
	int ports[3];
	cli_free_ports(ports, 3);
	char masters[64], ps[96];
	snprintf(masters, sizeof(masters), "--masters=127.0.0.1:%d", ports[0]);
	snprintf(ps, sizeof(ps), "--ps=127.0.0.1:%d,127.0.0.1:%d", ports[1], ports[2]);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "make-configs", masters, ps, NULL }, NULL, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	struct cluster c;
	int master = cluster_start_make_configs(&c, r.out, 3, "--model=mlp --problem=fashion_mnist --train_steps=300 "
								"--log_every=100", "master");
	dt_run_release(&r);
	DT_CHECK(master >= 0);
	int silent[2], slow[2];
	for (int i = 0; i < 2; i++) {
		silent[i] = stranger(ports[1 + i]);
		slow[i] = stranger(ports[1 + i]);
		send_hello_header(slow[i], 400);
	}
	struct task *m = &c.tasks[master];
	trickle_while_running(slow[0], &m, 1, TASK_WAIT_S);
	EXPECT_EXIT(&c, m, 0, 10);
	for (int i = 0; i < c.n; i++)
		EXPECT_EXIT(&c, &c.tasks[i], 0, 30);
	char *e = task_read(m, 1);
	DT_CHECK_CONTAINS(e, "ended the run on 2 std server(s) at step 300");
	free(e);
	for (int i = 0; i < 2; i++)
		close(silent[i]), close(slow[i]);
}

/* A value in kB from /proc/<pid>/status ("VmHWM", "VmRSS"). */
static long proc_kb(pid_t pid, const char *key)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	char *s = cli_read_file(path);
	DT_CHECK(s != NULL);
	char *p = strstr(s, key);
	DT_CHECK(p != NULL);
	long kb = strtol(p + strlen(key) + 1, NULL, 10);
	free(s);
	return kb;
}

/* The hello cap a ps applies, from its refusal of a 16 MiB hello header. */
static uint64_t hello_cap_of(int port)
{
	int fd = stranger(port);
	send_hello_header(fd, 16u << 20);
	char buf[4096];
	size_t got = 0;
	double end = cli_now_s() + 10;
	while (got < sizeof(buf) - 1 && cli_now_s() < end) {
		ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
			break;
		if (n > 0)
			got += (size_t)n;
		else
			cli_sleep_ms(10);
	}
	close(fd);
	buf[got] = '\0';
	const char *key = "more than the ";
	char *p = NULL;
	for (size_t i = 0; i + strlen(key) < got && !p; i++)
		if (memcmp(buf + i, key, strlen(key)) == 0)
			p = buf + i + strlen(key);
	if (!p)
		dt_test_fail(__FILE__, __LINE__, "the ps did not refuse a 16 MiB hello on its header (%zu bytes back)", got);
	return strtoull(p, NULL, 10);
}

#define HOSTILE 1000

/* Issue 21 item 5: on 153f7c5, 64 connections each sending a 16 MiB hello
 * took a ps from 14 MB to 1.04 GiB. The ps runs with 512 descriptors, half
 * the hostile connections: it never holds more than its pending cap. */
DT_TEST_TIMEOUT(admission, a_thousand_hostile_hellos_stay_within_64_mib_of_idle, 240)
{
	const char *args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=300", "--log_every=100", NULL };
	struct rlimit was;
	DT_CHECK(getrlimit(RLIMIT_NOFILE, &was) == 0);
	if (was.rlim_max != RLIM_INFINITY && was.rlim_max < HOSTILE + 64)
		DT_SKIP("RLIMIT_NOFILE's hard limit is below 1064: the test cannot open its 1000 connections");
	struct rlimit low = { 512, was.rlim_max };
	DT_CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
	struct cluster c;
	cluster_init(&c, "chief", 0, 1);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, args); /* inherits the 512 */
	struct rlimit high = { HOSTILE + 64 > was.rlim_cur ? HOSTILE + 64 : was.rlim_cur, was.rlim_max };
	DT_CHECK(setrlimit(RLIMIT_NOFILE, &high) == 0);
	int port = cluster_port(&c, "ps", 0);
	uint64_t cap = hello_cap_of(port);
	cli_sleep_ms(500);
	long idle = proc_kb(ps0->pid, "VmHWM");
	fprintf(stderr, "ps idle: VmHWM %ld kB, hello cap %llu bytes\n", idle, (unsigned long long)cap);

	/* Half announce 16 MiB and send 1 MiB of it (refused on the header);
	 * half announce the cap itself and send half of it (held, within the budget). */
	static int fds[HOSTILE];
	size_t big = 1u << 20;
	uint8_t *junk = calloc(1, big);
	for (int i = 0; i < HOSTILE; i++) {
		fds[i] = stranger(port);
		int large = i % 2 == 0;
		send_hello_header(fds[i], large ? 16u << 20 : cap);
		/* Whatever the socket takes now: the ps may have closed it already. */
		(void)!send(fds[i], junk, large ? big : (size_t)cap / 2, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	free(junk);
	cli_sleep_ms(1000);
	long hostile = proc_kb(ps0->pid, "VmHWM");
	fprintf(stderr, "ps under %d hostile connections: VmHWM %ld kB (+%ld kB over idle), VmRSS %ld kB\n", HOSTILE,
		hostile, hostile - idle, proc_kb(ps0->pid, "VmRSS"));
	DT_CHECK(hostile - idle <= 64 * 1024);

	/* A real trainer, arriving while the strangers still hold their sockets. */
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	long end = proc_kb(ps0->pid, "VmHWM");
	EXPECT_EXIT(&c, ps0, 0, 30);
	fprintf(stderr, "ps after training: VmHWM %ld kB\n", end);
	char *out = task_read(chief, 0), *pe = task_read(ps0, 1);
	DT_CHECK_CONTAINS(out, "accuracy = ");
	DT_CHECK_CONTAINS(pe, "closing unjudged connections");
	free(out), free(pe);
	for (int i = 0; i < HOSTILE; i++)
		close(fds[i]);
	DT_CHECK(setrlimit(RLIMIT_NOFILE, &was) == 0);
}
