/* Unit tests for src/cluster: TF_CONFIG reading, TensorFlow's validation
 * rules and wording, our extra rules, addresses, and the derived facts
 * (chief, replicas, global id, session target, peers). */
#include <stdio.h>
#include <string.h>

#include "dt_test.h"
#include "cluster/cluster.h"

/* Parses `json`; the cluster is released before returning. */
static enum dt_status parse(const char *json, struct dt_err *err)
{
	struct dt_cluster cl;
	enum dt_status st = dt_tf_config_parse(json, strlen(json), &cl, err);
	dt_cluster_release(&cl);
	return st;
}

/* A rejected TF_CONFIG: DT_CONFIG, the wanted text, and a hint line. */
#define CHECK_REJECTS(json, want)                                  \
	do {                                                       \
		struct dt_err e_ = DT_ERR_INIT;                    \
		DT_CHECK_INT_EQ(parse((json), &e_), DT_CONFIG);    \
		DT_CHECK_INT_EQ(e_.status, DT_CONFIG);             \
		DT_CHECK_CONTAINS(e_.msg, (want));                 \
		DT_CHECK_CONTAINS(e_.msg, "\nhint: ");             \
	} while (0)

/* The same without requiring a hint (syntax errors that are self-evident). */
#define CHECK_REJECTS_PLAIN(json, want)                            \
	do {                                                       \
		struct dt_err e_ = DT_ERR_INIT;                    \
		DT_CHECK_INT_EQ(parse((json), &e_), DT_CONFIG);    \
		DT_CHECK_CONTAINS(e_.msg, (want));                 \
	} while (0)

#define SEED003 "\"cluster\": {\"chief\": [\"localhost:2000\"], \"ps\": [\"localhost:2002\"], \"worker\": [\"localhost:2001\"]}"

DT_TEST(cluster_tf_config, seed_003_train_and_evaluate_tasks)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *chief = "{" SEED003 ", \"task\": {\"type\": \"chief\", \"index\": 0}}";
	DT_CHECK_OK(dt_tf_config_parse(chief, strlen(chief), &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.source, DT_SOURCE_TF_CONFIG);
	DT_CHECK_INT_EQ(cl.task.job, DT_JOB_CHIEF);
	DT_CHECK_INT_EQ(cl.chief.job, DT_JOB_CHIEF);
	DT_CHECK(cl.is_chief);
	DT_CHECK_INT_EQ(cl.global_id, 0);
	DT_CHECK_INT_EQ(cl.trainer_index, 0);
	DT_CHECK_INT_EQ(cl.num_worker_replicas, 2);
	DT_CHECK_INT_EQ(cl.num_ps_replicas, 1);
	DT_CHECK_STR_EQ(cl.master, "grpc://localhost:2000");
	DT_CHECK_INT_EQ(cl.npeers, 1);
	DT_CHECK_INT_EQ(cl.peers[0].job, DT_JOB_PS);
	DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 0), "localhost:2001");
	DT_CHECK(dt_cluster_address(&cl, DT_JOB_WORKER, 1) == NULL);
	dt_cluster_release(&cl);

	const char *worker = "{" SEED003 ", \"task\": {\"type\": \"worker\", \"index\": 0}}";
	DT_CHECK_OK(dt_tf_config_parse(worker, strlen(worker), &cl, &err), &err);
	DT_CHECK(!cl.is_chief);
	DT_CHECK_INT_EQ(cl.global_id, 1); /* chief 0, worker 1, ps last */
	dt_cluster_release(&cl);

	const char *ps = "{" SEED003 ", \"task\": {\"type\": \"ps\", \"index\": 0}}";
	DT_CHECK_OK(dt_tf_config_parse(ps, strlen(ps), &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.global_id, 2);
	DT_CHECK_INT_EQ(cl.npeers, 2); /* the chief and the worker */
	DT_CHECK_INT_EQ(cl.peers[0].job, DT_JOB_CHIEF);
	DT_CHECK_INT_EQ(cl.peers[1].job, DT_JOB_WORKER);
	dt_cluster_release(&cl);

	/* The evaluator need not be in the cluster; it has no global id or peers. */
	const char *ev = "{" SEED003 ", \"task\": {\"type\": \"evaluator\", \"index\": 0}}";
	DT_CHECK_OK(dt_tf_config_parse(ev, strlen(ev), &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.task.job, DT_JOB_EVALUATOR);
	DT_CHECK_INT_EQ(cl.global_id, -1);
	DT_CHECK_INT_EQ(cl.trainer_index, -1);
	DT_CHECK_INT_EQ(cl.npeers, 0);
	DT_CHECK_STR_EQ(cl.master, "");
	DT_CHECK(!cl.is_chief);
	dt_cluster_release(&cl);
}

DT_TEST(cluster_tf_config, t2t_sync_master_layout)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *c = "{\"cluster\": {\"ps\": [\"10.0.0.2:5555\", \"10.0.0.3:5555\"], \"master\": [\"10.0.0.1:5555\"]}, "
			"\"task\": {\"type\": \"ps\", \"index\": 1}, \"environment\": \"cloud\"}";
	DT_CHECK_OK(dt_tf_config_parse(c, strlen(c), &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.chief.job, DT_JOB_MASTER);
	DT_CHECK_INT_EQ(cl.num_worker_replicas, 1);
	DT_CHECK_INT_EQ(cl.num_ps_replicas, 2);
	DT_CHECK_INT_EQ(cl.global_id, 2); /* master 0, ps 1 and 2 */
	DT_CHECK_STR_EQ(cl.environment, "cloud");
	DT_CHECK_INT_EQ(cl.npeers, 1);
	DT_CHECK_INT_EQ(cl.peers[0].job, DT_JOB_MASTER);
	dt_cluster_release(&cl);
}

DT_TEST(cluster_tf_config, without_ps_every_trainer_talks_to_every_other)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *c = "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\", \"c:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}}";
	DT_CHECK_OK(dt_tf_config_parse(c, strlen(c), &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.chief.job, DT_JOB_WORKER); /* worker 0 is the chief */
	DT_CHECK_INT_EQ(cl.chief.index, 0);
	DT_CHECK(!cl.is_chief);
	DT_CHECK_INT_EQ(cl.global_id, 1);
	DT_CHECK_INT_EQ(cl.npeers, 2);
	DT_CHECK_INT_EQ(cl.peers[0].index, 0);
	DT_CHECK_INT_EQ(cl.peers[1].index, 2);
	dt_cluster_release(&cl);
}

DT_TEST(cluster_tf_config, kubeflow_layout_with_evaluator_listed)
{
	/* Global ids as RunConfig: chief 0, then evaluator, worker (alphabetical), ps last. */
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *c = "{\"cluster\": {\"chief\": [\"c:1\"], \"evaluator\": [\"e:1\"], \"ps\": [\"p:1\", \"p:2\"], "
			"\"worker\": [\"w:1\", \"w:2\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}, \"environment\": \"cloud\"}";
	DT_CHECK_OK(dt_tf_config_parse(c, strlen(c), &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.global_id, 3);
	/* The data shard skips the evaluator: chief 0, worker:0 1, worker:1 2. */
	DT_CHECK_INT_EQ(cl.trainer_index, 2);
	DT_CHECK_INT_EQ(cl.num_worker_replicas, 3);
	DT_CHECK_INT_EQ(cl.num_ps_replicas, 2);
	dt_cluster_release(&cl);
	const char *p = "{\"cluster\": {\"chief\": [\"c:1\"], \"evaluator\": [\"e:1\"], \"ps\": [\"p:1\", \"p:2\"], "
			"\"worker\": [\"w:1\", \"w:2\"]}, \"task\": {\"type\": \"ps\", \"index\": 1}}";
	DT_CHECK_OK(dt_tf_config_parse(p, strlen(p), &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.global_id, 5);
	DT_CHECK_INT_EQ(cl.trainer_index, -1);
	DT_CHECK_INT_EQ(cl.npeers, 3); /* chief and two workers, not the evaluator */
	dt_cluster_release(&cl);
}

DT_TEST(cluster_tf_config, sparse_dicts_and_string_indices)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	/* Kubeflow's dynamic workers: only this worker's address is given. */
	const char *c = "{\"cluster\": {\"ps\": [\"p:1\"], \"worker\": {\"3\": \"w3:1\"}}, \"task\": {\"type\": \"worker\", \"index\": \"3\"}}";
	DT_CHECK_OK(dt_tf_config_parse(c, strlen(c), &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.task.index, 3);
	DT_CHECK_INT_EQ(cl.jobs[DT_JOB_WORKER].slots, 4);
	DT_CHECK_INT_EQ(cl.jobs[DT_JOB_WORKER].present, 1);
	DT_CHECK_INT_EQ(cl.num_worker_replicas, 1);
	DT_CHECK_INT_EQ(cl.global_id, 3);
	DT_CHECK_STR_EQ(dt_cluster_address(&cl, DT_JOB_WORKER, 3), "w3:1");
	DT_CHECK(dt_cluster_address(&cl, DT_JOB_WORKER, 0) == NULL);
	dt_cluster_release(&cl);

	/* A float index that is whole is an index (Python's int(1.0)). */
	const char *f = "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 1.0}}";
	DT_CHECK_OK(dt_tf_config_parse(f, strlen(f), &cl, &err), &err);
	DT_CHECK_INT_EQ(cl.task.index, 1);
	dt_cluster_release(&cl);
	CHECK_REJECTS("{\"cluster\": {\"worker\": {\"1\": \"a:1\"}}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
		      "0 is not a valid task_id for task_type worker in the cluster_spec:");
	CHECK_REJECTS("{\"cluster\": {\"worker\": {\"x\": \"a:1\"}}}", "key 'x' of job 'worker' is not a task index");
	CHECK_REJECTS("{\"cluster\": {\"worker\": {\"-1\": \"a:1\"}}}", "is not a task index");
	CHECK_REJECTS_PLAIN("{\"cluster\": {\"worker\": {\"1\": \"a:1\", \"01\": \"b:1\"}}}", "worker:1 is listed twice");
}

DT_TEST(cluster_tf_config, rpc_layer_and_session_master_set_the_session_target)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *r = "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}, "
			"\"rpc_layer\": \"grpc+verbs\"}";
	DT_CHECK_OK(dt_tf_config_parse(r, strlen(r), &cl, &err), &err);
	DT_CHECK_STR_EQ(cl.master, "grpc+verbs://b:1");
	dt_cluster_release(&cl);
	const char *s = "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}, "
			"\"session_master\": \"grpc://elsewhere:9\", \"model_dir\": \"/out\", \"service\": {}}";
	DT_CHECK_OK(dt_tf_config_parse(s, strlen(s), &cl, &err), &err);
	DT_CHECK_STR_EQ(cl.master, "grpc://elsewhere:9");
	DT_CHECK_STR_EQ(cl.model_dir, "/out");
	dt_cluster_release(&cl);
	/* One task in the whole cluster: in-process, no target. */
	const char *one = "{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}";
	DT_CHECK_OK(dt_tf_config_parse(one, strlen(one), &cl, &err), &err);
	DT_CHECK_STR_EQ(cl.master, "");
	DT_CHECK(cl.is_chief);
	dt_cluster_release(&cl);
}

DT_TEST(cluster_tf_config, no_cluster_is_one_local_worker)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster cl;
	const char *texts[] = { "", "  \n", "{}", "{\"task\": {\"type\": \"worker\", \"index\": 0}}", "{\"cluster\": {}}",
				"{\"environment\": \"cloud\"}" };
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		DT_CHECK_OK(dt_tf_config_parse(texts[i], strlen(texts[i]), &cl, &err), &err);
		DT_CHECK(dt_cluster_is_local(&cl));
		DT_CHECK_INT_EQ(cl.task.job, DT_JOB_WORKER);
		DT_CHECK_INT_EQ(cl.task.index, 0);
		DT_CHECK(cl.is_chief);
		DT_CHECK_INT_EQ(cl.global_id, 0);
		DT_CHECK_INT_EQ(cl.num_worker_replicas, 1);
		DT_CHECK_INT_EQ(cl.num_ps_replicas, 0);
		DT_CHECK_INT_EQ(cl.npeers, 0);
		dt_cluster_release(&cl);
	}
	CHECK_REJECTS("{\"task\": {\"type\": \"ps\", \"index\": 0}}",
		      "If \"cluster\" is not set in TF_CONFIG, task type must be WORKER.");
	CHECK_REJECTS("{\"task\": {\"type\": \"worker\", \"index\": 2}}",
		      "If \"cluster\" is not set in TF_CONFIG, task index must be 0.");
}

DT_TEST(cluster_tf_config, tensorflow_rules_in_tensorflow_words)
{
	CHECK_REJECTS("{\"cluster\": {\"master\": [\"m:1\"], \"chief\": [\"c:1\"]}, \"task\": {\"type\": \"master\", \"index\": 0}}",
		      "If `master` node exists in `cluster`, job `chief` is not supported.");
	CHECK_REJECTS("{\"cluster\": {\"master\": [\"m:1\"]}, \"task\": {\"type\": \"evaluator\", \"index\": 0}}",
		      "If `master` node exists in `cluster`, task_type `evaluator` is not supported.");
	CHECK_REJECTS("{\"cluster\": {\"master\": [\"m:1\", \"m:2\"]}, \"task\": {\"type\": \"master\", \"index\": 0}}",
		      "The \"cluster\" in TF_CONFIG must have only one \"master\" node.");
	CHECK_REJECTS("{\"cluster\": {\"chief\": [\"c:1\", \"c:2\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}",
		      "The \"cluster\" in TF_CONFIG must have only one \"chief\" node.");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"], \"evaluator\": [\"e:1\", \"e:2\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
		      "There must be at most one 'evaluator' job.");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"evaluator\", \"index\": 1}}",
		      "For distributed training, there can only be one `evaluator` task (with task id 0).");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"]}}",
		      "If \"cluster\" is set in TF_CONFIG, task type must be set.");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"\", \"index\": 0}}",
		      "If \"cluster\" is set in TF_CONFIG, task type must be set.");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"worker\"}}",
		      "If \"cluster\" is set in TF_CONFIG, task index must be set.");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"worker\", \"index\": null}}",
		      "If \"cluster\" is set in TF_CONFIG, task index must be set.");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"worker\", \"index\": -1}}",
		      "Task index must be non-negative number.");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"worker\", \"index\": \"-2\"}}",
		      "Task index must be non-negative number.");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}",
		      "ps is not a valid task_type in the cluster_spec:\n  worker    w:1\n\n"
		      "Note that these values may be coming from the TF_CONFIG environment variable.");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\", \"w:2\"]}, \"task\": {\"type\": \"worker\", \"index\": 2}}",
		      "2 is not a valid task_id for task_type worker in the cluster_spec:");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\", \"w:2\"]}, \"task\": {\"type\": \"worker\", \"index\": 2}}",
		      "hint: worker lists 2 tasks, so the task's \"index\" goes from 0 to 1");
}

DT_TEST(cluster_tf_config, errors_show_the_parsed_cluster_and_a_hint)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(parse("{\"cluster\": {\"chief\": [\"c:1\", \"c:2\"], \"worker\": [\"w:1\"]}, "
			      "\"task\": {\"type\": \"worker\", \"index\": 0}}", &err), DT_CONFIG);
	DT_CHECK_STR_EQ(err.msg, "The \"cluster\" in TF_CONFIG must have only one \"chief\" node.\n"
				 "cluster (from TF_CONFIG):\n"
				 "  chief     c:1, c:2\n"
				 "  worker    w:1\n"
				 "task: worker:0\n"
				 "hint: keep one address in \"chief\" and list the others under \"worker\"");
	/* Long jobs are elided so the message stays readable. */
	DT_CHECK_INT_EQ(parse("{\"cluster\": {\"worker\": [\"a:1\",\"b:1\",\"c:1\",\"d:1\",\"e:1\",\"f:1\"]}, "
			      "\"task\": {\"type\": \"worker\", \"index\": 9}}", &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "  worker    a:1, b:1, c:1, d:1, ... (2 more)\n");
}

DT_TEST(cluster_tf_config, unknown_names_suggest_the_nearest)
{
	CHECK_REJECTS("{\"cluster\": {\"wroker\": [\"w:1\"]}}", "unknown job 'wroker' in TF_CONFIG \"cluster\" (did you mean 'worker'?)");
	CHECK_REJECTS("{\"cluster\": {\"ps_hosts\": [\"w:1\"]}}", "unknown job 'ps_hosts' in TF_CONFIG \"cluster\" (did you mean 'ps'?)");
	CHECK_REJECTS("{\"cluster\": {\"nodes\": [\"w:1\"]}}", "unknown job 'nodes' in TF_CONFIG \"cluster\"\nhint: jobs are");
	CHECK_REJECTS("{\"clustr\": {}}", "unknown key 'clustr' in TF_CONFIG (did you mean 'cluster'?)");
	CHECK_REJECTS("{\"worker_hosts\": [\"a:1\"]}", "hint: TF_CONFIG lists hosts by job");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"worker\", \"idx\": 0}}",
		      "unknown key 'idx' in TF_CONFIG \"task\" (did you mean 'index'?)");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"wroker\", \"index\": 0}}",
		      "wroker is not a valid task_type in the cluster_spec:");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"wroker\", \"index\": 0}}",
		      "hint: did you mean 'worker'?");
}

DT_TEST(cluster_tf_config, our_rules_trainers_and_duplicates)
{
	CHECK_REJECTS("{\"cluster\": {\"ps\": [\"p:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}",
		      "the cluster has no \"chief\", \"master\" or \"worker\" job, so no task would train");
	CHECK_REJECTS("{\"cluster\": {\"ps\": [\"h:1\"], \"worker\": [\"w:1\", \"h:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}",
		      "address 'h:1' is used by both ps:0 and worker:1");
}

DT_TEST(cluster_tf_config, malformed_json_says_where)
{
	CHECK_REJECTS("{\n  \"cluster\": {\"worker\": [\"a:1\",]}\n}", "malformed TF_CONFIG at line 2 column");
	CHECK_REJECTS("{\"cluster\": {}", "malformed TF_CONFIG at line 1 column");
	CHECK_REJECTS("{\"task\": {}, \"task\": {}}", "duplicate object key");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"a\\u0000:1\"]}}", "malformed TF_CONFIG");
	CHECK_REJECTS("[1, 2]", "TF_CONFIG must be a JSON object, not a list");
	CHECK_REJECTS("\"worker\"", "TF_CONFIG must be a JSON object, not a string");
	CHECK_REJECTS("{\"cluster\": [\"a:1\"]}", "\"cluster\" in TF_CONFIG must be an object, not a list");
	CHECK_REJECTS("{\"cluster\": {\"worker\": 3}}", "job 'worker' in \"cluster\" is an integer");
	CHECK_REJECTS_PLAIN("{\"cluster\": {\"worker\": [3]}}", "worker:0 in \"cluster\" is an integer, expected a \"host:port\" string");
	CHECK_REJECTS("{\"task\": []}", "\"task\" in TF_CONFIG must be an object, not a list");
	CHECK_REJECTS_PLAIN("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"worker\", \"index\": true}}",
			    "must be an integer, not true");
	CHECK_REJECTS_PLAIN("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"worker\", \"index\": \"one\"}}",
			    "'one' is not an integer");
	CHECK_REJECTS_PLAIN("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": 1, \"index\": 0}}",
			    "must be a string, not an integer");
	CHECK_REJECTS_PLAIN("{\"rpc_layer\": 5}", "\"rpc_layer\" in TF_CONFIG must be a string, not an integer");
	CHECK_REJECTS_PLAIN("{\"model_dir\": \"\"}", "\"model_dir\" in TF_CONFIG is empty");
	CHECK_REJECTS_PLAIN("{\"service\": \"x\"}", "\"service\" in TF_CONFIG must be an object, not a string");
}

DT_TEST(cluster_address, host_port_rules)
{
	struct dt_err err = DT_ERR_INIT;
	const char *good[] = { "localhost:2222", "10.0.0.1:1", "a-b.c_d:65535", "[::1]:2222", "[fe80::1%eth0]:80",
			       "mnist-worker-0.ns.svc:2222" };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		DT_CHECK_OK(dt_hostport_check(good[i], "worker:0", &err), &err);
	struct {
		const char *addr, *want;
	} bad[] = {
		{ "", "worker:0 has an empty address" },
		{ "localhost", "address 'localhost' of worker:0 has no port" },
		{ "localhost:", "has no port" },
		{ ":2222", "has no host" },
		{ "h:0", "port 0 of worker:0 ('h:0') is outside 1-65535" },
		{ "h:65536", "port 65536 of worker:0 ('h:65536') is outside 1-65535" },
		{ "h:99999999999999999999", "is outside 1-65535" },
		{ "h:22a", "has a port that is not a number ('22a')" },
		{ "h:-1", "has a port that is not a number" },
		{ "grpc://h:1", "has a scheme" },
		{ "a b:1", "has a host with a character that is not allowed (' ')" },
		{ "::1:2222", "is not host:port" },
		{ "[::1:2222", "has no closing ']'" },
		{ "[::1]", "has no port" },
		{ "[]:1", "has no host" },
		{ "[hello]:1", "is not a valid IPv6 address ('h' is not allowed)" },
		{ "[::1%]:1", "is not a valid IPv6 address" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		DT_CHECK_INT_EQ(dt_hostport_check(bad[i].addr, "worker:0", &err), DT_CONFIG);
		DT_CHECK_CONTAINS(err.msg, bad[i].want);
	}
	/* Through TF_CONFIG the message names the source. */
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"a:1\", \"b\"]}}", "TF_CONFIG: address 'b' of worker:1 has no port");
	CHECK_REJECTS("{\"cluster\": {\"worker\": [\"\"]}}", "TF_CONFIG: worker:0 has an empty address");
}

DT_TEST(cluster_tf_config, same_compares_jobs_and_task)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_cluster a, b;
	const char *x = "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}}";
	const char *y = "{\"task\": {\"index\": \"1\", \"type\": \"worker\"}, \"cluster\": {\"worker\": {\"1\": \"b:1\", \"0\": \"a:1\"}}}";
	const char *z = "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}";
	DT_CHECK_OK(dt_tf_config_parse(x, strlen(x), &a, &err), &err);
	DT_CHECK_OK(dt_tf_config_parse(y, strlen(y), &b, &err), &err);
	DT_CHECK(dt_cluster_same(&a, &b));
	dt_cluster_release(&b);
	DT_CHECK_OK(dt_tf_config_parse(z, strlen(z), &b, &err), &err);
	DT_CHECK(!dt_cluster_same(&a, &b));
	dt_cluster_release(&a);
	dt_cluster_release(&b);
	dt_cluster_release(NULL);
}

DT_TEST(cluster_tf_config, job_names_round_trip)
{
	for (int j = 0; j < DT_JOB_COUNT; j++)
		DT_CHECK_INT_EQ(dt_job_parse(dt_job_name((enum dt_job)j)), j);
	DT_CHECK_INT_EQ(dt_job_parse("Worker"), DT_JOB_NONE);
	DT_CHECK_STR_EQ(dt_job_nearest("Worker"), "worker");
	DT_CHECK_STR_EQ(dt_job_name(DT_JOB_NONE), "none");
	DT_CHECK_STR_EQ(dt_cluster_source_name(DT_SOURCE_SLURM), "slurm");
}
