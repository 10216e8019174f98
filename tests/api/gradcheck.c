/*
 * gradcheck.c — an outside program (built by tests/cli/test_api_grad.c
 * against the installed library) that checks, through the public API
 * only, the gradients dtrain computes: for a custom model (the callback's)
 * and for a layer graph (the library's own backward), each element of each
 * variable is nudged by ±h with dtrain_session_write_variable, the loss
 * re-evaluated with dtrain_session_evaluate, and the central difference
 * compared with dtrain_session_read_gradient. Prints one line per model and
 * exits 1 on the first mismatch.
 *
 *   gradcheck custom|graph
 */
#include <dtrain.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 8 /* examples, one batch */

static int die(dtrain_error *err, const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", what, dtrain_status_name(dtrain_error_status(err)), dtrain_error_message(err));
	return 2;
}

/* A custom model: p = tanh(x . w + b), loss = mean (p - y)^2 (double inside). */
static dtrain_status custom_fb(void *user, dtrain_step *step, dtrain_error *err)
{
	(void)user, (void)err;
	int n = dtrain_step_batch_size(step);
	const float *x = dtrain_step_input_float(step, "x"), *y = dtrain_step_input_float(step, "y");
	const float *w = dtrain_step_param(step, 0), *b = dtrain_step_param(step, 1);
	float *gw = dtrain_step_grad(step, 0), *gb = dtrain_step_grad(step, 1);
	double loss = 0;
	for (int i = 0; i < n; i++) {
		double z = b[0];
		for (int k = 0; k < 3; k++)
			z += (double)x[3 * i + k] * w[k];
		double p = tanh(z), d = p - y[i];
		loss += d * d;
		if (gw) {
			double dz = 2 * d / n * (1 - p * p);
			for (int k = 0; k < 3; k++)
				gw[k] += (float)(dz * x[3 * i + k]);
			gb[0] += (float)dz;
		}
	}
	dtrain_step_set_loss(step, loss / n);
	return DTRAIN_OK;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	int graph = strcmp(argv[1], "graph") == 0;
	dtrain_error *err = dtrain_error_new();
	dtrain_model *m = dtrain_model_new();
	dtrain_data *d = NULL;
	float x[N * 6], yf[N];
	int32_t yi[N];
	srand(3);
	for (int i = 0; i < N * 6; i++)
		x[i] = 2.0f * rand() / (float)RAND_MAX - 1.0f;
	for (int i = 0; i < N; i++) {
		yf[i] = 0.8f * rand() / (float)RAND_MAX - 0.4f;
		yi[i] = i % 4;
	}
	if (graph) {
		/* Dense, layer norm, a residual add, concatenate, tanh, softmax CE. */
		dtrain_node in = dtrain_input(m, "x", DTRAIN_FLOAT32, 1, (int64_t[]){ 6 });
		dtrain_node lab = dtrain_input(m, "label", DTRAIN_INT32, 0, NULL);
		dtrain_node h = dtrain_dense(m, in, 5, DTRAIN_TANH);
		dtrain_node n1 = dtrain_layer_norm(m, h, 1e-3f);
		dtrain_node r = dtrain_add(m, h, n1);
		dtrain_node c = dtrain_concatenate(m, 2, (dtrain_node[]){ r, in });
		dtrain_node logits = dtrain_dense(m, c, 4, DTRAIN_LINEAR);
		dtrain_softmax_cross_entropy(m, logits, lab);
		if (dtrain_data_from_arrays(N, &d, err) || dtrain_data_add_float(d, "x", x, 6, err) ||
		    dtrain_data_add_int32(d, "label", yi, 1, err))
			return die(err, "data");
	} else {
		dtrain_input(m, "x", DTRAIN_FLOAT32, 1, (int64_t[]){ 3 });
		dtrain_input(m, "y", DTRAIN_FLOAT32, 0, NULL);
		dtrain_variable(m, "w", 1, (int64_t[]){ 3 }, DTRAIN_INIT_NORMAL, 0.5f);
		dtrain_variable(m, "b", 1, (int64_t[]){ 1 }, DTRAIN_INIT_NORMAL, 0.1f);
		dtrain_model_set_forward_backward(m, custom_fb, NULL);
		if (dtrain_data_from_arrays(N, &d, err) || dtrain_data_add_float(d, "x", x, 3, err) ||
		    dtrain_data_add_float(d, "y", yf, 1, err))
			return die(err, "data");
	}
	dtrain_session *s = NULL;
	if (dtrain_session_new(m, d, NULL, &s, err) || dtrain_session_set(s, "batch_size", "8", err) ||
	    dtrain_session_set(s, "log_every", "0", err))
		return die(err, "session");
	double loss0;
	if (dtrain_session_gradients(s, d, &loss0, err))
		return die(err, "gradients");
	int checked = 0;
	double worst = 0;
	for (int v = 0; v < dtrain_model_num_variables(m); v++) {
		const char *name = dtrain_model_variable_name(m, v);
		int64_t n = dtrain_model_variable_size(m, v);
		float *p = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
		if (dtrain_session_read_variable(s, name, p, n, err) || dtrain_session_read_gradient(s, name, g, n, err))
			return die(err, name);
		for (int64_t k = 0; k < n; k++) {
			const float h = 1e-2f, orig = p[k];
			double lp, lm;
			p[k] = orig + h;
			if (dtrain_session_write_variable(s, name, p, n, err) ||
			    dtrain_session_evaluate(s, d, &lp, NULL, err))
				return die(err, "evaluate");
			p[k] = orig - h;
			if (dtrain_session_write_variable(s, name, p, n, err) ||
			    dtrain_session_evaluate(s, d, &lm, NULL, err))
				return die(err, "evaluate");
			p[k] = orig;
			if (dtrain_session_write_variable(s, name, p, n, err))
				return die(err, "write");
			double fd = (lp - lm) / (2 * h), diff = fabs(fd - g[k]);
			double tol = 2e-3 + 2e-2 * fabs(fd);
			if (diff > worst)
				worst = diff;
			if (diff > tol) {
				printf("MISMATCH %s[%lld]: analytic %.6g, finite difference %.6g\n", name, (long long)k,
				       (double)g[k], fd);
				return 1;
			}
			checked++;
		}
		free(p);
		free(g);
	}
	printf("%s: %d gradient elements match finite differences (loss %.5f, worst difference %.2g)\n", argv[1],
	       checked, loss0, worst);
	dtrain_session_free(s);
	dtrain_data_free(d);
	dtrain_model_free(m);
	dtrain_error_free(err);
	return checked > 0 ? 0 : 1;
}
