/*
 * libFuzzer target: the PUBLIC model builder (src/api/builder.c, model.c)
 * and a session over what it builds, through include/dtrain.h only. The
 * bytes are a program of builder calls — inputs, every layer, losses,
 * custom variables and callbacks mixed in — with node ids that sometimes
 * do not exist, sizes sometimes out of range, then dtrain_model_check and,
 * when the model checks, a session with arrays from the remaining bytes
 * (labels sometimes out of range): evaluate and gradients. Every failure
 * must be a status with a message; the target checks that nothing crashes,
 * leaks or reads out of bounds (ASan, UBSan), that a failed builder call
 * returns -1 and makes dtrain_model_check fail, and that a message is set
 * whenever a status is not DTRAIN_OK.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct reader {
	const uint8_t *p;
	size_t n;
};

static int next(struct reader *r)
{
	if (r->n == 0)
		return 0;
	r->n--;
	return *r->p++;
}

/* A small size, 255 → an out-of-range one. */
static int small(struct reader *r, int hi)
{
	int b = next(r);
	if (b == 255)
		return -1;
	if (b == 254)
		return 1 << 30;
	return b % hi + 1;
}

/* A node id: usually a recent one, sometimes none. */
static dtrain_node node(struct reader *r, int count)
{
	int b = next(r);
	if (b >= 250 || count == 0)
		return b - 252;
	return count - 1 - b % count;
}

static dtrain_status zero_fb(void *user, dtrain_step *step, dtrain_error *err)
{
	(void)user;
	if (dtrain_step_batch_size(step) > 3)
		return dtrain_error_set(err, DTRAIN_RUNTIME, "fuzz callback refuses batches over 3");
	dtrain_step_set_loss(step, 0.5);
	return DTRAIN_OK;
}

static void expect_message(dtrain_status st, const dtrain_error *err)
{
	if (st != DTRAIN_OK && dtrain_error_message(err)[0] == '\0')
		abort(); /* a status without a message */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct reader r = { data, size };
	dtrain_error *err = dtrain_error_new();
	dtrain_model *m = dtrain_model_new();
	static const char *const names[] = { "a", "b", "c", "label" };
	int count = 0, failed = 0;
	for (int op = 0; op < 24 && r.n > 0; op++) {
		int k = next(&r) % 20;
		int64_t shape[4] = { small(&r, 6), small(&r, 6), small(&r, 3), small(&r, 2) }; /* ndim <= 4 reads */
		dtrain_node x = node(&r, count), y = node(&r, count), got = 0;
		dtrain_activation act = (dtrain_activation)(next(&r) % 7);
		switch (k) {
		case 0: got = dtrain_input(m, names[next(&r) % 4], DTRAIN_FLOAT32, next(&r) % 5, shape); break;
		case 1: got = dtrain_input(m, names[next(&r) % 4], DTRAIN_INT32, next(&r) % 3, shape); break;
		case 2: got = dtrain_dense(m, x, small(&r, 8), act); break;
		case 3:
			got = dtrain_conv2d(m, x, small(&r, 4), small(&r, 3), small(&r, 3), small(&r, 2),
					    (dtrain_padding)(next(&r) % 3), act);
			break;
		case 4: got = dtrain_max_pool2d(m, x, small(&r, 2), small(&r, 2)); break;
		case 5: got = dtrain_avg_pool2d(m, x, small(&r, 2), small(&r, 2)); break;
		case 6: got = dtrain_flatten(m, x); break;
		case 7: got = dtrain_reshape(m, x, next(&r) % 5, shape); break;
		case 8: got = dtrain_activate(m, x, act); break;
		case 9: got = dtrain_dropout(m, x, (float)(next(&r) % 12) / 10.0f); break;
		case 10: got = dtrain_embedding(m, x, small(&r, 9), small(&r, 4)); break;
		case 11: got = dtrain_layer_norm(m, x, (float)(next(&r) % 3) * 1e-3f); break;
		case 12: got = dtrain_add(m, x, y); break;
		case 13: got = dtrain_concatenate(m, next(&r) % 4, (dtrain_node[]){ x, y, x }); break;
		case 14: got = dtrain_softmax_cross_entropy(m, x, y); break;
		case 15: got = dtrain_sigmoid_cross_entropy(m, x, y); break;
		case 16: got = dtrain_mean_squared_error(m, x, y); break;
		case 17: got = dtrain_variable(m, names[next(&r) % 4], next(&r) % 6, shape, (dtrain_init)(next(&r) % 7), 0.1f); break;
		case 18: dtrain_model_set_forward_backward(m, next(&r) % 2 ? zero_fb : NULL, NULL); break;
		default: got = dtrain_input(m, names[next(&r) % 4], DTRAIN_FLOAT32, 1, shape); break;
		}
		if (got < 0)
			failed = 1;
		else if (k != 17 && k != 18 && got >= count)
			count = got + 1;
	}
	dtrain_status st = dtrain_model_check(m, err);
	expect_message(st, err);
	if (failed && st == DTRAIN_OK)
		abort(); /* a failed call must make the model fail its check */
	if (st == DTRAIN_OK) {
		/* Arrays for every input from the bytes left (4 examples, small values). */
		dtrain_data *d = NULL;
		dtrain_session *s = NULL;
		if (dtrain_data_from_arrays(4, &d, NULL) == DTRAIN_OK) {
			for (int i = 0; i < 4; i++) {
				float f[4 * 216];
				int32_t v[4 * 216];
				for (int j = 0; j < 4 * 216; j++) {
					f[j] = (float)(next(&r) % 9) - 4.0f;
					v[j] = next(&r) % 11 - 1;
				}
				if (i == 3)
					dtrain_data_add_int32(d, names[i], v, 1 + next(&r) % 3, NULL);
				else
					dtrain_data_add_float(d, names[i], f, 1 + next(&r) % 216, NULL);
			}
			st = dtrain_session_new(m, d, NULL, &s, err);
			expect_message(st, err);
			double loss;
			if (st == DTRAIN_OK && dtrain_session_set(s, "batch_size", "2", err) == DTRAIN_OK &&
			    dtrain_session_set(s, "log_every", "0", err) == DTRAIN_OK) {
				st = dtrain_session_evaluate(s, d, &loss, NULL, err);
				expect_message(st, err);
				st = dtrain_session_gradients(s, d, &loss, err);
				expect_message(st, err);
			}
		}
		dtrain_session_free(s);
		dtrain_data_free(d);
	}
	dtrain_model_free(m);
	dtrain_error_free(err);
	return 0;
}
