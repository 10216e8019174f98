/* Unit tests for src/cluster/plan: t2t-make-tf-configs reproduced byte for
 * byte (seed 000's two examples), our refusals, --evaluator, and the
 * invariant that every row passes our own TF_CONFIG parser and flag checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/options.h"
#include "cluster/plan.h"
#include "cluster/resolve.h"

/* The whole t2t output of a plan, as `dtrain make-configs` prints it. */
static char *t2t_text(const struct dt_plan *plan)
{
	size_t cap = 1 << 16, used = 0;
	char *out = malloc(cap);
	used += (size_t)snprintf(out + used, cap - used, "%s\n", plan->banner);
	for (int i = 0; i < plan->ntasks; i++) {
		char *flags = dt_plan_t2t_flags(&plan->tasks[i]);
		used += (size_t)snprintf(out + used, cap - used, "'%s'\t%s\n", plan->tasks[i].tf_config, flags);
		free(flags);
	}
	DT_CHECK(used < cap);
	return out;
}

/* Output of t2t-make-tf-configs' algorithm under Python 3 (json.dumps keeps
 * insertion order), for seed 000's two examples. */
static const char sync_expected[] =
	"Assuming SYNC distributed training with a single master and 2 workers\n"
	"'{\"cluster\": {\"ps\": [\"10.0.0.2:5555\", \"10.0.0.3:5555\"], \"master\": [\"10.0.0.1:5555\"]}, \"task\": {\"type\": \"master\", \"index\": 0}, \"environment\": \"cloud\"}'\t"
	"--master=grpc://10.0.0.1:5555 --ps_replicas=2 --worker_replicas=1 --worker_gpu=0 --worker_id=0 --ps_gpu=1 --sync --schedule=train --worker_job='/job:master'\n"
	"'{\"cluster\": {\"ps\": [\"10.0.0.2:5555\", \"10.0.0.3:5555\"], \"master\": [\"10.0.0.1:5555\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}, \"environment\": \"cloud\"}'\t"
	"--schedule=run_std_server\n"
	"'{\"cluster\": {\"ps\": [\"10.0.0.2:5555\", \"10.0.0.3:5555\"], \"master\": [\"10.0.0.1:5555\"]}, \"task\": {\"type\": \"ps\", \"index\": 1}, \"environment\": \"cloud\"}'\t"
	"--schedule=run_std_server\n";

static const char async_expected[] =
	"Assuming ASYNC distributed training with 2 workers and 2 parameter servers\n"
	"'{\"cluster\": {\"ps\": [\"10.0.0.3:5555\", \"10.0.0.4:5555\"], \"chief\": [\"10.0.0.1:5555\"], \"worker\": [\"10.0.0.2:5555\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}, \"environment\": \"cloud\"}'\t"
	"--master=grpc://10.0.0.1:5555 --ps_replicas=2 --worker_replicas=2 --worker_gpu=1 --worker_id=0 --ps_gpu=0  --schedule=train --worker_job='/job:chief'\n"
	"'{\"cluster\": {\"ps\": [\"10.0.0.3:5555\", \"10.0.0.4:5555\"], \"chief\": [\"10.0.0.1:5555\"], \"worker\": [\"10.0.0.2:5555\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}, \"environment\": \"cloud\"}'\t"
	"--master=grpc://10.0.0.2:5555 --ps_replicas=2 --worker_replicas=2 --worker_gpu=1 --worker_id=1 --ps_gpu=0  --schedule=train --worker_job='/job:worker'\n"
	"'{\"cluster\": {\"ps\": [\"10.0.0.3:5555\", \"10.0.0.4:5555\"], \"chief\": [\"10.0.0.1:5555\"], \"worker\": [\"10.0.0.2:5555\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}, \"environment\": \"cloud\"}'\t"
	"--schedule=run_std_server\n"
	"'{\"cluster\": {\"ps\": [\"10.0.0.3:5555\", \"10.0.0.4:5555\"], \"chief\": [\"10.0.0.1:5555\"], \"worker\": [\"10.0.0.2:5555\"]}, \"task\": {\"type\": \"ps\", \"index\": 1}, \"environment\": \"cloud\"}'\t"
	"--schedule=run_std_server\n";

/* Seed 000's documented TF_CONFIGs (older Python: other key order) and flags. */
static const char *const sync_doc[][2] = {
	{ "{\"cluster\": {\"master\": [\"10.0.0.1:5555\"], \"ps\": [\"10.0.0.2:5555\", \"10.0.0.3:5555\"]}, \"environment\": \"cloud\", \"task\": {\"index\": 0, \"type\": \"master\"}}",
	  "--master=grpc://10.0.0.1:5555 --ps_replicas=2 --worker_replicas=1 --worker_gpu=0 --worker_id=0 --ps_gpu=1 --sync --schedule=train --worker_job='/job:master'" },
	{ "{\"cluster\": {\"master\": [\"10.0.0.1:5555\"], \"ps\": [\"10.0.0.2:5555\", \"10.0.0.3:5555\"]}, \"environment\": \"cloud\", \"task\": {\"index\": 0, \"type\": \"ps\"}}",
	  "--schedule=run_std_server" },
	{ "{\"cluster\": {\"master\": [\"10.0.0.1:5555\"], \"ps\": [\"10.0.0.2:5555\", \"10.0.0.3:5555\"]}, \"environment\": \"cloud\", \"task\": {\"index\": 1, \"type\": \"ps\"}}",
	  "--schedule=run_std_server" },
};
static const char *const async_doc[][2] = {
	{ "{\"task\": {\"index\": 0, \"type\": \"chief\"}, \"cluster\": {\"chief\": [\"10.0.0.1:5555\"], \"ps\": [\"10.0.0.3:5555\", \"10.0.0.4:5555\"], \"worker\": [\"10.0.0.2:5555\"]}, \"environment\": \"cloud\"}",
	  "--master=grpc://10.0.0.1:5555 --ps_replicas=2 --worker_replicas=2 --worker_gpu=1 --worker_id=0 --ps_gpu=0  --schedule=train --worker_job='/job:chief'" },
	{ "{\"task\": {\"index\": 0, \"type\": \"worker\"}, \"cluster\": {\"chief\": [\"10.0.0.1:5555\"], \"ps\": [\"10.0.0.3:5555\", \"10.0.0.4:5555\"], \"worker\": [\"10.0.0.2:5555\"]}, \"environment\": \"cloud\"}",
	  "--master=grpc://10.0.0.2:5555 --ps_replicas=2 --worker_replicas=2 --worker_gpu=1 --worker_id=1 --ps_gpu=0 --schedule=train --worker_job='/job:worker'" },
	{ "{\"task\": {\"index\": 0, \"type\": \"ps\"}, \"cluster\": {\"chief\": [\"10.0.0.1:5555\"], \"ps\": [\"10.0.0.3:5555\", \"10.0.0.4:5555\"], \"worker\": [\"10.0.0.2:5555\"]}, \"environment\": \"cloud\"}",
	  "--schedule=run_std_server" },
	{ "{\"task\": {\"index\": 1, \"type\": \"ps\"}, \"cluster\": {\"chief\": [\"10.0.0.1:5555\"], \"ps\": [\"10.0.0.3:5555\", \"10.0.0.4:5555\"], \"worker\": [\"10.0.0.2:5555\"]}, \"environment\": \"cloud\"}",
	  "--schedule=run_std_server" },
};

/* Our row i against the documented row: same cluster and task, same flags
 * (the docs' async worker row lost its double space in the rendering). */
static void check_doc_row(const struct dt_plan *plan, int i, const char *doc_json, const char *doc_flags, int loose_space)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster ours, docs;
	const char *mine = plan->tasks[i].tf_config;
	DT_CHECK_OK(dt_tf_config_parse(mine, strlen(mine), &ours, &err), &err);
	DT_CHECK_OK(dt_tf_config_parse(doc_json, strlen(doc_json), &docs, &err), &err);
	DT_CHECK(dt_cluster_same(&ours, &docs));
	DT_CHECK_STR_EQ(ours.environment, docs.environment);
	dt_cluster_release(&ours);
	dt_cluster_release(&docs);
	char *flags = dt_plan_t2t_flags(&plan->tasks[i]);
	if (loose_space) {
		char *dbl = strstr(flags, "  ");
		DT_CHECK(dbl != NULL);
		memmove(dbl, dbl + 1, strlen(dbl));
	}
	DT_CHECK_STR_EQ(flags, doc_flags);
	free(flags);
}

DT_TEST(cluster_plan, seed_000_sync_example_exactly)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_plan plan;
	DT_CHECK_OK(dt_plan_make("10.0.0.1:5555", "10.0.0.2:5555,10.0.0.3:5555", NULL, &plan, &err), &err);
	DT_CHECK(plan.sync);
	DT_CHECK_INT_EQ(plan.ntasks, 3);
	char *text = t2t_text(&plan);
	DT_CHECK_STR_EQ(text, sync_expected);
	free(text);
	for (int i = 0; i < 3; i++)
		check_doc_row(&plan, i, sync_doc[i][0], sync_doc[i][1], 0);
	dt_plan_release(&plan);
}

DT_TEST(cluster_plan, seed_000_async_example_exactly)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_plan plan;
	DT_CHECK_OK(dt_plan_make("10.0.0.1:5555,10.0.0.2:5555", "10.0.0.3:5555,10.0.0.4:5555", "", &plan, &err), &err);
	DT_CHECK(!plan.sync);
	DT_CHECK_INT_EQ(plan.ntasks, 4);
	char *text = t2t_text(&plan);
	DT_CHECK_STR_EQ(text, async_expected);
	free(text);
	for (int i = 0; i < 4; i++)
		check_doc_row(&plan, i, async_doc[i][0], async_doc[i][1], i == 1);
	dt_plan_release(&plan);
}

/* Every row's flags, as a shell would pass them, agree with its TF_CONFIG. */
static void check_rows_validate(const struct dt_plan *plan)
{
	for (int i = 0; i < plan->ntasks; i++) {
		const struct dt_plan_task *t = &plan->tasks[i];
		struct dt_cluster_flags cf;
		dt_cluster_flags_init(&cf);
		struct dt_option opts[] = { DT_CLUSTER_OPTIONS(&cf), DT_OPT_END };
		char *argv[16];
		char store[16][256];
		int argc = 0;
		for (int k = 0; k < t->nflags && argc < 16; k++) {
			if (!t->flags[k][0])
				continue;
			size_t n = 0; /* the shell removes the single quotes */
			for (const char *p = t->flags[k]; *p && n < 255; p++)
				if (*p != '\'')
					store[argc][n++] = *p;
			store[argc][n] = '\0';
			argv[argc] = store[argc];
			argc++;
		}
		struct dt_err err = DT_ERR_INIT;
		struct dt_args args;
		DT_CHECK_OK(dt_opts_parse(opts, argc, argv, 0, &args, &err), &err);
		DT_CHECK_INT_EQ(args.count, 0);
		dt_args_release(&args);
		char env_tf[4096];
		snprintf(env_tf, sizeof(env_tf), "TF_CONFIG=%s", t->tf_config);
		const char *env[] = { env_tf, NULL };
		struct dt_cluster cl;
		DT_CHECK_OK(dt_cluster_resolve_env(&cf, opts, env, &cl, &err), &err);
		DT_CHECK_INT_EQ(cl.task.job, t->task.job);
		DT_CHECK_INT_EQ(cl.task.index, t->task.index);
		dt_cluster_release(&cl);
	}
}

DT_TEST(cluster_plan, every_row_passes_our_own_checks)
{
	struct {
		const char *masters, *ps, *eval;
	} cases[] = {
		{ "10.0.0.1:5555", "10.0.0.2:5555,10.0.0.3:5555", NULL },
		{ "10.0.0.1:5555,10.0.0.2:5555", "10.0.0.3:5555,10.0.0.4:5555", NULL },
		{ "a:1,b:1,c:1,d:1", "p:1", NULL },
		{ "a:1,b:1,c:1", "p:1,p:2", "e:1" },
		{ "[::1]:2000,[::1]:2001", "[::1]:2002", "[::1]:2003" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct dt_err err = DT_ERR_INIT;
		struct dt_plan plan;
		DT_CHECK_OK(dt_plan_make(cases[i].masters, cases[i].ps, cases[i].eval, &plan, &err), &err);
		check_rows_validate(&plan);
		dt_plan_release(&plan);
	}
}

DT_TEST(cluster_plan, evaluator_joins_the_async_layout)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_plan plan;
	DT_CHECK_OK(dt_plan_make("a:1,b:1", "p:1", "e:1", &plan, &err), &err);
	DT_CHECK_INT_EQ(plan.ntasks, 4);
	const struct dt_plan_task *ev = &plan.tasks[3];
	DT_CHECK_STR_EQ(ev->tf_config, "{\"cluster\": {\"ps\": [\"p:1\"], \"chief\": [\"a:1\"], \"worker\": [\"b:1\"], "
				       "\"evaluator\": [\"e:1\"]}, \"task\": {\"type\": \"evaluator\", \"index\": 0}, "
				       "\"environment\": \"cloud\"}");
	char *flags = dt_plan_t2t_flags(ev);
	DT_CHECK_STR_EQ(flags, "--schedule=continuous_eval");
	free(flags);
	DT_CHECK_CONTAINS(plan.tasks[0].tf_config, "\"evaluator\": [\"e:1\"]");
	dt_plan_release(&plan);
}

DT_TEST(cluster_plan, refuses_what_t2t_would_mangle)
{
	struct {
		const char *masters, *ps, *eval, *want;
	} cases[] = {
		{ "", "p:1", NULL, "Must provide --masters and --ps" },
		{ "m:1", "", NULL, "Must provide --masters and --ps" },
		{ NULL, NULL, NULL, "Must provide --masters and --ps" },
		{ "m:1,", "p:1", NULL, "entry 2 of --masters has an empty address" },
		{ "m:1,,n:1", "p:1", NULL, "entry 2 of --masters has an empty address" },
		{ "m:1", "p:1,m:1", NULL, "address 'm:1' is given twice: entry 1 of --masters and entry 2 of --ps" },
		{ "m:1,m:1", "p:1", NULL, "address 'm:1' is given twice: entry 1 of --masters and entry 2 of --masters" },
		{ "m", "p:1", NULL, "address 'm' of entry 1 of --masters has no port" },
		{ "m:1", "p:70000", NULL, "port 70000 of entry 1 of --ps ('p:70000') is outside 1-65535" },
		{ "m:1", "p:1", "e:1", "--evaluator needs the async layout (two or more --masters)" },
		{ "m:1,n:1", "p:1", "e:1,f:1", "There must be at most one 'evaluator' job." },
		{ "m:1,n:1", "p:1", "p:1", "address 'p:1' is given twice: entry 1 of --ps and entry 1 of --evaluator" },
		{ "m:1, n:1", "p:1", NULL, "has a host with a character that is not allowed (' ')" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct dt_err err = DT_ERR_INIT;
		struct dt_plan plan;
		DT_CHECK_INT_EQ(dt_plan_make(cases[i].masters, cases[i].ps, cases[i].eval, &plan, &err), DT_CONFIG);
		DT_CHECK_CONTAINS(err.msg, cases[i].want);
		dt_plan_release(&plan);
	}
}

DT_TEST(cluster_plan, json_quote_escapes_like_python)
{
	char *q = dt_plan_json_quote("a\"b\\c\nd\te\x01");
	DT_CHECK_STR_EQ(q, "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
	free(q);
	q = dt_plan_json_quote("");
	DT_CHECK_STR_EQ(q, "\"\"");
	free(q);
}
