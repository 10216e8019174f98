/* Emulated hosts (scripts/netns-hosts.sh, docs/TESTING.md "Emulated
 * hosts"): two all-reduce workers, each in its own network namespace behind
 * a 1 Gbit/s link, train to the end with addresses that are not loopback
 * (so with a cluster secret, as a networked cluster must), their ring's bytes
 * visibly crossing the shaped link; and the namespaces are gone afterwards,
 * also when the script is stopped by a signal mid-run. Skipped, with the
 * reason, only where `ip netns add` is not permitted (not root). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_procs.h"
#include "dt_test.h"

#define SCRIPT "scripts/netns-hosts.sh"

static void skip_without_netns(void)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ SCRIPT, "check", NULL }, NULL, 30);
	if (r.exit_code == 77)
		DT_SKIP("'ip netns add' is not permitted here (needs root and iproute2): no emulated hosts");
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
}

/* Copies the set's name from "hosts dthNxN" in `out` into name. */
static void set_name_of(const char *out, char *name, size_t cap)
{
	const char *p = out ? strstr(out, "hosts dth") : NULL;
	DT_CHECK(p != NULL);
	p += strlen("hosts ");
	size_t n = strcspn(p, " \n");
	DT_CHECK(n > 0 && n < cap);
	memcpy(name, p, n);
	name[n] = '\0';
}

/* 1 if any namespace of set `name` (name-0, name-sw, ...) still exists. */
static int set_exists(const char *name)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "ip", "netns", "list", NULL }, NULL, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	char prefix[80];
	snprintf(prefix, sizeof(prefix), "%s-", name);
	int found = strstr(r.out, prefix) != NULL;
	dt_run_release(&r);
	return found;
}

/* Under `netns-hosts.sh run`: a secret, worker 1 then worker 0, each in its
 * namespace, then the bytes host 0's link sent ("Sent N bytes" of its tbf). */
static const char WORKERS_SH[] =
	"echo \"hosts $NETNS_HOSTS\"\n"
	"\"$DTRAIN\" secret new \"$T/secret\" || exit 10\n"
	"set -- --model=mlp --problem=synthetic --train_steps=60 --log_every=20 --hparams=batch_size=32 \\\n"
	"  --worker_hosts=10.99.0.1:2222,10.99.0.2:2222 --job_name=worker --connect_timeout=60 \\\n"
	"  --cluster_secret_file=\"$T/secret\"\n"
	"ip netns exec \"$NETNS_HOSTS-1\" \"$DTRAIN\" train \"$@\" --task_index=1 >\"$T/w1.out\" 2>\"$T/w1.err\" &\n"
	"w1=$!\n"
	"ip netns exec \"$NETNS_HOSTS-0\" \"$DTRAIN\" train \"$@\" --task_index=0 >\"$T/w0.out\" 2>\"$T/w0.err\"\n"
	"rc0=$?\n"
	"wait $w1\n"
	"rc1=$?\n"
	"tc -n \"$NETNS_HOSTS-0\" -s qdisc show dev eth0\n"
	"echo \"exits $rc0 $rc1\"\n"
	"[ $rc0 = 0 ] && [ $rc1 = 0 ]\n";

DT_TEST_TIMEOUT(netns, two_workers_train_across_emulated_hosts, 240)
{
	skip_without_netns();
	char env_bin[700], env_tmp[700];
	snprintf(env_bin, sizeof(env_bin), "DTRAIN=%s", dt_test_dtrain_bin());
	snprintf(env_tmp, sizeof(env_tmp), "T=%s", dt_test_tmpdir());
	/* Every byte over the link, as between real hosts: the namespaces share
	 * one kernel, so the ring would otherwise read large segments from the
	 * neighbour's memory. */
	const char *env[] = { env_bin, env_tmp, "DTRAIN_COLLECTIVE_CMA=0", "DTRAIN_COLLECTIVE_SHM=0", NULL };
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ SCRIPT, "run", "2", "1gbit", "--", "/bin/sh", "-c", WORKERS_SH, NULL }, env,
		    220);
	char p[700];
	char *e0 = cli_read_file(dt_test_path(p, sizeof(p), "w0.err"));
	char *o0 = cli_read_file(dt_test_path(p, sizeof(p), "w0.out"));
	char *e1 = cli_read_file(dt_test_path(p, sizeof(p), "w1.err"));
	if (r.exit_code != 0)
		fprintf(stderr, "script stdout:\n%s\nstderr:\n%s\nworker 0:\n%s\nworker 1:\n%s\n", r.out, r.err,
			e0 ? e0 : "", e1 ? e1 : "");
	DT_CHECK(!r.timed_out);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "exits 0 0");
	DT_CHECK(o0 && e0 && e1);
	DT_CHECK_CONTAINS(o0, "global step 60");
	/* every byte over the sockets, none read from memory, and the cost
	 * model prices the links as another host's (addresses not loopback) */
	DT_CHECK_CONTAINS(e0, "links tcp remote");
	/* and measures their α and β at the rendezvous (comm_costs.c): the model
	 * prices the 1 Gbit/s link at what it measured, not a compiled guess */
	DT_CHECK_CONTAINS(e0, "link costs measured (tcp remote links, 2 of 2 ranks)");
	DT_CHECK_CONTAINS(e0, "ps/byte measured"); /* then ")" or "; timed: ..." */
	DT_CHECK_CONTAINS(e0, "recursive doubling against halving-doubling, timed over 2 ranks");
	/* and cuts its steps into 1 MiB segments, not the 256 KiB of one host */
	DT_CHECK_CONTAINS(e0, "segments of 1048576 bytes)");
	/* The ring crossed the shaped link: 60 steps of mlp's gradients (about
	 * 0.4 MB each way per step) are well over 4 MB through host 0's tbf. */
	const char *sent = strstr(r.out, "Sent ");
	DT_CHECK(sent != NULL);
	DT_CHECK(atof(sent + 5) > 4e6);
	char name[64];
	set_name_of(r.out, name, sizeof(name));
	DT_CHECK(!set_exists(name));
	free(e0), free(o0), free(e1);
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(netns, hosts_are_removed_when_the_script_is_signalled, 60)
{
	skip_without_netns();
	struct task t;
	const char *argv[] = { SCRIPT, "run", "3", "10gbit", "--", "/bin/sh", "-c",
			       "echo \"hosts $NETNS_HOSTS\"; ip netns exec \"$NETNS_HOSTS-2\" sleep 50", NULL };
	task_start(&t, "hosts", argv, NULL);
	/* The name appears on stdout once the hosts are up. */
	char *out = NULL;
	double until = cli_now_s() + 30;
	while (cli_now_s() < until) {
		free(out);
		out = task_read(&t, 0);
		if (strstr(out, "hosts dth"))
			break;
		cli_sleep_ms(50);
	}
	char name[64];
	set_name_of(out, name, sizeof(name));
	DT_CHECK(set_exists(name));
	DT_CHECK_INT_EQ(kill(t.pid, SIGTERM), 0);
	int st = task_wait(&t, 20);
	if (st != 143)
		task_kill(&t);
	DT_CHECK_INT_EQ(st, 143);
	DT_CHECK(!set_exists(name));
	free(out);
}
