/*
 * libFuzzer target: the layer-graph builder (nn/graph.c) and the model it
 * compiles (nn/exec.c). The bytes are a program: each op picks a call
 * (input, dense, conv2d, pool, flatten, reshape, activation, dropout,
 * embedding, layer norm, add, concat, loss), its names (a small pool, so
 * references hit; NULL; or odd text) and its sizes, which are capped small
 * so that one input runs in microseconds. Afterwards the graph is compiled
 * and, when that works, trained and evaluated for one step on data from the
 * remaining bytes, labels and token ids sometimes out of range. Every
 * failure must be a status: the target checks only that nothing crashes,
 * leaks or reads out of bounds (ASan, UBSan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/graph.h"
#include "nn/model.h"

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

/* A size in [lo, hi], sometimes out of range on purpose. */
static int size_in(struct reader *r, int lo, int hi)
{
	int b = next(r);
	if (b == 255)
		return -1;
	if (b == 254)
		return 0;
	return lo + b % (hi - lo + 1);
}

static const char *const pool[] = { "a", "b", "c", "d", "e", "f", "g", "h" };

static const char *pick_name(struct reader *r, char *odd)
{
	int b = next(r);
	if (b < 96)
		return NULL;
	if (b < 240)
		return pool[b % 8];
	/* odd names: '/', empty, too long */
	static const char *const odd_names[] = { "", "x/y", "dense_1", "a b",
						 "a_name_that_is_far_too_long_for_a_node_ok" };
	snprintf(odd, 64, "%s", odd_names[b % 5]);
	return odd;
}

static const char *pick_input(struct reader *r, struct dt_graph *g)
{
	int b = next(r);
	if (b < 128)
		return NULL; /* the last node */
	if (b < 250)
		return pool[b % 8];
	return b % 2 ? dt_graph_last(g) : "missing";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 512)
		return 0;
	struct reader r = { data, size };
	struct dt_graph *g = dt_graph_new();
	struct dt_err err = DT_ERR_INIT;
	char odd[64];
	int ops = 0;
	while (r.n > 0 && ops++ < 24) {
		const int op = next(&r) % 14;
		const char *name = pick_name(&r, odd);
		const char *in = pick_input(&r, g);
		enum dt_status st = DT_OK;
		int shape[3] = { size_in(&r, 1, 6), size_in(&r, 1, 6), size_in(&r, 1, 4) };
		const int act = next(&r) % 7; /* one past the last: an unknown activation */
		switch (op) {
		case 0:
			st = dt_graph_input(g, name, next(&r) % 3 == 0 ? DT_INT32 : DT_FLOAT32, size_in(&r, 1, 4), shape, &err);
			break;
		case 1:
			st = dt_graph_dense(g, name, in, size_in(&r, 1, 8), (enum dt_act)act,
					    next(&r) % 4 == 0 ? "random_normal(0.1)" : NULL, &err);
			break;
		case 2:
			st = dt_graph_conv2d(g, name, in, size_in(&r, 1, 4), size_in(&r, 1, 4), size_in(&r, 1, 4),
					     size_in(&r, 1, 3), (enum dt_padding)(next(&r) % 3), (enum dt_act)act, NULL, &err);
			break;
		case 3:
			st = dt_graph_pool(g, name, in, (enum dt_pool_kind)(next(&r) % 3), size_in(&r, 1, 3), size_in(&r, 1, 3),
					   size_in(&r, 1, 3), size_in(&r, 1, 3), (enum dt_padding)(next(&r) % 2), &err);
			break;
		case 4:
			st = dt_graph_flatten(g, name, in, &err);
			break;
		case 5:
			shape[next(&r) % 3] = next(&r) % 2 ? -1 : shape[0];
			st = dt_graph_reshape(g, name, in, size_in(&r, 1, 4), shape, &err);
			break;
		case 6:
			st = dt_graph_activation(g, name, in, (enum dt_act)act, &err);
			break;
		case 7:
			st = dt_graph_dropout(g, name, in, (float)(next(&r) % 12) / 10.0f, &err);
			break;
		case 8:
			st = dt_graph_embedding(g, name, in, size_in(&r, 1, 10), size_in(&r, 1, 6), NULL, &err);
			break;
		case 9:
			st = dt_graph_layer_norm(g, name, in, next(&r) % 5 ? 1e-3f : 0.0f, &err);
			break;
		case 10:
		case 11: {
			const char *ins[9];
			const int n = size_in(&r, 1, 9);
			for (int i = 0; i < 9; i++)
				ins[i] = next(&r) % 9 == 0 ? NULL : pool[next(&r) % 8];
			st = op == 10 ? dt_graph_add(g, name, n, ins, &err) : dt_graph_concat(g, name, n, ins, &err);
			break;
		}
		default:
			st = dt_graph_loss(g, in, (enum dt_loss)(next(&r) % 5), &err);
			break;
		}
		(void)st;
	}
	struct dt_model *m = NULL;
	const int max_batch = 1 + next(&r) % 3;
	if (dt_model_from_graph(g, "fuzz", max_batch, &m, &err) == DT_OK) {
		dt_model_init_params(m, (uint64_t)next(&r));
		struct dt_model_batch b = { .size = 1 + next(&r) % (max_batch + 1), .num_inputs = dt_model_num_inputs(m) };
		void *bufs[DT_MODEL_MAX_INPUTS + 1] = { 0 };
		for (int i = 0; i <= b.num_inputs; i++) {
			const struct dt_io_info *io = i < b.num_inputs ? dt_model_input(m, i) : dt_model_target(m);
			const size_t n = (size_t)(max_batch + 1) * io->count;
			bufs[i] = calloc(n ? n : 1, 4);
			for (size_t k = 0; k < n; k++) {
				const int v = next(&r);
				if (io->dtype == DT_INT32)
					((int32_t *)bufs[i])[k] = v == 255 ? -1 : v % 12;
				else
					((float *)bufs[i])[k] = (float)(v % 17) / 8.0f - 1.0f;
			}
			const struct dt_data d = { io->dtype, bufs[i] };
			if (i < b.num_inputs)
				b.inputs[i] = d;
			else
				b.targets = d;
		}
		struct dt_rng rng;
		dt_rng_seed(&rng, 1);
		struct dt_step_result res;
		(void)dt_model_step(m, &b, &rng, NULL, NULL, &res, &err);
		(void)dt_model_evaluate(m, &b, &res, &err);
		for (int i = 0; i <= b.num_inputs; i++)
			free(bufs[i]);
		dt_model_free(m);
	}
	dt_graph_free(g);
	return 0;
}
