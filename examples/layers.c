/*
 * layers.c — a layer graph trained in whatever mode its cluster asks for.
 *
 * A small residual network classifies 28x28 images (Fashion-MNIST by
 * default). The mode comes from TF_CONFIG, as TensorFlow picks it: none →
 * one process (replicas=N: mirrored on N threads); a "ps" job →
 * parameter servers (sync=1: synchronous; with a "master" the only
 * trainer, t2t's in-graph layout, the ps tasks computing); several
 * workers and no ps → multi-worker mirrored (ring all-reduce); a ps or
 * evaluator task serves or evaluates. Every task runs this same program:
 *
 *   cc layers.c -o layers $(pkg-config --cflags --libs dtrain)
 *   ./layers train_steps=500
 *   TF_CONFIG='{"cluster": {"worker": ["localhost:2001", "localhost:2002"]},
 *               "task": {"type": "worker", "index": 0}}' ./layers
 *
 * Arguments key=value are session options (docs/API.md), plus problem=NAME
 * (fashion_mnist, mnist, synthetic) and target=ACCURACY: exit 1 unless the
 * chief's final evaluation reaches it.
 */
#include <dtrain.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	dtrain_error *err = dtrain_error_new();
	dtrain_cluster *cluster = NULL;
	dtrain_model *m = NULL;
	dtrain_data *train = NULL, *test = NULL;
	dtrain_session *s = NULL;
	int rc = 0;
	if (dtrain_cluster_resolve(&argc, argv, &cluster, err))
		goto fail;

	/* image -> conv -> pool -> dense -> (dense + itself) -> dropout -> logits. */
	m = dtrain_model_new();
	dtrain_node image = dtrain_input(m, "image", DTRAIN_FLOAT32, 3, (int64_t[]){ 28, 28, 1 });
	dtrain_node label = dtrain_input(m, "label", DTRAIN_INT32, 0, NULL);
	dtrain_node h = dtrain_conv2d(m, image, 8, 3, 3, 1, DTRAIN_SAME, DTRAIN_RELU);
	h = dtrain_max_pool2d(m, h, 2, 2);
	h = dtrain_flatten(m, h);
	h = dtrain_dense(m, h, 64, DTRAIN_RELU);
	dtrain_node r = dtrain_dense(m, h, 64, DTRAIN_RELU);
	h = dtrain_add(m, h, r);
	h = dtrain_dropout(m, h, 0.1f);
	dtrain_node logits = dtrain_dense(m, h, 10, DTRAIN_LINEAR);
	dtrain_softmax_cross_entropy(m, logits, label);
	if (dtrain_model_check(m, err)) /* the first builder error, if any */
		goto fail;

	const char *problem = "fashion_mnist";
	double target = -1;
	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], "problem=", 8) == 0)
			problem = argv[i] + 8;
	if (dtrain_data_problem(problem, NULL, "train", &train, err) ||
	    dtrain_data_problem(problem, NULL, "test", &test, err))
		goto fail;

	if (dtrain_session_new(m, train, cluster, &s, err) || dtrain_session_set_eval_data(s, test, err) ||
	    dtrain_session_set(s, "optimizer", "adam", err) || dtrain_session_set(s, "learning_rate", "0.002", err) ||
	    dtrain_session_set(s, "batch_size", "64", err) || dtrain_session_set(s, "train_steps", "1000", err))
		goto fail;
	for (int i = 1; i < argc; i++) {
		char key[64];
		const char *eq = strchr(argv[i], '=');
		if (!eq || eq - argv[i] >= (int)sizeof(key)) {
			fprintf(stderr, "error: argument '%s' is not key=value\n", argv[i]);
			rc = 2;
			goto out;
		}
		snprintf(key, sizeof(key), "%.*s", (int)(eq - argv[i]), argv[i]);
		if (strcmp(key, "target") == 0)
			target = atof(eq + 1);
		else if (strcmp(key, "problem") != 0 && dtrain_session_set(s, key, eq + 1, err))
			goto fail;
	}
	fprintf(stderr, "%s:%d runs as %s\n", dtrain_cluster_task_type(cluster), dtrain_cluster_task_index(cluster),
		dtrain_session_mode(s));
	if (dtrain_session_run(s, err))
		goto fail;
	/* What the run did on this task (a ps: nothing to say; an evaluator:
	 * the last checkpoint it evaluated), as the library measured it. */
	dtrain_result res;
	if (dtrain_session_result(s, &res, err))
		goto fail;
	printf("result steps %lld final_loss %.5f examples_per_sec %.0f num_params %lld evaluated %d\n",
	       (long long)res.steps, res.final_loss, res.examples_per_sec, (long long)res.num_params, res.evaluated);

	if (dtrain_cluster_is_chief(cluster)) {
		double loss, accuracy;
		if (dtrain_session_evaluate(s, test, &loss, &accuracy, err))
			goto fail;
		printf("mode %s step %lld test loss %.4f accuracy %.4f\n", dtrain_session_mode(s),
		       (long long)dtrain_session_global_step(s), loss, accuracy);
		if (target > 0 && !(accuracy >= target))
			rc = 1;
	}
	goto out;
fail:
	fprintf(stderr, "error: %s\n", dtrain_error_message(err));
	rc = dtrain_status_exit_code(dtrain_error_status(err));
out: /* every _free accepts NULL */
	dtrain_session_free(s);
	dtrain_data_free(train);
	dtrain_data_free(test);
	dtrain_model_free(m);
	dtrain_cluster_free(cluster);
	dtrain_error_free(err);
	return rc;
}
