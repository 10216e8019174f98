/*
 * ckpt.c — an outside program (built by tests/cli/test_api_ckpt.c against
 * the installed library): checkpoints and summaries through the public API.
 *
 *   ckpt DIR STEPS     trains a custom linear model to global step STEPS in
 *                      a custom loop with output_dir DIR (continuing from
 *                      DIR's newest checkpoint), writes the scalar
 *                      "user/w0" every 10 steps, and prints
 *                      "start S end E w0 V"
 *   ckpt DIR restore   restores DIR explicitly and prints "restored S w0 V"
 */
#include <dtrain.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dtrain_status fb(void *user, dtrain_step *step, dtrain_error *err)
{
	(void)user, (void)err;
	int n = dtrain_step_batch_size(step);
	const float *x = dtrain_step_input_float(step, "x"), *y = dtrain_step_input_float(step, "y");
	const float *w = dtrain_step_param(step, 0);
	float *g = dtrain_step_grad(step, 0);
	double loss = 0;
	for (int i = 0; i < n; i++) {
		float d = w[0] * x[i] + w[1] - y[i];
		loss += (double)d * d;
		if (g) {
			g[0] += 2 * d * x[i] / n;
			g[1] += 2 * d / n;
		}
	}
	dtrain_step_set_loss(step, loss / n);
	return DTRAIN_OK;
}

static int die(dtrain_error *err)
{
	fprintf(stderr, "error: %s\n", dtrain_error_message(err));
	return dtrain_status_exit_code(dtrain_error_status(err));
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	dtrain_error *err = dtrain_error_new();
	dtrain_model *m = dtrain_model_new();
	dtrain_input(m, "x", DTRAIN_FLOAT32, 0, NULL);
	dtrain_input(m, "y", DTRAIN_FLOAT32, 0, NULL);
	dtrain_variable(m, "w", 1, (int64_t[]){ 2 }, DTRAIN_INIT_ZEROS, 0);
	dtrain_model_set_forward_backward(m, fb, NULL);
	float x[256], y[256];
	for (int i = 0; i < 256; i++) {
		x[i] = (float)i / 128.0f - 1.0f;
		y[i] = 3.0f * x[i] + 0.5f;
	}
	dtrain_data *d = NULL;
	dtrain_session *s = NULL;
	if (dtrain_data_from_arrays(256, &d, err) || dtrain_data_add_float(d, "x", x, 1, err) ||
	    dtrain_data_add_float(d, "y", y, 1, err) || dtrain_session_new(m, d, NULL, &s, err) ||
	    dtrain_session_set(s, "batch_size", "32", err) || dtrain_session_set(s, "learning_rate", "0.05", err) ||
	    dtrain_session_set(s, "log_every", "0", err) || dtrain_session_set(s, "save_summary_steps", "10", err))
		return die(err);
	float w[2];
	if (strcmp(argv[2], "restore") == 0) {
		if (dtrain_session_restore(s, argv[1], err) || dtrain_session_read_variable(s, "w", w, 2, err))
			return die(err);
		printf("restored %lld w0 %.6f\n", (long long)dtrain_session_global_step(s), (double)w[0]);
	} else {
		if (dtrain_session_set(s, "output_dir", argv[1], err) || dtrain_session_set(s, "train_steps", argv[2], err))
			return die(err);
		int64_t start = -1;
		while (!dtrain_session_should_stop(s)) {
			double loss;
			if (dtrain_session_step(s, &loss, err))
				return die(err);
			if (start < 0)
				start = dtrain_session_global_step(s) - 1;
			if (dtrain_session_global_step(s) % 10 == 0 &&
			    (dtrain_session_read_variable(s, "w", w, 2, err) ||
			     dtrain_session_scalar(s, "user/w0", w[0], err)))
				return die(err);
		}
		if (dtrain_session_close(s, err) || dtrain_session_read_variable(s, "w", w, 2, err))
			return die(err);
		printf("start %lld end %lld w0 %.6f\n", (long long)start, (long long)dtrain_session_global_step(s),
		       (double)w[0]);
	}
	dtrain_session_free(s);
	dtrain_data_free(d);
	dtrain_model_free(m);
	dtrain_error_free(err);
	return 0;
}
