/* CLI tests for `dtrain config` and `dtrain make-configs`, and a real
 * one-node Slurm (tests/slurm/) on which `srun -n 3 dtrain config` must give
 * the three ranks one consistent layout. */
#include <errno.h>
#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_util.h"
#include "dt_test.h"
#include "slurm_util.h"

/* A cluster the outer environment might set must not leak into the tests
 * (the runner itself may run inside Slurm or MPI). */
static void clean_env(void)
{
	unsetenv("TF_CONFIG");
	unsetenv("SLURM_PROCID");
	unsetenv("OMPI_COMM_WORLD_RANK");
}

/* Runs `dtrain <args>` with TF_CONFIG set to tf (NULL: unset). */
static void run_dtrain(struct dt_run *r, const char *const *args, const char *tf)
{
	clean_env();
	const char *argv[32] = { "dtrain" };
	int n = 1;
	for (; args[n - 1] && n < 31; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	char env_tf[4096];
	const char *env[] = { env_tf, NULL };
	if (tf)
		snprintf(env_tf, sizeof(env_tf), "TF_CONFIG=%s", tf);
	dt_test_run(r, argv, tf ? env : NULL, 20);
	DT_CHECK(!r->timed_out);
}

#define SEED003_TF \
	"{\"cluster\": {\"chief\": [\"localhost:2000\"], \"ps\": [\"localhost:2002\"], \"worker\": [\"localhost:2001\"]}, " \
	"\"task\": {\"type\": \"worker\", \"index\": 0}}"

DT_TEST(cluster_cli, config_prints_the_resolved_cluster)
{
	struct dt_run r;
	const char *args[] = { "config", NULL };
	run_dtrain(&r, args, SEED003_TF);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_STR_EQ(r.out, "source:     TF_CONFIG\n"
			       "cluster:\n"
			       "  chief:0     localhost:2000\n"
			       "  ps:0        localhost:2002\n"
			       "  worker:0    localhost:2001  <- this task\n"
			       "task:       worker:0 at localhost:2001\n"
			       "chief:      chief:0 at localhost:2000 (not this task)\n"
			       "global id:  1\n"
			       "replicas:   2 trainers (chief, master and workers), 1 ps\n"
			       "master:     grpc://localhost:2001\n"
			       "peers:      ps:0 at localhost:2002\n");
	DT_CHECK_STR_EQ(r.err, "");
	dt_run_release(&r);
}

DT_TEST(cluster_cli, config_flags_and_tf_config_agree)
{
	struct dt_run a, b;
	const char *flags[] = { "config", "--ps_hosts=127.0.0.1:2222", "--worker_hosts=127.0.0.1:2223,127.0.0.1:2224",
				"--job_name=worker", "--task_index=1", NULL };
	run_dtrain(&a, flags, NULL);
	const char *plain[] = { "config", NULL };
	run_dtrain(&b, plain, "{\"cluster\": {\"ps\": [\"127.0.0.1:2222\"], \"worker\": [\"127.0.0.1:2223\", \"127.0.0.1:2224\"]}, "
			      "\"task\": {\"type\": \"worker\", \"index\": 1}}");
	DT_CHECK_INT_EQ(a.exit_code, 0);
	DT_CHECK_INT_EQ(b.exit_code, 0);
	DT_CHECK_CONTAINS(a.out, "source:     flags (--ps_hosts/--worker_hosts)\n");
	DT_CHECK_CONTAINS(b.out, "source:     TF_CONFIG\n");
	/* Everything after the source line is the same. */
	DT_CHECK_STR_EQ(strchr(a.out, '\n'), strchr(b.out, '\n'));
	dt_run_release(&a);
	dt_run_release(&b);
	/* Flags come first; TF_CONFIG is reported as ignored. */
	run_dtrain(&a, flags, SEED003_TF);
	DT_CHECK_INT_EQ(a.exit_code, 0);
	DT_CHECK_CONTAINS(a.out, "ignored:    TF_CONFIG (also set; --ps_hosts/--worker_hosts comes first)\n");
	dt_run_release(&a);
}

DT_TEST(cluster_cli, config_without_a_cluster_is_local)
{
	struct dt_run r;
	const char *args[] = { "config", NULL };
	run_dtrain(&r, args, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "source:     local\n");
	DT_CHECK_CONTAINS(r.out, "task:       worker:0 (local)\n");
	DT_CHECK_CONTAINS(r.out, "chief:      worker:0 (this task)\n");
	DT_CHECK_CONTAINS(r.out, "global id:  0\n");
	dt_run_release(&r);
}

DT_TEST(cluster_cli, config_exits_2_on_an_invalid_cluster)
{
	struct dt_run r;
	const char *args[] = { "config", NULL };
	run_dtrain(&r, args, "{\"cluster\": {\"chief\": [\"a:1\"], \"worker\": [\"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 4}}");
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_STR_EQ(r.out, "");
	DT_CHECK_STR_EQ(r.err, "error: 4 is not a valid task_id for task_type worker in the cluster_spec:\n"
			       "  chief     a:1\n"
			       "  worker    b:1\n"
			       "\n"
			       "Note that these values may be coming from the TF_CONFIG environment variable.\n"
			       "hint: worker lists 1 task, so the task's \"index\" goes from 0 to 0 (or add the address of worker:4)\n");
	dt_run_release(&r);
	run_dtrain(&r, args, "{\"cluster\": {\"worker\": [\"b:1\"]}");
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: malformed TF_CONFIG at line 1 column");
	dt_run_release(&r);
	const char *t2t[] = { "config", "--ps_replicas=3", NULL };
	run_dtrain(&r, t2t, SEED003_TF);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: --ps_replicas=3 disagrees with TF_CONFIG \"cluster\", which has 1 ps task\n");
	dt_run_release(&r);
}

DT_TEST(cluster_cli, config_usage)
{
	struct dt_run r;
	const char *help[] = { "config", "--help", NULL };
	run_dtrain(&r, help, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "usage: dtrain config");
	DT_CHECK_CONTAINS(r.out, "\nCluster:\n");
	DT_CHECK_CONTAINS(r.out, "--ps_hosts=HOST:PORT,...");
	DT_CHECK_CONTAINS(r.out, "--worker_job=/job:NAME");
	dt_run_release(&r);
	const char *typo[] = { "config", "--ps_host=a:1", NULL };
	run_dtrain(&r, typo, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "unknown option '--ps_host' (did you mean '--ps_hosts'?)");
	dt_run_release(&r);
	const char *extra[] = { "config", "worker", NULL };
	run_dtrain(&r, extra, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "unexpected argument 'worker'");
	dt_run_release(&r);
	const char *list[] = { "help", NULL };
	run_dtrain(&r, list, NULL);
	DT_CHECK_CONTAINS(r.out, "  config ");
	DT_CHECK_CONTAINS(r.out, "  make-configs ");
	dt_run_release(&r);
}

DT_TEST(cluster_cli, make_configs_prints_t2t_bytes)
{
	struct dt_run r;
	const char *sync[] = { "make-configs", "--masters=10.0.0.1:5555", "--ps=10.0.0.2:5555,10.0.0.3:5555", NULL };
	run_dtrain(&r, sync, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_STR_EQ(r.out,
		"Assuming SYNC distributed training with a single master and 2 workers\n"
		"'{\"cluster\": {\"ps\": [\"10.0.0.2:5555\", \"10.0.0.3:5555\"], \"master\": [\"10.0.0.1:5555\"]}, \"task\": {\"type\": \"master\", \"index\": 0}, \"environment\": \"cloud\"}'\t"
		"--master=grpc://10.0.0.1:5555 --ps_replicas=2 --worker_replicas=1 --worker_gpu=0 --worker_id=0 --ps_gpu=1 --sync --schedule=train --worker_job='/job:master'\n"
		"'{\"cluster\": {\"ps\": [\"10.0.0.2:5555\", \"10.0.0.3:5555\"], \"master\": [\"10.0.0.1:5555\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}, \"environment\": \"cloud\"}'\t--schedule=run_std_server\n"
		"'{\"cluster\": {\"ps\": [\"10.0.0.2:5555\", \"10.0.0.3:5555\"], \"master\": [\"10.0.0.1:5555\"]}, \"task\": {\"type\": \"ps\", \"index\": 1}, \"environment\": \"cloud\"}'\t--schedule=run_std_server\n");
	dt_run_release(&r);
	const char *async[] = { "make-configs", "--masters=10.0.0.1:5555,10.0.0.2:5555", "--ps=10.0.0.3:5555,10.0.0.4:5555", NULL };
	run_dtrain(&r, async, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "Assuming ASYNC distributed training with 2 workers and 2 parameter servers\n");
	DT_CHECK_CONTAINS(r.out, "--worker_id=1 --ps_gpu=0  --schedule=train --worker_job='/job:worker'\n");
	dt_run_release(&r);
}

DT_TEST(cluster_cli, make_configs_refuses_bad_input)
{
	struct dt_run r;
	const char *none[] = { "make-configs", NULL };
	run_dtrain(&r, none, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: Must provide --masters and --ps\nhint: ");
	DT_CHECK_STR_EQ(r.out, "");
	dt_run_release(&r);
	const char *empty[] = { "make-configs", "--masters=a:1,", "--ps=b:1", NULL };
	run_dtrain(&r, empty, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: entry 2 of --masters has an empty address");
	DT_CHECK_STR_EQ(r.out, "");
	dt_run_release(&r);
	const char *fmt[] = { "make-configs", "--masters=a:1", "--ps=b:1", "--format=jsn", NULL };
	run_dtrain(&r, fmt, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "unknown --format 'jsn' (did you mean 'json'?)");
	dt_run_release(&r);
}

DT_TEST(cluster_cli, make_configs_shell_format)
{
	struct dt_run r;
	const char *args[] = { "make-configs", "--masters=a:1,b:1", "--ps=p:1", "--format=shell", NULL };
	run_dtrain(&r, args, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_STR_EQ(r.out,
		"# Assuming ASYNC distributed training with 2 workers and 1 parameter servers\n"
		"TF_CONFIG='{\"cluster\": {\"ps\": [\"p:1\"], \"chief\": [\"a:1\"], \"worker\": [\"b:1\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}, \"environment\": \"cloud\"}' "
		"dtrain train --master=grpc://a:1 --ps_replicas=1 --worker_replicas=2 --worker_gpu=1 --worker_id=0 --ps_gpu=0 --schedule=train --worker_job='/job:chief'\n"
		"TF_CONFIG='{\"cluster\": {\"ps\": [\"p:1\"], \"chief\": [\"a:1\"], \"worker\": [\"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}, \"environment\": \"cloud\"}' "
		"dtrain train --master=grpc://b:1 --ps_replicas=1 --worker_replicas=2 --worker_gpu=1 --worker_id=1 --ps_gpu=0 --schedule=train --worker_job='/job:worker'\n"
		"TF_CONFIG='{\"cluster\": {\"ps\": [\"p:1\"], \"chief\": [\"a:1\"], \"worker\": [\"b:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}, \"environment\": \"cloud\"}' "
		"dtrain train --schedule=run_std_server\n");
	dt_run_release(&r);
}

/* make-configs --format=json, then `dtrain config` on every row: each one
 * is valid and names the task the plan gave it. */
DT_TEST(cluster_cli, make_configs_json_rows_pass_dtrain_config)
{
	struct dt_run r;
	const char *args[] = { "make-configs", "--masters=127.0.0.1:3000,127.0.0.1:3001,127.0.0.1:3002",
			       "--ps=127.0.0.1:3003", "--evaluator=127.0.0.1:3004", "--format=json", NULL };
	run_dtrain(&r, args, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	int rows = 0;
	for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
		json_error_t jerr;
		json_t *row = json_loads(line, 0, &jerr);
		DT_CHECK(row != NULL);
		const char *type = json_string_value(json_object_get(row, "type"));
		int index = (int)json_integer_value(json_object_get(row, "index"));
		const char *tf = json_string_value(json_object_get(row, "TF_CONFIG"));
		json_t *flags = json_object_get(row, "args");
		DT_CHECK(type && tf && json_is_array(flags));
		const char *cfg[16] = { "config" };
		size_t n = 1;
		for (size_t k = 0; k < json_array_size(flags) && n < 15; k++) {
			cfg[n] = json_string_value(json_array_get(flags, k));
			DT_CHECK(cfg[n] && cfg[n][0] && !strchr(cfg[n], '\''));
			n++;
		}
		cfg[n] = NULL;
		struct dt_run c;
		run_dtrain(&c, cfg, tf);
		DT_CHECK_INT_EQ(c.exit_code, 0);
		char want[64];
		snprintf(want, sizeof(want), "task:       %s:%d", type, index);
		DT_CHECK_CONTAINS(c.out, want);
		dt_run_release(&c);
		json_decref(row);
		rows++;
	}
	DT_CHECK_INT_EQ(rows, 5);
	dt_run_release(&r);
}

/* ---- a real Slurm ---- */

/* The parts of `dtrain config` output every rank must agree on. */
struct rank_view {
	char task[128];
	char chief[128];
	char cluster[1024];
	char source[256];
};

static int parse_rank(const char *text, struct rank_view *v)
{
	memset(v, 0, sizeof(*v));
	int in_cluster = 0;
	char *copy = strdup(text);
	for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "cluster:", 8) == 0) {
			in_cluster = 1;
			continue;
		}
		if (in_cluster && strncmp(line, "  ", 2) == 0) {
			char *mark = strstr(line, "  <- this task");
			if (mark)
				*mark = '\0';
			size_t used = strlen(v->cluster);
			snprintf(v->cluster + used, sizeof(v->cluster) - used, "%s\n", line);
			continue;
		}
		in_cluster = 0;
		if (strncmp(line, "task:", 5) == 0)
			snprintf(v->task, sizeof(v->task), "%s", line + 12);
		else if (strncmp(line, "source:", 7) == 0)
			snprintf(v->source, sizeof(v->source), "%s", line + 12);
		else if (strncmp(line, "chief:", 6) == 0) {
			char *paren = strstr(line, " (");
			if (paren)
				*paren = '\0';
			snprintf(v->chief, sizeof(v->chief), "%s", line + 12);
		}
	}
	free(copy);
	return v->task[0] && v->chief[0] && v->cluster[0];
}

/* Runs srun and checks the three ranks; returns "" or what went wrong. */
static void srun_and_check(const char *dir, char *failure, size_t cap)
{
	char bin[PATH_MAX], out_pat[700], err_pat[700], conf[700];
	if (!realpath(dt_test_dtrain_bin(), bin)) {
		snprintf(failure, cap, "cannot find the dtrain binary '%s'", dt_test_dtrain_bin());
		return;
	}
	snprintf(out_pat, sizeof(out_pat), "%s/rank.%%t.out", dir);
	snprintf(err_pat, sizeof(err_pat), "%s/rank.%%t.err", dir);
	snprintf(conf, sizeof(conf), "SLURM_CONF=%s/slurm.conf", dir);
	const char *argv[] = { "srun", "-n", "3", "-O", "--kill-on-bad-exit=1", "--time=1", "--output", out_pat,
			       "--error", err_pat, bin, "config", "--ps_replicas=1", NULL };
	const char *env[] = { conf, NULL };
	struct dt_run r;
	dt_test_run(&r, argv, env, 25);
	if (r.timed_out || r.exit_code != 0) {
		snprintf(failure, cap, "srun %s (exit %d): %.500s", r.timed_out ? "timed out" : "failed", r.exit_code, r.err);
		dt_run_release(&r);
		return;
	}
	dt_run_release(&r);
	struct rank_view v[3];
	const char *want_task[3] = { "ps:0 at ", "worker:0 at ", "worker:1 at " };
	for (int rank = 0; rank < 3; rank++) {
		char path[700];
		snprintf(path, sizeof(path), "%s/rank.%d.out", dir, rank);
		char *text = cli_read_file(path);
		if (!text || !parse_rank(text, &v[rank])) {
			snprintf(failure, cap, "rank %d printed no layout: %.500s", rank, text ? text : "(no output file)");
			free(text);
			return;
		}
		printf("rank %d:\n%s", rank, text); /* shown with -v */
		free(text);
		char want_src[64];
		snprintf(want_src, sizeof(want_src), "slurm (Slurm rank %d of 3", rank);
		if (strncmp(v[rank].source, want_src, strlen(want_src)) != 0) {
			snprintf(failure, cap, "rank %d: source '%s', expected '%s ...'", rank, v[rank].source, want_src);
			return;
		}
		if (strncmp(v[rank].task, want_task[rank], strlen(want_task[rank])) != 0) {
			snprintf(failure, cap, "rank %d is '%s', expected '%s...'", rank, v[rank].task, want_task[rank]);
			return;
		}
		if (rank > 0 && (strcmp(v[rank].cluster, v[0].cluster) != 0 || strcmp(v[rank].chief, v[0].chief) != 0)) {
			snprintf(failure, cap, "rank %d disagrees with rank 0:\n%schief %s\nvs\n%schief %s", rank, v[rank].cluster,
				 v[rank].chief, v[0].cluster, v[0].chief);
			return;
		}
	}
	if (strncmp(v[0].chief, "worker:0 at ", 12) != 0 || strstr(v[0].cluster, "  ps:0 ") == NULL ||
	    strstr(v[0].cluster, "  worker:1 ") == NULL || strstr(v[0].cluster, "  worker:2 ") != NULL)
		snprintf(failure, cap, "unexpected layout:\n%schief %s", v[0].cluster, v[0].chief);
}

DT_TEST_TIMEOUT(cluster_slurm_real, srun_three_ranks_agree_on_one_layout, 55)
{
	clean_env();
	double t0 = cli_now_s();
	char dir[600];
	struct dt_run r;
	slurm_start(&r, dir, sizeof(dir));

	char failure[4096] = "", skip[1024] = "", leftovers[1024] = "";
	if (r.exit_code == 77 || r.timed_out) {
		const char *last = r.out;
		for (const char *p = r.out; *p; p++)
			if (p[0] == '\n' && p[1])
				last = p + 1;
		snprintf(skip, sizeof(skip), "%s", r.timed_out ? "slurm cannot start: start-cluster.sh timed out" : last);
		fprintf(stderr, "%s%s", r.out, r.err);
	} else if (r.exit_code != 0) {
		snprintf(failure, sizeof(failure), "start-cluster.sh failed (exit %d): %.1000s%.1000s", r.exit_code, r.out, r.err);
	} else {
		srun_and_check(dir, failure, sizeof(failure));
	}
	dt_run_release(&r);
	slurm_stop(dir, leftovers, sizeof(leftovers));
	fprintf(stderr, "slurm test took %.1f s\n", cli_now_s() - t0);
	if (failure[0] || leftovers[0])
		dt_test_fail(__FILE__, __LINE__, "%s%s%s", failure, failure[0] && leftovers[0] ? "\n" : "", leftovers);
	if (skip[0])
		DT_SKIP(skip);
}
