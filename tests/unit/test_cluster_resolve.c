/* Unit tests for src/cluster/resolve, flags, slurm and mpi: seed 003's
 * flags, the source precedence, t2t's cross-checks, Slurm's layout and
 * compressed lists, Open MPI. The environment is injected as arrays. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/options.h"
#include "cluster/resolve.h"
#include "cluster/slurm.h"

/* Parses argv (NULL-terminated, without a command name) with the cluster
 * options, then resolves against `env`. `cl` must be released. */
static enum dt_status resolve_args(const char *const *argv, const char *const *env, struct dt_cluster *cl,
				   struct dt_err *err)
{
	struct dt_cluster_flags cf;
	dt_cluster_flags_init(&cf);
	struct dt_option opts[] = { DT_CLUSTER_OPTIONS(&cf), DT_OPT_END };
	int argc = 0;
	while (argv && argv[argc])
		argc++;
	struct dt_args args;
	enum dt_status st = dt_opts_parse(opts, argc, (char **)(uintptr_t)argv, 0, &args, err);
	dt_args_release(&args);
	if (st) {
		dt_cluster_init(cl);
		return st;
	}
	return dt_cluster_resolve_env(&cf, opts, env, cl, err);
}

/* A rejected resolve: the status, the wanted text. */
#define CHECK_RESOLVE_FAILS(argv, env, status, want)                            \
	do {                                                                    \
		struct dt_err e_ = DT_ERR_INIT;                                 \
		struct dt_cluster c_;                                           \
		DT_CHECK_INT_EQ(resolve_args((argv), (env), &c_, &e_), (status)); \
		DT_CHECK_CONTAINS(e_.msg, (want));                              \
		dt_cluster_release(&c_);                                        \
	} while (0)

#define SEED003_FLAGS "--ps_hosts=127.0.0.1:2222", "--worker_hosts=127.0.0.1:2223,127.0.0.1:2224"
#define SEED003_CLUSTER "\"cluster\": {\"ps\": [\"127.0.0.1:2222\"], \"worker\": [\"127.0.0.1:2223\", \"127.0.0.1:2224\"]}"

DT_TEST(cluster_flags, seed_003_flags_give_the_same_spec_as_tf_config)
{
	struct {
		const char *job, *index, *tf;
	} tasks[] = {
		{ "--job_name=ps", "--task_index=0", "TF_CONFIG={" SEED003_CLUSTER ", \"task\": {\"type\": \"ps\", \"index\": 0}}" },
		{ "--job_name=worker", "--task_index=0", "TF_CONFIG={" SEED003_CLUSTER ", \"task\": {\"type\": \"worker\", \"index\": 0}}" },
		{ "--job_name=worker", "--task_index=1", "TF_CONFIG={" SEED003_CLUSTER ", \"task\": {\"type\": \"worker\", \"index\": 1}}" },
	};
	for (size_t i = 0; i < sizeof(tasks) / sizeof(tasks[0]); i++) {
		struct dt_err err = DT_ERR_INIT;
		struct dt_cluster a, b;
		const char *argv[] = { SEED003_FLAGS, tasks[i].job, tasks[i].index, NULL };
		const char *env[] = { tasks[i].tf, NULL };
		DT_CHECK_OK(resolve_args(argv, NULL, &a, &err), &err);
		DT_CHECK_OK(resolve_args(NULL, env, &b, &err), &err);
		DT_CHECK_INT_EQ(a.source, DT_SOURCE_FLAGS);
		DT_CHECK_INT_EQ(b.source, DT_SOURCE_TF_CONFIG);
		DT_CHECK(dt_cluster_same(&a, &b));
		DT_CHECK_INT_EQ(a.global_id, b.global_id);
		DT_CHECK_INT_EQ(a.is_chief, b.is_chief);
		DT_CHECK_INT_EQ(a.npeers, b.npeers);
		DT_CHECK_STR_EQ(a.master, b.master);
		dt_cluster_release(&a);
		dt_cluster_release(&b);
	}
	/* Worker 0 is the chief (seed 003: "The worker with index 0 is called the chief worker"). */
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *argv[] = { SEED003_FLAGS, "--job_name=worker", NULL };
	DT_CHECK_OK(resolve_args(argv, NULL, &cl, &err), &err);
	DT_CHECK(cl.is_chief);
	DT_CHECK_INT_EQ(cl.npeers, 1);
	dt_cluster_release(&cl);
}

DT_TEST(cluster_flags, flag_form_errors)
{
	const char *no_job[] = { SEED003_FLAGS, NULL };
	CHECK_RESOLVE_FAILS(no_job, NULL, DT_CONFIG, "--job_name is required with --ps_hosts/--worker_hosts");
	const char *empty[] = { "--worker_hosts=a:1,,b:1", "--job_name=worker", NULL };
	CHECK_RESOLVE_FAILS(empty, NULL, DT_CONFIG, "--worker_hosts: worker:1 has an empty address");
	const char *trailing[] = { "--ps_hosts=a:1,", "--worker_hosts=b:1", "--job_name=ps", NULL };
	CHECK_RESOLVE_FAILS(trailing, NULL, DT_CONFIG, "--ps_hosts: ps:1 has an empty address");
	const char *typo[] = { SEED003_FLAGS, "--job_name=wroker", NULL };
	CHECK_RESOLVE_FAILS(typo, NULL, DT_CONFIG, "wroker is not a valid task_type in the cluster_spec:");
	CHECK_RESOLVE_FAILS(typo, NULL, DT_CONFIG, "hint: did you mean 'worker'? --job_name must be one of");
	const char *range[] = { SEED003_FLAGS, "--job_name=worker", "--task_index=2", NULL };
	CHECK_RESOLVE_FAILS(range, NULL, DT_CONFIG, "2 is not a valid task_id for task_type worker");
	CHECK_RESOLVE_FAILS(range, NULL, DT_CONFIG, "so --task_index goes from 0 to 1");
	const char *neg[] = { SEED003_FLAGS, "--job_name=worker", "--task_index=-1", NULL };
	CHECK_RESOLVE_FAILS(neg, NULL, DT_USAGE, "Task index must be non-negative number.");
	const char *dup[] = { "--ps_hosts=a:1", "--worker_hosts=a:1", "--job_name=ps", NULL };
	CHECK_RESOLVE_FAILS(dup, NULL, DT_CONFIG, "address 'a:1' is used by both ps:0 and worker:0");
	const char *no_cluster[] = { "--job_name=ps", NULL };
	CHECK_RESOLVE_FAILS(no_cluster, NULL, DT_CONFIG, "names a task, but no cluster is given");
	const char *port[] = { "--port_base=0", NULL };
	CHECK_RESOLVE_FAILS(port, NULL, DT_USAGE, "--port_base=0 is outside 1-65535");
}

DT_TEST(cluster_resolve, precedence_flags_tf_config_slurm_mpi_local)
{
	const char *tf = "TF_CONFIG={\"cluster\": {\"worker\": [\"t:1\", \"t:2\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}}";
	const char *all[] = { tf, "SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_NODELIST=n1",
			      "SLURM_STEP_TASKS_PER_NODE=2", "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", NULL };
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;

	const char *flags[] = { "--worker_hosts=f:1", "--job_name=worker", NULL };
	DT_CHECK_OK(resolve_args(flags, all, &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.source, DT_SOURCE_FLAGS);
	DT_CHECK_UINT_EQ(cl.shadowed, (1u << DT_SOURCE_TF_CONFIG) | (1u << DT_SOURCE_SLURM) | (1u << DT_SOURCE_MPI));
	DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 0), "f:1");
	dt_cluster_release(&cl);

	DT_CHECK_OK(resolve_args(NULL, all, &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.source, DT_SOURCE_TF_CONFIG);
	DT_CHECK_UINT_EQ(cl.shadowed, (1u << DT_SOURCE_SLURM) | (1u << DT_SOURCE_MPI));
	dt_cluster_release(&cl);

	DT_CHECK_OK(resolve_args(NULL, all + 1, &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.source, DT_SOURCE_SLURM);
	DT_CHECK_UINT_EQ(cl.shadowed, 1u << DT_SOURCE_MPI);
	DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 1), "n1:8889");
	dt_cluster_release(&cl);

	DT_CHECK_OK(resolve_args(NULL, all + 5, &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.source, DT_SOURCE_MPI);
	DT_CHECK_UINT_EQ(cl.shadowed, 0);
	dt_cluster_release(&cl);

	const char *empty_tf[] = { "TF_CONFIG=", NULL };
	DT_CHECK_OK(resolve_args(NULL, empty_tf, &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.source, DT_SOURCE_LOCAL);
	DT_CHECK_INT_EQ(cl.task.job, DT_JOB_WORKER);
	DT_CHECK(cl.is_chief);
	dt_cluster_release(&cl);

	DT_CHECK_OK(dt_cluster_resolve_env(NULL, NULL, NULL, &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.source, DT_SOURCE_LOCAL);
	dt_cluster_release(&cl);
}

DT_TEST(cluster_resolve, job_name_fills_or_must_match_tf_config_task)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *no_task[] = { "TF_CONFIG={\"cluster\": {\"ps\": [\"p:1\"], \"worker\": [\"w:1\", \"w:2\"]}}", NULL };
	const char *fill[] = { "--job_name=worker", "--task_index=1", NULL };
	DT_CHECK_OK(resolve_args(fill, no_task, &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.task.job, DT_JOB_WORKER);
	DT_CHECK_INT_EQ(cl.task.index, 1);
	dt_cluster_release(&cl);

	const char *with_task[] = { "TF_CONFIG={\"cluster\": {\"ps\": [\"p:1\"], \"worker\": [\"w:1\", \"w:2\"]}, "
				    "\"task\": {\"type\": \"worker\", \"index\": 0}}", NULL };
	const char *same[] = { "--job_name=worker", "--task_index=0", NULL };
	DT_CHECK_OK(resolve_args(same, with_task, &cl, &err), &err);
	dt_cluster_release(&cl);
	const char *other_job[] = { "--job_name=ps", NULL };
	CHECK_RESOLVE_FAILS(other_job, with_task, DT_CONFIG,
			    "--job_name=ps disagrees with TF_CONFIG \"task\", which makes this task a worker");
	const char *other_index[] = { "--task_index=1", NULL };
	CHECK_RESOLVE_FAILS(other_index, with_task, DT_CONFIG,
			    "--task_index=1 disagrees with TF_CONFIG \"task\", which gives index 0");
}

#define T2T_SYNC_MASTER \
	"TF_CONFIG={\"cluster\": {\"ps\": [\"10.0.0.2:5555\", \"10.0.0.3:5555\"], \"master\": [\"10.0.0.1:5555\"]}, " \
	"\"task\": {\"type\": \"master\", \"index\": 0}, \"environment\": \"cloud\"}"
#define T2T_ASYNC(type, index) \
	"TF_CONFIG={\"cluster\": {\"ps\": [\"p:1\", \"p:2\"], \"chief\": [\"c:1\"], \"worker\": [\"w:1\", \"w:2\"]}, " \
	"\"task\": {\"type\": \"" type "\", \"index\": " #index "}}"

DT_TEST(cluster_flags, t2t_flags_that_agree_pass)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *env[] = { T2T_SYNC_MASTER, NULL };
	const char *argv[] = { "--master=grpc://10.0.0.1:5555", "--ps_replicas=2", "--worker_replicas=1", "--worker_gpu=0",
			       "--worker_id=0", "--ps_gpu=1", "--sync", "--schedule=train", "--worker_job='/job:master'", NULL };
	DT_CHECK_OK(resolve_args(argv, env, &cl, &err), &err);
	dt_cluster_release(&cl);
	const char *env2[] = { T2T_ASYNC("worker", 1), NULL };
	const char *argv2[] = { "--master=grpc://w:2", "--ps_replicas=2", "--worker_replicas=3", "--worker_id=2",
				"--schedule=train", "--worker_job=/job:worker", NULL };
	DT_CHECK_OK(resolve_args(argv2, env2, &cl, &err), &err);
	dt_cluster_release(&cl);
	const char *env3[] = { T2T_ASYNC("ps", 1), NULL };
	const char *argv3[] = { "--schedule=run_std_server", NULL };
	DT_CHECK_OK(resolve_args(argv3, env3, &cl, &err), &err);
	dt_cluster_release(&cl);
	/* Locally, t2t's eval job flags. */
	const char *argv4[] = { "--schedule=continuous_eval", "--worker_job=/job:localhost", NULL };
	DT_CHECK_OK(resolve_args(argv4, NULL, &cl, &err), &err);
	dt_cluster_release(&cl);
}

DT_TEST(cluster_flags, t2t_contradictions_name_the_flag_and_the_key)
{
	const char *sync[] = { T2T_SYNC_MASTER, NULL };
	const char *async_w1[] = { T2T_ASYNC("worker", 1), NULL };
	const char *async_ps[] = { T2T_ASYNC("ps", 0), NULL };
	const char *ps3[] = { "--ps_replicas=3", NULL };
	CHECK_RESOLVE_FAILS(ps3, sync, DT_CONFIG, "--ps_replicas=3 disagrees with TF_CONFIG \"cluster\", which has 2 ps tasks");
	/* Set explicitly to t2t's default value still counts as given. */
	const char *wr1[] = { "--worker_replicas=1", NULL };
	CHECK_RESOLVE_FAILS(wr1, async_w1, DT_CONFIG,
			    "--worker_replicas=1 disagrees with TF_CONFIG \"cluster\", which has 3 chief/master/worker tasks");
	const char *wid[] = { "--worker_id=1", NULL };
	CHECK_RESOLVE_FAILS(wid, async_w1, DT_CONFIG,
			    "--worker_id=1 disagrees with TF_CONFIG \"task\", which makes this task worker:1 (worker id 2)");
	const char *master[] = { "--master=grpc://w:1", NULL };
	CHECK_RESOLVE_FAILS(master, async_w1, DT_CONFIG,
			    "--master=grpc://w:1 disagrees with TF_CONFIG \"task\", which makes this task worker:1 with session target grpc://w:2");
	const char *sync_flag[] = { "--sync", NULL };
	{ /* With chief/workers, --sync trains through the ps: fewer ps than trainers is fine (DISTRIBUTED.md). */
		struct dt_err e_ = DT_ERR_INIT;
		struct dt_cluster c_;
		DT_CHECK_OK(resolve_args(sync_flag, async_w1, &c_, &e_), &e_);
		dt_cluster_release(&c_);
	}
	const char *no_ps[] = { "TF_CONFIG={\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}", NULL };
	CHECK_RESOLVE_FAILS(sync_flag, no_ps, DT_CONFIG, "--sync computes on the ps tasks (t2t's in-graph sync), but TF_CONFIG \"cluster\" has no ps job");
	const char *train[] = { "--schedule=train", NULL };
	CHECK_RESOLVE_FAILS(train, async_ps, DT_CONFIG, "--schedule=train disagrees with TF_CONFIG \"task\", which makes this task ps:0");
	CHECK_RESOLVE_FAILS(train, async_ps, DT_CONFIG, "hint: a ps task serves variables: --schedule=run_std_server");
	const char *server[] = { "--schedule=run_std_server", NULL };
	CHECK_RESOLVE_FAILS(server, async_w1, DT_CONFIG, "--schedule=run_std_server disagrees with TF_CONFIG \"task\"");
	CHECK_RESOLVE_FAILS(server, NULL, DT_CONFIG, "--schedule=run_std_server disagrees with the local process");
	const char *eval_env[] = { "TF_CONFIG={\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"evaluator\", \"index\": 0}}", NULL };
	CHECK_RESOLVE_FAILS(train, eval_env, DT_CONFIG, "hint: an evaluator evaluates: --schedule=continuous_eval");
	const char *typo[] = { "--schedule=trian", NULL };
	CHECK_RESOLVE_FAILS(typo, NULL, DT_USAGE, "Experiment has no method trian, from --schedule\nhint: did you mean --schedule=train?");
	const char *job[] = { "--worker_job='/job:chief'", NULL };
	CHECK_RESOLVE_FAILS(job, async_w1, DT_CONFIG, "--worker_job=/job:chief disagrees with TF_CONFIG \"task\", which makes this task worker:1");
	const char *job_local[] = { "--worker_job=/job:worker", NULL };
	CHECK_RESOLVE_FAILS(job_local, NULL, DT_CONFIG, "hint: use --worker_job='/job:localhost'");
	const char *ps_local[] = { "--ps_replicas=2", NULL };
	CHECK_RESOLVE_FAILS(ps_local, NULL, DT_CONFIG, "--ps_replicas=2 disagrees with the local process (no cluster given), which has 0 ps tasks");
	const char *gpu[] = { "--worker_gpu=-1", NULL };
	CHECK_RESOLVE_FAILS(gpu, NULL, DT_USAGE, "--worker_gpu=-1 is negative");
}

DT_TEST(cluster_flags, defaults_without_an_options_table)
{
	/* With opts NULL, a flag counts as given only when it differs from the default. */
	struct dt_cluster_flags cf;
	dt_cluster_flags_init(&cf);
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *env[] = { T2T_ASYNC("worker", 0), NULL };
	DT_CHECK_OK(dt_cluster_resolve_env(&cf, NULL, env, &cl, &err), &err);
	dt_cluster_release(&cl);
	cf.worker_replicas = 2;
	DT_CHECK_INT_EQ(dt_cluster_resolve_env(&cf, NULL, env, &cl, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "--worker_replicas=2 disagrees");
	dt_cluster_release(&cl);
	DT_CHECK(dt_schedule_known("continuous_train_and_eval"));
	DT_CHECK(!dt_schedule_known("Train"));
}

DT_TEST(cluster_slurm, hostlists_expand_as_tensorflow_expands_them)
{
	struct {
		const char *list, *want;
	} cases[] = {
		{ "n[1-2],m5,o[3-4,6,7-9]", "n1 n2 m5 o3 o4 o6 o7 o8 o9" },
		{ "node[01-03,07]", "node01 node02 node03 node07" },
		{ "node[8-10]", "node8 node9 node10" },
		{ "node[008-010]", "node008 node009 node010" },
		{ "vm", "vm" },
		{ "a,b", "a b" },
		{ "rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2" },
		{ "gpu[3]", "gpu3" },
		{ "[1-2]", "1 2" },
	};
	struct dt_err err = DT_ERR_INIT;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char **hosts;
		int n;
		DT_CHECK_OK(dt_slurm_expand_hostlist(cases[i].list, &hosts, &n, &err), &err);
		char joined[256] = "";
		for (int k = 0; k < n; k++)
			snprintf(joined + strlen(joined), sizeof(joined) - strlen(joined), "%s%s", k ? " " : "", hosts[k]);
		DT_CHECK_STR_EQ(joined, cases[i].want);
		dt_slurm_hosts_free(hosts, n);
	}
	const char *bad[] = { "", "n[1-", "n]", "n[a]", "n[3-1]", "a,,b", "a,", "n[1-99999999]", "n[[1]]", "n[]",
			      "n[1,]", "n[1-2-3]", "n[1234567890]", "n[0-999]x[0-999]" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char **hosts;
		int n;
		DT_CHECK_INT_EQ(dt_slurm_expand_hostlist(bad[i], &hosts, &n, &err), DT_CONFIG);
		DT_CHECK_CONTAINS(err.msg, "Invalid hostlist format \"");
		DT_CHECK(hosts == NULL && n == 0);
	}
}

DT_TEST(cluster_slurm, tasks_per_node_expand)
{
	struct dt_err err = DT_ERR_INIT;
	int *c, n;
	DT_CHECK_OK(dt_slurm_expand_tasks_per_node("3(x2),2,1", &c, &n, &err), &err);
	DT_CHECK_INT_EQ(n, 4);
	DT_CHECK(c[0] == 3 && c[1] == 3 && c[2] == 2 && c[3] == 1);
	free(c);
	DT_CHECK_OK(dt_slurm_expand_tasks_per_node("2", &c, &n, &err), &err);
	DT_CHECK(n == 1 && c[0] == 2);
	free(c);
	const char *bad[] = { "", "x", "3(x)", "3(2)", "3,", "3(x2", "1(x99999999)", "-1", "3(x0)" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		DT_CHECK_INT_EQ(dt_slurm_expand_tasks_per_node(bad[i], &c, &n, &err), DT_CONFIG);
		DT_CHECK_CONTAINS(err.msg, "Invalid tasks-per-node list format");
	}
}

DT_TEST(cluster_slurm, ranks_get_jobs_in_name_order_on_sorted_hosts)
{
	/* What srun -n 3 set on one node (verified with Slurm 22.05). */
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *ps1[] = { "--ps_replicas=1", NULL };
	for (int rank = 0; rank < 3; rank++) {
		char procid[32], localid[32];
		snprintf(procid, sizeof(procid), "SLURM_PROCID=%d", rank);
		snprintf(localid, sizeof(localid), "SLURM_LOCALID=%d", rank);
		const char *env[] = { procid, localid, "SLURM_STEP_NUM_TASKS=3", "SLURM_NTASKS=3", "SLURM_STEP_NODELIST=vm",
				      "SLURM_STEP_TASKS_PER_NODE=3", "SLURMD_NODENAME=vm", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0",
				      NULL };
		DT_CHECK_OK(resolve_args(ps1, env, &cl, &err), &err);
		DT_CHECK_INT_EQ(cl.source, DT_SOURCE_SLURM);
		DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_PS, 0), "vm:8888");
		DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 0), "vm:8889");
		DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 1), "vm:8890");
		DT_CHECK_INT_EQ(cl.task.job, rank == 0 ? DT_JOB_PS : DT_JOB_WORKER);
		DT_CHECK_INT_EQ(cl.task.index, rank == 0 ? 0 : rank - 1);
		DT_CHECK_INT_EQ(cl.chief.job, DT_JOB_WORKER);
		DT_CHECK_INT_EQ(cl.is_chief, rank == 1);
		DT_CHECK_INT_EQ(cl.global_id, rank == 0 ? 2 : rank - 1);
		DT_CHECK_CONTAINS(cl.source_detail, "Slurm rank ");
		DT_CHECK_CONTAINS(cl.source_detail, " of 3, job 7 step 0");
		dt_cluster_release(&cl);
	}
	/* Several nodes, listed out of order: hosts sort, ports count per host. */
	const char *env[] = { "SLURM_PROCID=2", "SLURM_NTASKS=3", "SLURM_STEP_NODELIST=b,a",
			      "SLURM_STEP_TASKS_PER_NODE=1,2", "SLURMD_NODENAME=b", "SLURM_LOCALID=0", NULL };
	const char *base[] = { "--port_base=3000", NULL };
	DT_CHECK_OK(resolve_args(base, env, &cl, &err), &err);
	DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 0), "a:3000");
	DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 1), "a:3001");
	DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 2), "b:3000");
	DT_CHECK_INT_EQ(cl.task.index, 2);
	dt_cluster_release(&cl);
	const char *big[] = { "SLURM_PROCID=5", "SLURM_STEP_NUM_TASKS=8", "SLURM_STEP_NODELIST=node[01-03,07]",
			      "SLURM_STEP_TASKS_PER_NODE=2(x4)", NULL };
	DT_CHECK_OK(resolve_args(NULL, big, &cl, &err), &err);
	DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 5), "node03:8889");
	DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 7), "node07:8889");
	dt_cluster_release(&cl);
}

DT_TEST(cluster_slurm, step_errors)
{
	const char *missing[] = { "SLURM_PROCID=0", "SLURM_NTASKS=2", NULL };
	CHECK_RESOLVE_FAILS(NULL, missing, DT_CONFIG,
			    "SLURM_STEP_NODELIST not found in environment. Not running inside a SLURM step?");
	const char *few[] = { "SLURM_PROCID=0", "SLURM_NTASKS=5", "SLURM_STEP_NODELIST=n[1-2]", "SLURM_STEP_TASKS_PER_NODE=1(x2)", NULL };
	CHECK_RESOLVE_FAILS(NULL, few, DT_CONFIG, "Requested 5 tasks but only 2 were assigned.");
	const char *mismatch[] = { "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_STEP_NODELIST=n[1-2]", "SLURM_STEP_TASKS_PER_NODE=2", NULL };
	CHECK_RESOLVE_FAILS(NULL, mismatch, DT_CONFIG, "SLURM_STEP_NODELIST names 2 nodes but SLURM_STEP_TASKS_PER_NODE gives counts for 1");
	const char *cyclic[] = { "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_STEP_NODELIST=n[1-2]", "SLURM_STEP_TASKS_PER_NODE=1(x2)",
				 "SLURMD_NODENAME=n1", "SLURM_LOCALID=0", NULL };
	CHECK_RESOLVE_FAILS(NULL, cyclic, DT_CONFIG, "Slurm runs rank 1 as local task 0 on node 'n1', but the layout every rank computes puts it at n2:8888");
	const char *one[] = { "SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_STEP_NODELIST=n1", "SLURM_STEP_TASKS_PER_NODE=1", NULL };
	const char *ps1[] = { "--ps_replicas=1", NULL };
	CHECK_RESOLVE_FAILS(ps1, one, DT_CONFIG, "--ps_replicas=1 leaves no worker among the 1 tasks of the Slurm step");
	const char *port[] = { "--port_base=65535", NULL };
	const char *two[] = { "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_STEP_NODELIST=n1", "SLURM_STEP_TASKS_PER_NODE=2", NULL };
	CHECK_RESOLVE_FAILS(port, two, DT_CONFIG, "--port_base=65535 leaves no port for task 1 on node 'n1'");
	const char *rank[] = { "SLURM_PROCID=x", "SLURM_NTASKS=2", NULL };
	CHECK_RESOLVE_FAILS(NULL, rank, DT_CONFIG, "SLURM_PROCID: 'x' is not an integer");
	const char *job[] = { "--job_name=ps", NULL };
	CHECK_RESOLVE_FAILS(job, two, DT_CONFIG, "--job_name=ps disagrees with Slurm rank 0 of 2, which makes this task a worker");
	const char *bad_list[] = { "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_STEP_NODELIST=n[1-", "SLURM_STEP_TASKS_PER_NODE=2", NULL };
	CHECK_RESOLVE_FAILS(NULL, bad_list, DT_CONFIG, "Invalid hostlist format \"n[1-\"");
}

DT_TEST(cluster_mpi, one_node_launches_resolve)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *env[] = { "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=3", "OMPI_COMM_WORLD_LOCAL_RANK=1",
			      "OMPI_COMM_WORLD_LOCAL_SIZE=3", NULL };
	const char *ps1[] = { "--ps_replicas=1", "--port_base=5000", NULL };
	DT_CHECK_OK(resolve_args(ps1, env, &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.source, DT_SOURCE_MPI);
	DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_PS, 0), "127.0.0.1:5000");
	DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 1), "127.0.0.1:5002");
	DT_CHECK_INT_EQ(cl.task.job, DT_JOB_WORKER);
	DT_CHECK_INT_EQ(cl.task.index, 0);
	DT_CHECK(cl.is_chief);
	DT_CHECK_STR_EQ(cl.source_detail, "Open MPI rank 1 of 3");
	dt_cluster_release(&cl);

	const char *multi[] = { "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL };
	CHECK_RESOLVE_FAILS(NULL, multi, DT_CONFIG, "the Open MPI launch spans several nodes");
	const char *nosize[] = { "OMPI_COMM_WORLD_RANK=0", NULL };
	CHECK_RESOLVE_FAILS(NULL, nosize, DT_CONFIG, "OMPI_COMM_WORLD_SIZE not found in environment");
	const char *over[] = { "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=3", NULL };
	CHECK_RESOLVE_FAILS(NULL, over, DT_CONFIG, "OMPI_COMM_WORLD_RANK=3 is not below OMPI_COMM_WORLD_SIZE=3");
}
