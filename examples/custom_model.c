/*
 * custom_model.c — a model written by hand, trained by dtrain.
 *
 * A one-hidden-layer tanh network fits y = sin(3 x0) + 0.5 x1 on points the
 * program makes. Its forward and backward passes are ours (below); dtrain
 * keeps the variables, initializes them, feeds the batches, applies Adam,
 * and distributes the training when the cluster says so (TF_CONFIG, or
 * --ps_hosts/--worker_hosts/--job_name/--task_index: every task runs this
 * same program).
 *
 *   cc custom_model.c -o custom_model $(pkg-config --cflags --libs dtrain) -lm
 *   ./custom_model                       # one process
 *   ./custom_model train_steps=2000 replicas=2 target=0.01
 *
 * Arguments key=value are session options (docs/API.md), except
 * target=LOSS: exit 1 unless the final evaluation's loss is below it.
 */
#include <dtrain.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIDDEN 32
#define EXAMPLES 4096

/* The forward and backward pass: h = tanh(x W1 + b1), p = h w2 + b2,
 * loss = mean (p - y)^2. */
static dtrain_status forward_backward(void *user, dtrain_step *step, dtrain_error *err)
{
	(void)user;
	int n = dtrain_step_batch_size(step);
	const float *x = dtrain_step_input_float(step, "x"); /* (n, 2) */
	const float *y = dtrain_step_input_float(step, "y"); /* (n) */
	const float *W1 = dtrain_step_param(step, 0), *b1 = dtrain_step_param(step, 1);
	const float *w2 = dtrain_step_param(step, 2), *b2 = dtrain_step_param(step, 3);
	float *gW1 = dtrain_step_grad(step, 0), *gb1 = dtrain_step_grad(step, 1);
	float *gw2 = dtrain_step_grad(step, 2), *gb2 = dtrain_step_grad(step, 3);
	if (!x || !y)
		return dtrain_error_set(err, DTRAIN_USAGE, "inputs x and y are missing");
	double loss = 0;
	for (int i = 0; i < n; i++) {
		float h[HIDDEN], p = b2[0];
		for (int j = 0; j < HIDDEN; j++) {
			h[j] = tanhf(x[2 * i] * W1[j] + x[2 * i + 1] * W1[HIDDEN + j] + b1[j]);
			p += h[j] * w2[j];
		}
		float d = p - y[i];
		loss += (double)d * d;
		if (!gW1) /* evaluating: no gradients */
			continue;
		float dp = 2.0f * d / (float)n; /* d(mean loss)/dp */
		gb2[0] += dp;
		for (int j = 0; j < HIDDEN; j++) {
			gw2[j] += dp * h[j];
			float dz = dp * w2[j] * (1.0f - h[j] * h[j]);
			gb1[j] += dz;
			gW1[j] += dz * x[2 * i];
			gW1[HIDDEN + j] += dz * x[2 * i + 1];
		}
	}
	dtrain_step_set_loss(step, loss / n);
	return DTRAIN_OK;
}

int main(int argc, char **argv)
{
	dtrain_error *err = dtrain_error_new();
	dtrain_cluster *cluster = NULL;
	dtrain_model *model = NULL;
	dtrain_data *data = NULL;
	dtrain_session *s = NULL;
	int rc = 0;
	if (dtrain_cluster_resolve(&argc, argv, &cluster, err))
		goto fail;

	/* The model: two inputs, four variables, our callback. */
	model = dtrain_model_new();
	dtrain_input(model, "x", DTRAIN_FLOAT32, 1, (int64_t[]){ 2 });
	dtrain_input(model, "y", DTRAIN_FLOAT32, 0, NULL);
	dtrain_variable(model, "W1", 2, (int64_t[]){ 2, HIDDEN }, DTRAIN_INIT_GLOROT_UNIFORM, 0);
	dtrain_variable(model, "b1", 1, (int64_t[]){ HIDDEN }, DTRAIN_INIT_ZEROS, 0);
	dtrain_variable(model, "w2", 2, (int64_t[]){ HIDDEN, 1 }, DTRAIN_INIT_GLOROT_UNIFORM, 0);
	dtrain_variable(model, "b2", 1, (int64_t[]){ 1 }, DTRAIN_INIT_ZEROS, 0);
	dtrain_model_set_forward_backward(model, forward_backward, NULL);

	/* The data, made here: the same points on every task (seed 7). */
	float *x = malloc(sizeof(float) * 2 * EXAMPLES), *y = malloc(sizeof(float) * EXAMPLES);
	srand(7);
	for (int i = 0; i < EXAMPLES; i++) {
		x[2 * i] = 2.0f * rand() / (float)RAND_MAX - 1.0f;
		x[2 * i + 1] = 2.0f * rand() / (float)RAND_MAX - 1.0f;
		y[i] = sinf(3.0f * x[2 * i]) + 0.5f * x[2 * i + 1];
	}
	dtrain_status st = dtrain_data_from_arrays(EXAMPLES, &data, err);
	if (!st)
		st = dtrain_data_add_float(data, "x", x, 2, err);
	if (!st)
		st = dtrain_data_add_float(data, "y", y, 1, err);
	free(x); /* the library copied them */
	free(y);
	if (st)
		goto fail;

	if (dtrain_session_new(model, data, cluster, &s, err) || dtrain_session_set(s, "optimizer", "adam", err) ||
	    dtrain_session_set(s, "learning_rate", "0.01", err) || dtrain_session_set(s, "batch_size", "64", err) ||
	    dtrain_session_set(s, "train_steps", "1500", err))
		goto fail;
	double target = -1;
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
		else if (dtrain_session_set(s, key, eq + 1, err))
			goto fail;
	}
	if (dtrain_session_run(s, err))
		goto fail;

	const char *mode = dtrain_session_mode(s);
	int trainer = strcmp(mode, "ps_server") != 0 && strcmp(mode, "evaluator") != 0;
	if (trainer) {
		double loss;
		if (dtrain_session_evaluate(s, data, &loss, NULL, err))
			goto fail;
		printf("%s:%d mode %s step %lld loss %.5f\n", dtrain_cluster_task_type(cluster),
		       dtrain_cluster_task_index(cluster), mode, (long long)dtrain_session_global_step(s), loss);
		if (target > 0 && !(loss < target))
			rc = 1;
		/* What the run did on this task, as the library measured it. */
		dtrain_result r;
		if (dtrain_session_result(s, &r, err))
			goto fail;
		printf("result steps %lld final_loss %.5f examples_per_sec %.0f num_params %lld\n", (long long)r.steps,
		       r.final_loss, r.examples_per_sec, (long long)r.num_params);
	}
	goto out;
fail:
	fprintf(stderr, "error: %s\n", dtrain_error_message(err));
	rc = dtrain_status_exit_code(dtrain_error_status(err));
out: /* every _free accepts NULL */
	dtrain_session_free(s);
	dtrain_data_free(data);
	dtrain_model_free(model);
	dtrain_cluster_free(cluster);
	dtrain_error_free(err);
	return rc;
}
