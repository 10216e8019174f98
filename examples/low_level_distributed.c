/*
 * low_level_distributed.c — seed 003's mnist_low_level_distributed.py in C.
 *
 * Between-graph replication with asynchronous updates: the same program
 * is a parameter server or a worker, as its flags (or TF_CONFIG) say.
 * Worker 0 is the chief: it initializes the variables, counts the global
 * step, checkpoints to --output_dir and restores from it after a failure.
 * The workers run their own loop, step by step, until the chief's global
 * step reaches train_steps (tf.train.MonitoredTrainingSession's
 * should_stop); a ps serves until the chief ends the run.
 *
 *   cc low_level_distributed.c -o lld $(pkg-config --cflags --libs dtrain)
 *   ./lld --ps_hosts=127.0.0.1:2222 --worker_hosts=127.0.0.1:2223,127.0.0.1:2224 --job_name=ps --task_index=0
 *   ./lld --ps_hosts=127.0.0.1:2222 --worker_hosts=127.0.0.1:2223,127.0.0.1:2224 --job_name=worker --task_index=0
 *   ./lld --ps_hosts=127.0.0.1:2222 --worker_hosts=127.0.0.1:2223,127.0.0.1:2224 --job_name=worker --task_index=1
 *
 * Other arguments key=value are session options (output_dir=DIR,
 * train_steps=N, ...) and problem=NAME (fashion_mnist, mnist, synthetic).
 */
#include <dtrain.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	dtrain_error *err = dtrain_error_new();
	dtrain_cluster *cluster = NULL;
	dtrain_model *m = NULL;
	dtrain_data *train = NULL;
	dtrain_session *s = NULL;
	int rc = 0;
	if (dtrain_cluster_resolve(&argc, argv, &cluster, err))
		goto fail;

	/* The seed's model: one hidden layer of 100 ReLU units, softmax. */
	m = dtrain_model_new();
	dtrain_node x = dtrain_input(m, "image", DTRAIN_FLOAT32, 3, (int64_t[]){ 28, 28, 1 });
	dtrain_node y = dtrain_input(m, "label", DTRAIN_INT32, 0, NULL);
	dtrain_node h = dtrain_dense(m, dtrain_flatten(m, x), 100, DTRAIN_RELU);
	dtrain_softmax_cross_entropy(m, dtrain_dense(m, h, 10, DTRAIN_LINEAR), y);

	const char *problem = "fashion_mnist";
	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], "problem=", 8) == 0)
			problem = argv[i] + 8;
	if (dtrain_data_problem(problem, NULL, "train", &train, err))
		goto fail;
	if (dtrain_session_new(m, train, cluster, &s, err) || dtrain_session_set(s, "optimizer", "adam", err) ||
	    dtrain_session_set(s, "learning_rate", "0.001", err) || dtrain_session_set(s, "batch_size", "100", err) ||
	    dtrain_session_set(s, "train_steps", "2000", err))
		goto fail;
	for (int i = 1; i < argc; i++) {
		char key[64];
		const char *eq = strchr(argv[i], '=');
		if (!eq || eq - argv[i] >= (int)sizeof(key) || strncmp(argv[i], "problem=", 8) == 0)
			continue;
		snprintf(key, sizeof(key), "%.*s", (int)(eq - argv[i]), argv[i]);
		if (dtrain_session_set(s, key, eq + 1, err))
			goto fail;
	}

	if (strcmp(dtrain_cluster_task_type(cluster), "ps") == 0) {
		/* server.join(): serve until the chief ends the run. */
		if (dtrain_session_run(s, err))
			goto fail;
	} else {
		/* with MonitoredTrainingSession(...) as sess: while not sess.should_stop(): sess.run(train_op) */
		int64_t n = 0;
		double loss = 0;
		while (!dtrain_session_should_stop(s)) {
			if (dtrain_session_step(s, &loss, err))
				goto fail;
			if (++n % 500 == 0)
				printf("worker %d: local step %lld, global step %lld, loss %.4f\n",
				       dtrain_cluster_task_index(cluster), (long long)n,
				       (long long)dtrain_session_global_step(s), loss);
		}
		if (dtrain_session_close(s, err))
			goto fail;
		printf("worker %d done: %lld local steps, global step %lld, last loss %.4f\n",
		       dtrain_cluster_task_index(cluster), (long long)n, (long long)dtrain_session_global_step(s), loss);
	}
	goto out;
fail:
	fprintf(stderr, "error: %s\n", dtrain_error_message(err));
	rc = dtrain_status_exit_code(dtrain_error_status(err));
out: /* every _free accepts NULL */
	dtrain_session_free(s);
	dtrain_data_free(train);
	dtrain_model_free(m);
	dtrain_cluster_free(cluster);
	dtrain_error_free(err);
	return rc;
}
