/*
 * misuse.c — an outside program (built by tests/cli/test_api_misuse.c
 * against the installed library) that misuses the API on purpose and
 * prints, for each case, the status and message it got:
 *
 *   CASE <name>: <STATUS>: <message>
 *
 * The test checks each line; a crash or a missing line fails it. Run as
 * `misuse NAME` for one case, `misuse` for all.
 */
#include <dtrain.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case_report.h"

static const char *only;
static dtrain_error *err;

/* One line per case (case_report.h). */
static void report(const char *name, dtrain_status st)
{
	case_report(err, name, st);
}

#define CASE(name) if (!only || strcmp(only, name) == 0)

/* A small custom model over x (2) and y (), with a callback chosen by `user`. */
static int nan_mode;
static dtrain_status fb(void *user, dtrain_step *step, dtrain_error *e)
{
	(void)user, (void)e;
	int n = dtrain_step_batch_size(step);
	const float *w = dtrain_step_param(step, 0);
	float *g = dtrain_step_grad(step, 0);
	if (g)
		for (int k = 0; k < 2; k++)
			g[k] = nan_mode == 2 ? NAN : 0.01f * w[k];
	dtrain_step_set_loss(step, nan_mode == 1 ? NAN : 1.0 / n);
	return DTRAIN_OK;
}

static dtrain_model *custom_model(void)
{
	dtrain_model *m = dtrain_model_new();
	dtrain_input(m, "x", DTRAIN_FLOAT32, 1, (int64_t[]){ 2 });
	dtrain_input(m, "y", DTRAIN_FLOAT32, 0, NULL);
	dtrain_variable(m, "w", 1, (int64_t[]){ 2 }, DTRAIN_INIT_ONES, 0);
	dtrain_model_set_forward_backward(m, fb, NULL);
	return m;
}

static dtrain_data *arrays(int n)
{
	dtrain_data *d = NULL;
	float *x = calloc((size_t)n * 2, sizeof(float)), *y = calloc((size_t)n, sizeof(float));
	if (dtrain_data_from_arrays(n, &d, err) || dtrain_data_add_float(d, "x", x, 2, err) ||
	    dtrain_data_add_float(d, "y", y, 1, err))
		exit(3);
	free(x);
	free(y);
	return d;
}

static dtrain_session *session(dtrain_model *m, dtrain_data *d)
{
	dtrain_session *s = NULL;
	if (dtrain_session_new(m, d, NULL, &s, err) || dtrain_session_set(s, "batch_size", "4", err) ||
	    dtrain_session_set(s, "train_steps", "3", err) || dtrain_session_set(s, "log_every", "0", err)) {
		report("setup", dtrain_error_status(err));
		exit(3);
	}
	return s;
}

static dtrain_status failing_batch(void *user, dtrain_batch *b, dtrain_error *e)
{
	(void)user;
	if (dtrain_batch_step(b) >= 2)
		return dtrain_error_set(e, DTRAIN_IO, "cannot read shard %d: disk on fire", dtrain_batch_shard(b));
	memset(dtrain_batch_float(b, "x"), 0, sizeof(float) * 2 * (size_t)dtrain_batch_size(b));
	memset(dtrain_batch_float(b, "y"), 0, sizeof(float) * (size_t)dtrain_batch_size(b));
	return DTRAIN_OK;
}

int main(int argc, char **argv)
{
	only = argc > 1 ? argv[1] : NULL;
	err = dtrain_error_new();

	CASE("null_handles") {
		double loss;
		report("null_session_step", dtrain_session_step(NULL, &loss, err));
		report("null_session_run", dtrain_session_run(NULL, err));
		report("null_session_new", dtrain_session_new(NULL, NULL, NULL, NULL, err));
		report("null_model_check", dtrain_model_check(NULL, err));
		report("null_data_add", dtrain_data_add_float(NULL, "x", NULL, 1, err));
		report("null_cluster_add", dtrain_cluster_add_task(NULL, "worker", 0, "h:1", err));
		report("null_set", dtrain_session_set(NULL, "seed", "1", err));
		report("null_evaluate", dtrain_session_evaluate(NULL, NULL, NULL, NULL, err));
		/* Builder calls on NULL return -1; accessors return neutral values. */
		printf("CASE null_builder: %d %d %d %s %d\n", dtrain_dense(NULL, 0, 3, DTRAIN_RELU),
		       dtrain_input(NULL, "x", DTRAIN_FLOAT32, 0, NULL), dtrain_session_should_stop(NULL),
		       dtrain_session_mode(NULL)[0] ? "mode" : "nomode", dtrain_batch_size(NULL));
		/* err itself may be NULL: only the status comes back. */
		printf("CASE null_err: %s\n", dtrain_status_name(dtrain_session_run(NULL, NULL)));
	}
	CASE("shapes") {
		dtrain_model *m = dtrain_model_new();
		dtrain_node img = dtrain_input(m, "image", DTRAIN_FLOAT32, 3, (int64_t[]){ 8, 8, 1 });
		dtrain_node flat = dtrain_flatten(m, img);
		dtrain_node bad = dtrain_conv2d(m, flat, 4, 3, 3, 1, DTRAIN_VALID, DTRAIN_RELU); /* conv on (64) */
		dtrain_node after = dtrain_dense(m, flat, 10, DTRAIN_LINEAR);
		printf("CASE shapes_nodes: %d %d\n", bad, after);
		report("shapes", dtrain_model_check(m, err));
		dtrain_model_free(m);
		m = dtrain_model_new();
		dtrain_node a = dtrain_input(m, "a", DTRAIN_FLOAT32, 1, (int64_t[]){ 3 });
		dtrain_node b = dtrain_input(m, "b", DTRAIN_FLOAT32, 1, (int64_t[]){ 4 });
		dtrain_add(m, a, b);
		report("add_shapes", dtrain_model_check(m, err));
		dtrain_model_free(m);
		m = dtrain_model_new();
		dtrain_input(m, "a", DTRAIN_FLOAT32, 1, (int64_t[]){ 3 });
		dtrain_dense(m, 7, 2, DTRAIN_RELU); /* no such node */
		report("unknown_node", dtrain_model_check(m, err));
		dtrain_model_free(m);
		m = dtrain_model_new();
		dtrain_input(m, "a", DTRAIN_FLOAT32, 1, (int64_t[]){ 3 });
		report("no_loss", dtrain_model_check(m, err));
		dtrain_model_free(m);
	}
	CASE("batch_callback_error") {
		dtrain_model *m = custom_model();
		dtrain_data *d = NULL;
		if (dtrain_data_from_callback(failing_batch, NULL, 0, &d, err))
			return 3;
		dtrain_session *s = session(m, d);
		report("batch_callback_error", dtrain_session_run(s, err));
		dtrain_session_free(s);
		dtrain_data_free(d);
		dtrain_model_free(m);
	}
	CASE("label_out_of_range") {
		dtrain_model *m = dtrain_model_new();
		dtrain_node x = dtrain_input(m, "x", DTRAIN_FLOAT32, 1, (int64_t[]){ 2 });
		dtrain_node y = dtrain_input(m, "label", DTRAIN_INT32, 0, NULL);
		dtrain_softmax_cross_entropy(m, dtrain_dense(m, x, 3, DTRAIN_LINEAR), y);
		float xs[8] = { 0 };
		int32_t ys[4] = { 0, 1, 7, 2 }; /* 7: there are 3 classes */
		dtrain_data *d = NULL;
		if (dtrain_data_from_arrays(4, &d, err) || dtrain_data_add_float(d, "x", xs, 2, err) ||
		    dtrain_data_add_int32(d, "label", ys, 1, err))
			return 3;
		dtrain_session *s = session(m, d);
		report("label_out_of_range", dtrain_session_run(s, err));
		dtrain_session_free(s);
		dtrain_data_free(d);
		dtrain_model_free(m);
	}
	CASE("wrong_order") {
		dtrain_model *m = custom_model();
		dtrain_data *d = arrays(16);
		dtrain_session *s = session(m, d);
		double loss;
		if (dtrain_session_step(s, &loss, err))
			report("first_step", dtrain_error_status(err));
		report("set_after_step", dtrain_session_set(s, "learning_rate", "0.5", err));
		report("builder_after_session", (dtrain_variable(m, "late", 1, (int64_t[]){ 1 }, DTRAIN_INIT_ZEROS, 0),
						 dtrain_model_check(m, err)));
		report("close", dtrain_session_close(s, err));
		report("step_after_close", dtrain_session_step(s, &loss, err));
		report("close_twice", dtrain_session_close(s, err));
		dtrain_session_free(s);
		dtrain_model_free(m); /* it holds the error of the late dtrain_variable */
		m = custom_model();
		dtrain_cluster *cl = NULL;
		if (dtrain_cluster_new(&cl, err) || dtrain_cluster_add_task(cl, "worker", 0, "127.0.0.1:5000", err))
			return 3;
		report("session_before_set_task", dtrain_session_new(m, d, cl, &s, err));
		if (dtrain_cluster_set_task(cl, "worker", 0, err))
			return 3;
		report("add_after_set_task", dtrain_cluster_add_task(cl, "worker", 1, "127.0.0.1:5001", err));
		report("unknown_option", (dtrain_model_free(m), m = custom_model(), s = session(m, d),
					  dtrain_session_set(s, "learning_rat", "0.1", err)));
		report("bad_value", dtrain_session_set(s, "train_steps", "many", err));
		dtrain_session_free(s);
		dtrain_cluster_free(cl);
		dtrain_data_free(d);
		dtrain_model_free(m);
	}
	CASE("nan") {
		for (nan_mode = 1; nan_mode <= 2; nan_mode++) {
			dtrain_model *m = custom_model();
			dtrain_data *d = arrays(16);
			dtrain_session *s = session(m, d);
			report(nan_mode == 1 ? "nan_loss" : "nan_gradient", dtrain_session_run(s, err));
			dtrain_session_free(s);
			dtrain_data_free(d);
			dtrain_model_free(m);
		}
	}
	dtrain_error_free(err);
	printf("DONE\n");
	return 0;
}
