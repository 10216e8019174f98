/* t2t's transformer hparams sets (nn/hparams.c) against the values of
 * tensor2tensor's models/transformer.py and common_hparams.basic_params1,
 * written out here by hand from t2t's source, one row per set; and the
 * legacy "noam" schedule of transformer_base_v1 against t2t's formula. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "nn/hparams.h"
#include "nn/optimizer.h"

struct t2t_row {
	const char *set;
	int layers, hidden, filter, heads, batch, max_length, warmup;
	double prepost, attention, relu, label_smoothing, beta2, lr, lr_constant;
	const char *schedule;
};

#define BASE_SCHEDULE "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size"

static const struct t2t_row rows[] = {
	{ "transformer_base_v1", 6, 512, 2048, 8, 4096, 256, 4000, 0.1, 0.0, 0.0, 0.1, 0.98, 0.1, 1.0, "legacy" },
	{ "transformer_base_v2", 6, 512, 2048, 8, 4096, 256, 8000, 0.1, 0.1, 0.1, 0.1, 0.98, 0.2, 1.0, "legacy" },
	{ "transformer_base_v3", 6, 512, 2048, 8, 4096, 256, 8000, 0.1, 0.1, 0.1, 0.1, 0.997, 0.2, 2.0, BASE_SCHEDULE },
	{ "transformer_base", 6, 512, 2048, 8, 4096, 256, 8000, 0.1, 0.1, 0.1, 0.1, 0.997, 0.2, 2.0, BASE_SCHEDULE },
	{ "transformer_big", 6, 1024, 4096, 16, 2048, 256, 8000, 0.3, 0.1, 0.1, 0.1, 0.997, 0.2, 2.0, BASE_SCHEDULE },
	{ "transformer_big_single_gpu", 6, 1024, 4096, 16, 2048, 256, 16000, 0.1, 0.1, 0.1, 0.1, 0.997, 0.2, 2.0,
	  BASE_SCHEDULE },
	{ "transformer_base_single_gpu", 6, 512, 2048, 8, 1024, 256, 16000, 0.1, 0.1, 0.1, 0.1, 0.997, 0.2, 0.1,
	  "constant*linear_warmup*rsqrt_decay" },
	{ "transformer_small", 2, 256, 1024, 4, 4096, 256, 8000, 0.1, 0.1, 0.1, 0.1, 0.997, 0.2, 2.0, BASE_SCHEDULE },
	{ "transformer_tiny", 2, 128, 512, 4, 4096, 256, 8000, 0.1, 0.1, 0.1, 0.1, 0.997, 0.2, 2.0, BASE_SCHEDULE },
};

DT_TEST(nn_hparams_t2t, every_transformer_set_has_t2ts_values)
{
	struct dt_err err = DT_ERR_INIT;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct t2t_row *w = &rows[i];
		struct dt_hparams hp;
		DT_CHECK_OK(dt_hparams_from_set(w->set, &hp, &err), &err);
		DT_CHECK_OK(dt_hparams_validate(&hp, &err), &err);
		DT_CHECK_STR_EQ(hp.model, "transformer");
		DT_CHECK_INT_EQ(hp.num_hidden_layers, w->layers);
		DT_CHECK_INT_EQ(hp.num_encoder_layers, 0);
		DT_CHECK_INT_EQ(hp.num_decoder_layers, 0);
		DT_CHECK_INT_EQ(hp.hidden_size, w->hidden);
		DT_CHECK_INT_EQ(hp.filter_size, w->filter);
		DT_CHECK_INT_EQ(hp.num_heads, w->heads);
		DT_CHECK_INT_EQ(hp.batch_size, w->batch);
		DT_CHECK_INT_EQ(hp.max_length, w->max_length);
		DT_CHECK_INT_EQ(hp.warmup_steps, w->warmup);
		DT_CHECK_NEAR(hp.layer_prepostprocess_dropout, w->prepost, 0);
		DT_CHECK_NEAR(hp.attention_dropout, w->attention, 0);
		DT_CHECK_NEAR(hp.relu_dropout, w->relu, 0);
		DT_CHECK_NEAR(hp.label_smoothing, w->label_smoothing, 0);
		DT_CHECK_NEAR(hp.beta1, 0.9, 0);
		DT_CHECK_NEAR(hp.beta2, w->beta2, 0);
		DT_CHECK_NEAR(hp.epsilon, 1e-9, 0);
		DT_CHECK_NEAR(hp.learning_rate, w->lr, 0);
		DT_CHECK_NEAR(hp.learning_rate_constant, w->lr_constant, 0);
		DT_CHECK_STR_EQ(hp.lr_schedule, w->schedule);
		DT_CHECK_STR_EQ(hp.optimizer, "adam");
		DT_CHECK_NEAR(hp.clip_grad_norm, 0, 0);
		DT_CHECK_NEAR(hp.weight_decay, 0, 0);
		DT_CHECK_INT_EQ(hp.shared_embedding_and_softmax_weights, 1);
		/* basic_params1's post-norm "none"/"dan" in v1; "n"/"da" from v2 on */
		const int v1 = strcmp(w->set, "transformer_base_v1") == 0;
		DT_CHECK_STR_EQ(hp.layer_preprocess_sequence, v1 ? "none" : "n");
		DT_CHECK_STR_EQ(hp.layer_postprocess_sequence, v1 ? "dan" : "da");
		DT_CHECK_INT_EQ(hp.min_length_bucket, 8);
		DT_CHECK_NEAR(hp.length_bucket_step, 1.1, 0);
	}
}

/* t2t's legacy_learning_rate_schedule, decay scheme "noam", Adam:
 * 5000 * hidden^-0.5 * min((s+1) * warmup^-1.5, (s+1)^-0.5) * 0.002 * lr. */
static double noam(double s, double hidden, double warmup, double lr)
{
	return 5000.0 * pow(hidden, -0.5) * fmin((s + 1) * pow(warmup, -1.5), pow(s + 1, -0.5)) * 0.002 * lr;
}

DT_TEST(nn_hparams_t2t, base_v1_legacy_noam_schedule_is_t2ts)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("transformer_base_v1", &hp, &err), &err);
	const int64_t steps[] = { 0, 1, 100, 3998, 3999, 4000, 10000, 250000 };
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		const double want = noam((double)steps[i], 512, 4000, 0.1);
		DT_CHECK_NEAR(dt_lr_at(&hp, steps[i], 300000), want, want * 1e-6);
	}
	/* the peak, at step warmup - 1: lr * 0.002 * 5000 / sqrt(512 * 4000) */
	DT_CHECK_NEAR(dt_lr_at(&hp, 3999, 300000), 0.1 * 10.0 / sqrt(512.0 * 4000.0), 1e-9);
	/* another optimizer than Adam: no 0.002 correction */
	DT_CHECK_OK(dt_hparams_parse(&hp, "optimizer=sgd", &err), &err);
	DT_CHECK_NEAR(dt_lr_at(&hp, 3999, 300000), 0.1 * 5000.0 / sqrt(512.0 * 4000.0), 1e-6);
	/* base_single_gpu: 0.1 * min(1, s / 16000) * rsqrt(max(s, 16000)) */
	DT_CHECK_OK(dt_hparams_from_set("transformer_base_single_gpu", &hp, &err), &err);
	DT_CHECK_NEAR(dt_lr_at(&hp, 8000, 300000), 0.1 * 0.5 / sqrt(16000.0), 1e-9);
	DT_CHECK_NEAR(dt_lr_at(&hp, 64000, 300000), 0.1 / sqrt(64000.0), 1e-9);
}

DT_TEST(nn_hparams_t2t, the_two_layouts_and_no_other)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("transformer_base", &hp, &err), &err);
	DT_CHECK_OK(dt_hparams_parse(&hp, "layer_preprocess_sequence=none,layer_postprocess_sequence=dan", &err), &err);
	DT_CHECK_OK(dt_hparams_validate(&hp, &err), &err);
	DT_CHECK_OK(dt_hparams_parse(&hp, "layer_postprocess_sequence=da", &err), &err);
	DT_CHECK_INT_EQ(dt_hparams_validate(&hp, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "layer_preprocess_sequence 'none' with layer_postprocess_sequence 'da'");
	dt_err_clear(&err);
	DT_CHECK_INT_EQ(dt_hparams_parse(&hp, "layer_postprocess_sequence=dna", &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "layer_postprocess_sequence");
}

DT_TEST(nn_hparams_t2t, json_prints_a_sets_values)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("transformer_big", &hp, &err), &err);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	DT_CHECK(f != NULL);
	dt_hparams_write_json(&hp, f);
	fclose(f);
	DT_CHECK_CONTAINS(buf, "\"hidden_size\": 1024,\n");
	DT_CHECK_CONTAINS(buf, "\"num_heads\": 16,\n");
	DT_CHECK_CONTAINS(buf, "\"batch_size\": 2048,\n");
	DT_CHECK_CONTAINS(buf, "\"layer_prepostprocess_dropout\": 0.3,\n");
	free(buf);
}
