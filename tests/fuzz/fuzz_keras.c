/* libFuzzer target: the Keras JSON loader (nn/keras.c, nn/keras_layers.c):
 * any bytes give a graph or DT_USAGE, never a crash; a graph that loads is
 * compiled for a batch of 2 and run one step on zero data, its
 * regularizers' penalties included, and its constraints applied. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nn/graph.h"
#include "nn/keras.h"
#include "nn/model.h"
#include "nn/regularize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 1 << 16)
		return 0;
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = NULL;
	struct dt_keras_info info;
	if (dt_keras_parse((const char *)data, size, "fuzz.json", &g, &info, &err) != DT_OK)
		return 0;
	struct dt_model *m = NULL;
	if (dt_model_from_graph(g, "fuzz", 2, &m, &err) == DT_OK && dt_model_num_params(m) < (1u << 22)) {
		size_t per = 1;
		for (int i = 0; i < dt_model_num_inputs(m); i++)
			per = dt_model_input(m, i)->count > per ? dt_model_input(m, i)->count : per;
		const size_t tcount = dt_model_target(m)->count;
		if (per < (1u << 20) && tcount < (1u << 20)) {
			void *x = calloc(2 * per, 4), *y = calloc(2 * tcount + 1, 4);
			struct dt_model_batch b = { .size = 2, .num_inputs = dt_model_num_inputs(m), .targets = { dt_model_target(m)->dtype, y } };
			for (int i = 0; i < b.num_inputs; i++)
				b.inputs[i] = (struct dt_data){ dt_model_input(m, i)->dtype, x };
			struct dt_step_result res;
			struct dt_rng rng;
			dt_rng_seed(&rng, 1);
			(void)dt_model_step(m, &b, &rng, NULL, NULL, &res, &err);
			dt_model_apply_constraints(m); /* Keras's constraints, after the update */
			free(x);
			free(y);
		}
	}
	dt_model_free(m);
	dt_graph_free(g);
	return 0;
}
