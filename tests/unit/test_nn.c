/* Unit tests for src/nn: hparams, optimizers and schedules, the model
 * registry, variables, initializers, determinism and learning. The
 * gradient checks are in test_nn_grad.c. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "nn/hparams.h"
#include "nn/layers.h"
#include "models/builtin.h"
#include "nn/model.h"
#include "nn/optimizer.h"

static struct dt_hparams set(const char *name)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set(name, &hp, &err), &err);
	return hp;
}

/* ---- hparams ---------------------------------------------------------------- */

DT_TEST(nn_hparams, every_set_is_valid_and_each_model_has_a_base_set)
{
	struct dt_err err = DT_ERR_INIT;
	size_t n = 0;
	const char *const *sets = dt_hparams_set_names(&n);
	DT_CHECK(n >= 3);
	for (size_t i = 0; i < n; i++) {
		struct dt_hparams hp = set(sets[i]);
		DT_CHECK_OK(dt_hparams_validate(&hp, &err), &err);
	}
	size_t nm = 0;
	const char *const *models = dt_models_builtin_names(&nm);
	for (size_t i = 0; i < nm; i++) {
		const char *def = dt_hparams_default_set(models[i]);
		DT_CHECK(def != NULL);
		struct dt_hparams hp = set(def);
		DT_CHECK_STR_EQ(hp.model, models[i]);
	}
	/* hparams' `model` names exactly the models the CLI's zoo builds */
	size_t nh = 0;
	const char *const *hmodels = dt_hparams_model_names(&nh);
	DT_CHECK_INT_EQ(nh, nm);
	for (size_t i = 0; i < nh && i < nm; i++)
		DT_CHECK_STR_EQ(hmodels[i], models[i]);
	DT_CHECK(dt_hparams_default_set("resnet") == NULL);
	struct dt_hparams hp = set("cnn_base");
	DT_CHECK_STR_EQ(hp.optimizer, "adam");
	DT_CHECK_INT_EQ(hp.batch_size, 64);
	DT_CHECK_NEAR(hp.learning_rate, 2e-3, 0);
	DT_CHECK_STR_EQ(hp.lr_schedule, "linear_warmup_decay");
	DT_CHECK_INT_EQ(hp.warmup_steps, 100);
	hp = set("mlp_sgd");
	DT_CHECK_STR_EQ(hp.optimizer, "momentum");
	DT_CHECK_NEAR(hp.learning_rate, 0.01, 0);
	DT_CHECK_NEAR(hp.momentum, 0.9, 0);
}

DT_TEST(nn_hparams, unknown_set_lists_the_valid_ones)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp;
	DT_CHECK_INT_EQ(dt_hparams_from_set("mlp_bse", &hp, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "unknown hparams set 'mlp_bse' (did you mean 'mlp_base'?); valid: mlp_base, ");
	DT_CHECK_CONTAINS(err.msg, "cnn_base");
}

DT_TEST(nn_hparams, overrides_apply_in_order)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("mlp_base");
	DT_CHECK_OK(dt_hparams_parse(&hp, "learning_rate=0.05,batch_size=128", &err), &err);
	DT_CHECK_NEAR(hp.learning_rate, 0.05, 0);
	DT_CHECK_INT_EQ(hp.batch_size, 128);
	DT_CHECK_OK(dt_hparams_parse(&hp, " optimizer = momentum , momentum=0.5,sync=true,batch_size=7,batch_size=9", &err),
		    &err);
	DT_CHECK_STR_EQ(hp.optimizer, "momentum");
	DT_CHECK_NEAR(hp.momentum, 0.5, 0);
	DT_CHECK_INT_EQ(hp.sync, 1);
	DT_CHECK_INT_EQ(hp.batch_size, 9);
	DT_CHECK_OK(dt_hparams_parse(&hp, "lr_schedule=linear_warmup_decay,warmup_steps=100,model=cnn,dropout=0.25", &err),
		    &err);
	DT_CHECK_STR_EQ(hp.lr_schedule, "linear_warmup_decay");
	DT_CHECK_INT_EQ(hp.warmup_steps, 100);
	DT_CHECK_STR_EQ(hp.model, "cnn");
	DT_CHECK_NEAR(hp.dropout, 0.25, 0);
	DT_CHECK_OK(dt_hparams_parse(&hp, "", &err), &err);
	DT_CHECK_OK(dt_hparams_parse(&hp, NULL, &err), &err);
	DT_CHECK_OK(dt_hparams_validate(&hp, &err), &err);
}

DT_TEST(nn_hparams, unknown_name_suggests_and_lists_valid_names)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("mlp_base");
	DT_CHECK_INT_EQ(dt_hparams_parse(&hp, "lerning_rate=0.1", &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "unknown hparam 'lerning_rate' (did you mean 'learning_rate'?); valid: batch_size, "
				   "learning_rate, ");
	DT_CHECK_CONTAINS(err.msg, "weight_decay");
	DT_CHECK_INT_EQ(dt_hparams_parse(&hp, "zzzzzzzzzz=1", &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "unknown hparam 'zzzzzzzzzz'; valid: batch_size, ");
}

DT_TEST(nn_hparams, malformed_items_are_named_and_change_nothing)
{
	struct dt_err err = DT_ERR_INIT;
	const struct dt_hparams before = set("mlp_base");
	static const struct {
		const char *text, *want1, *want2;
	} cases[] = {
		{ "batch_size", "malformed hparam 'batch_size' (expected name=value)", NULL },
		{ "=5", "malformed hparam '=5' (expected name=value)", NULL },
		{ "batch_size=abc", "invalid hparam 'batch_size=abc'", "'abc' is not an integer" },
		{ "batch_size=-1", "invalid hparam 'batch_size=-1'", "out of range" },
		{ "batch_size=", "invalid hparam 'batch_size='", "empty" },
		{ "learning_rate=0", "invalid hparam 'learning_rate=0'", "out of range (0, inf)" },
		{ "momentum=1", "invalid hparam 'momentum=1'", "out of range [0, 1)" },
		{ "learning_rate=fast", "invalid hparam 'learning_rate=fast'", "not a number" },
		{ "optimizer=adamw", "unknown optimizer 'adamw' (did you mean 'adam'?); valid: sgd, momentum, adam, adagrad",
		  NULL },
		{ "model=lenett", "unknown model 'lenett' (did you mean 'lenet'?); valid: mlp, lenet, cnn", NULL },
		{ "sync=maybe", "invalid hparam 'sync=maybe'", "not a boolean" },
		{ "batch_size=32,,learning_rate=1", "empty item", NULL },
	};
	for (size_t i = 0; i < DT_ARRAY_LEN(cases); i++) {
		struct dt_hparams hp = before;
		dt_err_clear(&err);
		/* A good item first: it must not stick when a later one fails. */
		char text[128];
		snprintf(text, sizeof(text), "learning_rate=0.5,%s", cases[i].text);
		DT_CHECK_INT_EQ(dt_hparams_parse(&hp, text, &err), DT_USAGE);
		DT_CHECK_CONTAINS(err.msg, cases[i].want1);
		if (cases[i].want2)
			DT_CHECK_CONTAINS(err.msg, cases[i].want2);
		DT_CHECK(memcmp(&hp, &before, sizeof(hp)) == 0);
	}
}

DT_TEST(nn_hparams, validate_checks_ranges_and_names)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("lenet_base");
	hp.batch_size = 0;
	DT_CHECK_INT_EQ(dt_hparams_validate(&hp, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "batch_size");
	hp = set("lenet_base");
	snprintf(hp.model, sizeof(hp.model), "resnet");
	DT_CHECK_INT_EQ(dt_hparams_validate(&hp, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "unknown model 'resnet'");
	hp = set("lenet_base");
	hp.dropout = 1.0;
	DT_CHECK_INT_EQ(dt_hparams_validate(&hp, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "dropout");
	hp = set("lenet_base");
	snprintf(hp.lr_schedule, sizeof(hp.lr_schedule), "cosine");
	DT_CHECK_INT_EQ(dt_hparams_validate(&hp, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "unknown learning-rate factor 'cosine' in schedule 'cosine'");
	DT_CHECK_CONTAINS(err.msg, "a schedule is constant, linear_warmup_decay, or a product of t2t's factors");
	hp = set("lenet_base");
	DT_CHECK_INT_EQ(dt_hparams_parse(&hp, "learning_rate_schedule=constant*linear_warmup*rsqrt_dekay", &err),
			DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "invalid hparam 'learning_rate_schedule=constant*linear_warmup*rsqrt_dekay'");
	DT_CHECK_CONTAINS(err.msg, "'rsqrt_dekay' (did you mean 'rsqrt_decay'?)");
	DT_CHECK_STR_EQ(hp.lr_schedule, "constant"); /* a failed parse changes nothing */
	DT_CHECK_INT_EQ(dt_hparams_parse(&hp, "lr_schedule= * ", &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "empty schedule");
}

DT_TEST(nn_hparams, json_has_every_field_once_and_reads_back)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("cnn_base");
	DT_CHECK_OK(dt_hparams_parse(&hp, "learning_rate=0.1,sync=true,epsilon=1e-07", &err), &err);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	DT_CHECK(f != NULL);
	dt_hparams_write_json(&hp, f);
	fclose(f);
	json_error_t jerr;
	json_t *root = json_loads(buf, 0, &jerr);
	if (!root)
		dt_test_fail(__FILE__, __LINE__, "not JSON (%s): %s", jerr.text, buf);
	DT_CHECK_INT_EQ(json_object_size(root), 38); /* t2t's aliases are not printed */
	DT_CHECK_STR_EQ(json_string_value(json_object_get(root, "model")), "cnn");
	DT_CHECK_INT_EQ(json_integer_value(json_object_get(root, "batch_size")), 64);
	DT_CHECK(json_real_value(json_object_get(root, "learning_rate")) == 0.1);
	DT_CHECK(json_real_value(json_object_get(root, "epsilon")) == 1e-7);
	DT_CHECK(json_is_true(json_object_get(root, "sync")));
	DT_CHECK(json_is_false(json_object_get(root, "scale_lr_by_workers")));
	DT_CHECK_CONTAINS(buf, "\"learning_rate\": 0.1,");
	json_decref(root);
	free(buf);
}

/* ---- optimizers ---------------------------------------------------------------- */

/* Runs three steps on one parameter (p = 1) with gradients 0.5, 0.5, -1. */
static void three_steps(const char *optimizer, double expect[3])
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("mlp_base");
	snprintf(hp.optimizer, sizeof(hp.optimizer), "%s", optimizer);
	struct dt_optimizer opt;
	DT_CHECK_OK(dt_optimizer_init(&opt, &hp, 1, &err), &err);
	float p = 1.0f;
	const float g[3] = { 0.5f, 0.5f, -1.0f };
	for (int t = 0; t < 3; t++) {
		dt_optimizer_apply(&opt, &p, &g[t], 0, 1, 0.1f, t + 1);
		if (!(fabs((double)p - expect[t]) <= 1e-6))
			dt_test_fail(__FILE__, __LINE__, "%s step %d: %.9g, expected %.9g", optimizer, t + 1, (double)p,
				     expect[t]);
	}
	dt_optimizer_release(&opt);
}

DT_TEST(nn_optim, updates_match_hand_computed_values)
{
	/* sgd: p -= 0.1 g */
	three_steps("sgd", (double[3]){ 0.95, 0.90, 1.0 });
	/* momentum 0.9: a = 0.5, 0.95, -0.145 */
	three_steps("momentum", (double[3]){ 0.95, 0.855, 0.8695 });
	/* adam (0.9, 0.999, 1e-7): the first step moves by lr */
	three_steps("adam", (double[3]){ 0.900000632451532, 0.8000010797749725, 0.8075659933132356 });
	/* adagrad (initial accumulator 0.1): acc = 0.35, 0.6, 1.6 */
	three_steps("adagrad", (double[3]){ 0.9154845888128602, 0.8509348747094022, 0.9299918099636122 });
}

DT_TEST(nn_optim, slots_are_slot_major_and_adagrad_starts_at_its_initial_value)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("mlp_base");
	struct dt_optimizer opt;
	DT_CHECK_OK(dt_optimizer_init(&opt, &hp, 5, &err), &err);
	DT_CHECK_INT_EQ(opt.num_slots, 2);
	float p[5] = { 0 }, g[5] = { 1, 2, 3, 4, 5 };
	dt_optimizer_apply(&opt, p, g, 0, 5, 0.1f, 1);
	for (int i = 0; i < 5; i++) {
		DT_CHECK_NEAR(opt.slots[i], 0.1 * (double)g[i], 1e-6);                     /* m */
		DT_CHECK_NEAR(opt.slots[5 + i], 0.001 * (double)g[i] * (double)g[i], 1e-7); /* v */
	}
	dt_optimizer_release(&opt);
	snprintf(hp.optimizer, sizeof(hp.optimizer), "adagrad");
	DT_CHECK_OK(dt_optimizer_init(&opt, &hp, 3, &err), &err);
	DT_CHECK_INT_EQ(opt.num_slots, 1);
	for (int i = 0; i < 3; i++)
		DT_CHECK(opt.slots[i] == 0.1f);
	dt_optimizer_release(&opt);
	dt_optimizer_release(NULL);
	snprintf(hp.optimizer, sizeof(hp.optimizer), "rmsprop");
	DT_CHECK_INT_EQ(dt_optimizer_init(&opt, &hp, 3, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "unknown optimizer 'rmsprop'; valid: sgd, momentum, adam, adagrad");
}

DT_TEST(nn_optim, ranges_give_the_same_bits_as_the_whole_buffer)
{
	struct dt_err err = DT_ERR_INIT;
	static const char *const names[] = { "sgd", "momentum", "adam", "adagrad" };
	const size_t n = 1001;
	for (size_t k = 0; k < DT_ARRAY_LEN(names); k++) {
		struct dt_hparams hp = set("mlp_base");
		snprintf(hp.optimizer, sizeof(hp.optimizer), "%s", names[k]);
		struct dt_optimizer whole, parts;
		DT_CHECK_OK(dt_optimizer_init(&whole, &hp, n, &err), &err);
		DT_CHECK_OK(dt_optimizer_init(&parts, &hp, n, &err), &err);
		float *p1 = dt_xmalloc(n * sizeof(float)), *p2 = dt_xmalloc(n * sizeof(float));
		float *g = dt_xmalloc(n * sizeof(float));
		struct dt_rng rng;
		dt_rng_seed(&rng, 7);
		for (size_t i = 0; i < n; i++)
			p1[i] = p2[i] = dt_rng_normal(&rng);
		for (int step = 1; step <= 3; step++) {
			for (size_t i = 0; i < n; i++)
				g[i] = dt_rng_normal(&rng);
			dt_optimizer_apply(&whole, p1, g, 0, n, 0.01f, step);
			/* Odd range boundaries, in a shuffled order. */
			static const size_t cuts[][2] = { { 301, 699 }, { 0, 1 }, { 1, 299 }, { 1000, 1 }, { 300, 1 } };
			for (size_t c = 0; c < DT_ARRAY_LEN(cuts); c++)
				dt_optimizer_apply(&parts, p2, g + cuts[c][0], cuts[c][0], cuts[c][1], 0.01f, step);
		}
		for (size_t i = 0; i < n; i++)
			if (memcmp(&p1[i], &p2[i], sizeof(float)) != 0)
				dt_test_fail(__FILE__, __LINE__, "%s: element %zu differs: %.9g vs %.9g", names[k], i,
					     (double)p1[i], (double)p2[i]);
		if (whole.num_slots)
			DT_CHECK(memcmp(whole.slots, parts.slots, (size_t)whole.num_slots * n * sizeof(float)) == 0);
		dt_optimizer_release(&whole);
		dt_optimizer_release(&parts);
		free(p1);
		free(p2);
		free(g);
	}
}

/* apply_mean(sum of 3 gradients) must equal apply(the sum times 1/3, computed
 * beforehand) bit for bit, and leave the sum as it was: sync training and
 * all-reduce rely on it to skip the averaging pass. */
DT_TEST(nn_optim, mean_of_a_sum_equals_applying_the_prescaled_mean)
{
	struct dt_err err = DT_ERR_INIT;
	static const char *const names[] = { "sgd", "momentum", "adam", "adagrad" };
	const size_t n = 203; /* 25 vectors of 8 and a tail of 3 */
	for (size_t k = 0; k < DT_ARRAY_LEN(names); k++) {
		struct dt_hparams hp = set("mlp_base");
		snprintf(hp.optimizer, sizeof(hp.optimizer), "%s", names[k]);
		struct dt_optimizer fused, prescaled;
		DT_CHECK_OK(dt_optimizer_init(&fused, &hp, n, &err), &err);
		DT_CHECK_OK(dt_optimizer_init(&prescaled, &hp, n, &err), &err);
		float *p1 = dt_xmalloc(n * sizeof(float)), *p2 = dt_xmalloc(n * sizeof(float));
		float *sum = dt_xmalloc(n * sizeof(float)), *mean = dt_xmalloc(n * sizeof(float));
		float *before = dt_xmalloc(n * sizeof(float));
		struct dt_rng rng;
		dt_rng_seed(&rng, 11);
		for (size_t i = 0; i < n; i++)
			p1[i] = p2[i] = dt_rng_normal(&rng);
		for (int step = 1; step <= 3; step++) {
			for (size_t i = 0; i < n; i++) {
				sum[i] = dt_rng_normal(&rng) + dt_rng_normal(&rng) + dt_rng_normal(&rng);
				mean[i] = sum[i] * (1.0f / 3.0f);
			}
			memcpy(before, sum, n * sizeof(float));
			dt_optimizer_apply_mean(&fused, p1, sum, 3, 0, n, 0.01f, step);
			dt_optimizer_apply(&prescaled, p2, mean, 0, n, 0.01f, step);
			DT_CHECK(memcmp(before, sum, n * sizeof(float)) == 0);
		}
		for (size_t i = 0; i < n; i++)
			if (memcmp(&p1[i], &p2[i], sizeof(float)) != 0)
				dt_test_fail(__FILE__, __LINE__, "%s: element %zu differs: %.9g vs %.9g", names[k], i,
					     (double)p1[i], (double)p2[i]);
		if (fused.num_slots)
			DT_CHECK(memcmp(fused.slots, prescaled.slots, (size_t)fused.num_slots * n * sizeof(float)) == 0);
		dt_optimizer_release(&fused);
		dt_optimizer_release(&prescaled);
		free(p1);
		free(p2);
		free(sum);
		free(mean);
		free(before);
	}
}

DT_TEST(nn_optim, learning_rate_schedules)
{
	struct dt_hparams hp = set("mlp_base");
	hp.learning_rate = 1.0;
	snprintf(hp.lr_schedule, sizeof(hp.lr_schedule), "constant");
	DT_CHECK_NEAR(dt_lr_at(&hp, 0, 100), 1.0, 0);
	DT_CHECK_NEAR(dt_lr_at(&hp, 99, 100), 1.0, 0);
	snprintf(hp.lr_schedule, sizeof(hp.lr_schedule), "linear_warmup_decay");
	hp.warmup_steps = 10;
	hp.lr_decay_end = 0.1;
	DT_CHECK_NEAR(dt_lr_at(&hp, 0, 110), 0.0, 0);
	DT_CHECK_NEAR(dt_lr_at(&hp, 5, 110), 0.5, 1e-7);
	DT_CHECK_NEAR(dt_lr_at(&hp, 10, 110), 1.0, 1e-7);
	DT_CHECK_NEAR(dt_lr_at(&hp, 60, 110), 0.55, 1e-7);
	DT_CHECK_NEAR(dt_lr_at(&hp, 110, 110), 0.1, 1e-7);
	DT_CHECK_NEAR(dt_lr_at(&hp, 500, 110), 0.1, 1e-7);
	hp.warmup_steps = 0;
	hp.lr_decay_end = 0;
	DT_CHECK_NEAR(dt_lr_at(&hp, 0, 100), 1.0, 0);
	DT_CHECK_NEAR(dt_lr_at(&hp, 75, 100), 0.25, 1e-7);
	hp.warmup_steps = 200; /* warm-up longer than the run */
	DT_CHECK_NEAR(dt_lr_at(&hp, 100, 100), 0.5, 1e-7);
}

/* t2t's factors (tensor2tensor/utils/learning_rate.py), each against its
 * formula worked by hand, and their product. */
DT_TEST(nn_optim, t2t_learning_rate_factors)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("transformer_tiny"); /* hidden 128, warm-up 8000, constant 2 */
	const double rsqrt_h = 1.0 / sqrt(128.0);
	/* t2t's transformer schedule: 2 * min(1, s/8000) * max(s, 8000)^-1/2 * 128^-1/2 */
	DT_CHECK_NEAR(dt_lr_at(&hp, 0, 100000), 0.0, 0);
	DT_CHECK_NEAR(dt_lr_at(&hp, 4000, 100000), 2.0 * 0.5 / sqrt(8000.0) * rsqrt_h, 1e-9);
	DT_CHECK_NEAR(dt_lr_at(&hp, 32000, 100000), 2.0 / sqrt(32000.0) * rsqrt_h, 1e-9);
	struct {
		const char *overrides;
		int64_t step, total;
		double want;
	} cases[] = {
		{ "learning_rate_schedule=constant,learning_rate=0.5", 7, 10, 0.5 }, /* dtrain's: learning_rate */
		{ "learning_rate_schedule=constant*linear_warmup,learning_rate_warmup_steps=100", 25, 1000, 2.0 * 0.25 },
		{ "learning_rate_schedule=linear_decay,learning_rate_decay_steps=400", 100, 1000, 1.0 },
		{ "learning_rate_schedule=linear_decay,learning_rate_decay_steps=400", 700, 1000, 0.75 },
		{ "learning_rate_schedule=linear_decay,learning_rate_decay_steps=400", 1200, 1000, 0.0 },
		{ "learning_rate_schedule=cosdecay,learning_rate_warmup_steps=10,learning_rate_decay_steps=100", 10, 100,
		  1.0 },
		{ "learning_rate_schedule=cosdecay,learning_rate_warmup_steps=10,learning_rate_decay_steps=100", 50, 100,
		  0.5 },
		{ "learning_rate_schedule=single_cycle_cos_decay,learning_rate_warmup_steps=10,"
		  "learning_rate_decay_steps=100",
		  60, 1000, 0.5 },
		{ "learning_rate_schedule=single_cycle_cos_decay,learning_rate_warmup_steps=10,"
		  "learning_rate_decay_steps=100",
		  5, 1000, 1.0 },
		{ "learning_rate_schedule=rsqrt_normalized_decay,learning_rate_warmup_steps=100", 400, 1000, 0.5 },
		{ "learning_rate_schedule=rsqrt_normalized_decay,learning_rate_warmup_steps=100", 50, 1000, 1.0 },
		{ "learning_rate_schedule=exp_decay,learning_rate_warmup_steps=100,learning_rate_decay_steps=100,"
		  "learning_rate_decay_rate=0.5",
		  250, 1000, pow(0.5, 1.5) },
		{ "learning_rate_schedule=exp_decay,learning_rate_warmup_steps=100,learning_rate_decay_steps=100,"
		  "learning_rate_decay_rate=0.5,learning_rate_decay_staircase=true",
		  250, 1000, 0.5 }, /* floor(1.5) */
		{ "learning_rate_schedule= rsqrt_hidden_size * constant ", 3, 10, 2.0 * rsqrt_h },
		{ "learning_rate_schedule=constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size*linear_decay,"
		  "learning_rate_warmup_steps=1000,learning_rate_decay_steps=2000",
		  8000, 9000, 2.0 / sqrt(8000.0) * rsqrt_h * 0.5 },
	};
	for (size_t i = 0; i < DT_ARRAY_LEN(cases); i++) {
		hp = set("transformer_tiny");
		DT_CHECK_OK(dt_hparams_parse(&hp, cases[i].overrides, &err), &err);
		DT_CHECK_OK(dt_hparams_validate(&hp, &err), &err);
		const double got = dt_lr_at(&hp, cases[i].step, cases[i].total);
		if (fabs(got - cases[i].want) > 1e-6 * fmax(1.0, fabs(cases[i].want)))
			dt_test_fail(__FILE__, __LINE__, "%s at step %lld of %lld: %.9g, want %.9g", cases[i].overrides, (long long)cases[i].step,
				(long long)cases[i].total, got, cases[i].want);
	}
}

/* ---- models ---------------------------------------------------------------------- */

static struct dt_model *new_model(const char *name, int H, int W, int C, int classes, int max_batch)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set(dt_hparams_default_set(name));
	struct dt_model *m = NULL;
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &hp, H, W, C, classes, max_batch, &m, &err), &err);
	return m;
}

DT_TEST(nn_model, registry_names_and_unknown_model)
{
	size_t n = 0;
	const char *const *names = dt_models_builtin_names(&n);
	DT_CHECK_INT_EQ(n, 4);
	DT_CHECK_STR_EQ(names[3], "transformer");
	DT_CHECK_STR_EQ(names[0], "mlp");
	DT_CHECK_STR_EQ(names[1], "lenet");
	DT_CHECK_STR_EQ(names[2], "cnn");
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("mlp_base");
	snprintf(hp.model, sizeof(hp.model), "lenett");
	struct dt_model *m = (struct dt_model *)&err; /* must be reset to NULL */
	DT_CHECK_INT_EQ(dt_model_new(&dt_models_builtin, &hp, 28, 28, 1, 10, 8, &m, &err), DT_USAGE);
	DT_CHECK(m == NULL);
	DT_CHECK_STR_EQ(err.msg, "unknown model 'lenett' (did you mean 'lenet'?); valid: mlp, lenet, cnn, transformer");
}

DT_TEST(nn_hparams, transformer_sets_have_t2ts_values_names_and_schedule)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("transformer_base");
	DT_CHECK_STR_EQ(hp.model, "transformer");
	DT_CHECK_INT_EQ(hp.num_hidden_layers, 6);
	DT_CHECK_INT_EQ(hp.hidden_size, 512);
	DT_CHECK_INT_EQ(hp.filter_size, 2048);
	DT_CHECK_INT_EQ(hp.num_heads, 8);
	DT_CHECK_INT_EQ(hp.batch_size, 4096);
	DT_CHECK_INT_EQ(hp.max_length, 256);
	DT_CHECK(hp.layer_prepostprocess_dropout == 0.1 && hp.attention_dropout == 0.1 && hp.relu_dropout == 0.1);
	DT_CHECK(hp.label_smoothing == 0.1 && hp.beta1 == 0.9 && hp.beta2 == 0.997 && hp.epsilon == 1e-9);
	DT_CHECK(hp.learning_rate_constant == 2.0 && hp.warmup_steps == 8000);
	DT_CHECK_STR_EQ(hp.lr_schedule, "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size");
	const int shapes[3][4] = { { 2, 128, 512, 4 }, { 2, 256, 1024, 4 }, { 2, 16, 8, 2 } };
	const char *names[3] = { "transformer_tiny", "transformer_small", "transformer_test" };
	for (int i = 0; i < 3; i++) {
		hp = set(names[i]);
		DT_CHECK_INT_EQ(hp.num_hidden_layers, shapes[i][0]);
		DT_CHECK_INT_EQ(hp.hidden_size, shapes[i][1]);
		DT_CHECK_INT_EQ(hp.filter_size, shapes[i][2]);
		DT_CHECK_INT_EQ(hp.num_heads, shapes[i][3]);
		DT_CHECK_INT_EQ(hp.batch_size, 4096);
	}
	DT_CHECK_OK(dt_hparams_parse(&hp, "learning_rate_warmup_steps=100,optimizer_adam_beta2=0.98,hidden_size=64,"
					  "learning_rate_schedule=constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size",
				     &err), &err);
	DT_CHECK_INT_EQ(hp.warmup_steps, 100);
	DT_CHECK(hp.beta2 == 0.98);
	DT_CHECK_OK(dt_hparams_validate(&hp, &err), &err);
	/* 2 * min(1, s / 100) * rsqrt(max(s, 100)) * rsqrt(64) */
	DT_CHECK_NEAR(dt_lr_at(&hp, 0, 1000), 0.0, 0);
	DT_CHECK_NEAR(dt_lr_at(&hp, 50, 1000), 2.0 * 0.5 / 10.0 / 8.0, 1e-7);
	DT_CHECK_NEAR(dt_lr_at(&hp, 100, 1000), 2.0 / 10.0 / 8.0, 1e-7);
	DT_CHECK_NEAR(dt_lr_at(&hp, 400, 1000), 2.0 / 20.0 / 8.0, 1e-7);
	struct dt_model *m = NULL;
	DT_CHECK(dt_model_new(&dt_models_builtin, &hp, 28, 28, 1, 10, 8, &m, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "reads text, not images");
}

struct want_var {
	const char *name;
	int ndim;
	int64_t shape[4];
};

static void check_variables(struct dt_model *m, const struct want_var *want, int count, size_t total)
{
	DT_CHECK_INT_EQ(dt_model_num_variables(m), count);
	DT_CHECK_INT_EQ(dt_model_num_params(m), total);
	size_t offset = 0;
	for (int i = 0; i < count; i++) {
		const struct dt_variable *v = dt_model_variable(m, i);
		DT_CHECK_STR_EQ(v->name, want[i].name);
		DT_CHECK_INT_EQ(v->ndim, want[i].ndim);
		size_t elems = 1;
		for (int d = 0; d < v->ndim; d++) {
			DT_CHECK_INT_EQ(v->shape[d], want[i].shape[d]);
			elems *= (size_t)v->shape[d];
		}
		DT_CHECK_INT_EQ(v->count, elems);
		DT_CHECK_INT_EQ(v->offset, offset); /* contiguous, in order */
		DT_CHECK_INT_EQ(dt_model_variable_is_kernel(m, i), strstr(v->name, "/kernel") != NULL);
		offset += v->count;
	}
	DT_CHECK_INT_EQ(offset, total);
}

DT_TEST(nn_model, mlp_variables)
{
	struct dt_model *m = new_model("mlp", 28, 28, 1, 10, 4);
	static const struct want_var want[] = {
		{ "dense_1/kernel", 2, { 784, 256 } }, { "dense_1/bias", 1, { 256 } },
		{ "dense_2/kernel", 2, { 256, 128 } }, { "dense_2/bias", 1, { 128 } },
		{ "dense_3/kernel", 2, { 128, 10 } },  { "dense_3/bias", 1, { 10 } },
	};
	check_variables(m, want, 6, 235146);
	char desc[128];
	dt_model_describe(m, desc, sizeof(desc));
	DT_CHECK_STR_EQ(desc, "mlp: 4 layers, 235146 parameters (918.5 KiB)");
	DT_CHECK_INT_EQ(dt_model_max_batch(m), 4);
	dt_model_free(m);
	dt_model_free(NULL);
}

DT_TEST(nn_model, lenet_variables_and_layers)
{
	struct dt_model *m = new_model("lenet", 28, 28, 1, 10, 4);
	static const struct want_var want[] = {
		{ "conv_1/kernel", 4, { 5, 5, 1, 6 } },  { "conv_1/bias", 1, { 6 } },
		{ "conv_2/kernel", 4, { 5, 5, 6, 16 } }, { "conv_2/bias", 1, { 16 } },
		{ "dense_1/kernel", 2, { 400, 120 } },   { "dense_1/bias", 1, { 120 } },
		{ "dense_2/kernel", 2, { 120, 84 } },    { "dense_2/bias", 1, { 84 } },
		{ "dense_3/kernel", 2, { 84, 10 } },     { "dense_3/bias", 1, { 10 } },
	};
	check_variables(m, want, 10, 61706);
	/* Each pool is fused into the conv layer before it. */
	static const char *const layers[] = { "conv_1", "conv_2", "flatten_1", "dense_1", "dense_2", "dense_3" };
	DT_CHECK_INT_EQ(dt_model_num_layers(m), 6);
	for (int i = 0; i < 6; i++)
		DT_CHECK_STR_EQ(dt_model_layer(m, i)->name, layers[i]);
	const struct dt_layer *c1 = dt_model_layer(m, 0), *c2 = dt_model_layer(m, 1);
	DT_CHECK(c1->relu && c1->pool && c1->geom.OH == 28 && c1->out.h == 14 && c1->out.w == 14 && c1->out.c == 6);
	DT_CHECK(c2->relu && c2->pool && c2->geom.OH == 10 && c2->out.h == 5 && c2->out.c == 16);
	DT_CHECK(!dt_model_layer(m, 5)->relu);
	char desc[128];
	dt_model_describe(m, desc, sizeof(desc));
	DT_CHECK_STR_EQ(desc, "lenet: 6 layers, 61706 parameters (241.0 KiB)");
	dt_model_free(m);
}

DT_TEST(nn_model, cnn_variables_and_dropout_layer)
{
	struct dt_model *m = new_model("cnn", 28, 28, 1, 10, 4);
	static const struct want_var want[] = {
		{ "conv_1/kernel", 4, { 3, 3, 1, 32 } },  { "conv_1/bias", 1, { 32 } },
		{ "conv_2/kernel", 4, { 3, 3, 32, 64 } }, { "conv_2/bias", 1, { 64 } },
		{ "dense_1/kernel", 2, { 3136, 128 } },   { "dense_1/bias", 1, { 128 } },
		{ "dense_2/kernel", 2, { 128, 10 } },     { "dense_2/bias", 1, { 10 } },
	};
	check_variables(m, want, 8, 421642);
	int dropouts = 0;
	for (int i = 0; i < dt_model_num_layers(m); i++)
		if (dt_model_layer(m, i)->kind == DT_LAYER_DROPOUT) {
			dropouts++;
			DT_CHECK_NEAR(dt_model_layer(m, i)->rate, 0.3, 1e-7);
		}
	DT_CHECK_INT_EQ(dropouts, 1);
	dt_model_free(m);
}

DT_TEST(nn_model, input_shape_and_classes_come_from_the_arguments)
{
	struct dt_model *m = new_model("mlp", 8, 4, 3, 7, 2);
	DT_CHECK_INT_EQ(dt_model_variable(m, 0)->shape[0], 96);
	DT_CHECK_INT_EQ(dt_model_variable(m, 5)->shape[0], 7);
	dt_model_free(m);
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("lenet_base");
	DT_CHECK_INT_EQ(dt_model_new(&dt_models_builtin, &hp, 8, 8, 1, 10, 4, &m, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "cannot build model 'lenet' for input (8, 8, 1)");
	DT_CHECK_CONTAINS(err.msg, "conv_2");
	DT_CHECK_INT_EQ(dt_model_new(&dt_models_builtin, &hp, 28, 28, 1, 1, 4, &m, &err), DT_CONFIG);
	DT_CHECK_INT_EQ(dt_model_new(&dt_models_builtin, &hp, 28, 28, 1, 10, 0, &m, &err), DT_CONFIG);
}

DT_TEST(nn_model, layer_constructors_reject_shapes_that_do_not_fit)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_layer l;
	DT_CHECK_INT_EQ(dt_layer_dense(&l, "dense_1", (struct dt_shape){ 1, 1, 4 }, 0, 0, &err), DT_CONFIG);
	DT_CHECK_INT_EQ(dt_layer_conv2d(&l, "conv_1", (struct dt_shape){ 3, 3, 1 }, 5, 5, 4, 1, 0, 0, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "layer 'conv_1': a 5x5 window with stride 1 and padding 0 does not fit input (3, 3, 1)");
	DT_CHECK_INT_EQ(dt_layer_maxpool2(&l, "pool_1", (struct dt_shape){ 1, 6, 2 }, &err), DT_CONFIG);
	DT_CHECK_INT_EQ(dt_layer_dropout(&l, "dropout_1", (struct dt_shape){ 1, 1, 4 }, 1.0f, &err), DT_CONFIG);
	DT_CHECK_OK(dt_layer_maxpool2(&l, "pool_1", (struct dt_shape){ 5, 7, 2 }, &err), &err);
	DT_CHECK(l.out.h == 2 && l.out.w == 3 && l.out.c == 2);
}

/* ---- initializers ---------------------------------------------------------------- */

static void moments(const float *p, size_t n, double *mean, double *std, double *maxabs)
{
	double s = 0, s2 = 0, mx = 0;
	for (size_t i = 0; i < n; i++) {
		s += (double)p[i];
		s2 += (double)p[i] * (double)p[i];
		mx = fmax(mx, fabs((double)p[i]));
	}
	*mean = s / (double)n;
	*std = sqrt(s2 / (double)n - *mean * *mean);
	*maxabs = mx;
}

DT_TEST(nn_model, initializers_he_for_relu_glorot_otherwise_zero_biases)
{
	struct dt_model *m = new_model("mlp", 28, 28, 1, 10, 1);
	dt_model_init_params(m, 42);
	const float *p = dt_model_params(m);
	double mean, std, mx;
	/* dense_1/kernel (784, 256), followed by ReLU: He-normal, truncated at 2 sigma. */
	const struct dt_variable *v = dt_model_variable(m, 0);
	moments(p + v->offset, v->count, &mean, &std, &mx);
	const double he = sqrt(2.0 / 784);
	DT_CHECK_NEAR(mean, 0, 0.01 * he);
	DT_CHECK_NEAR(std, he, 0.02 * he);
	DT_CHECK(mx <= 2 * he / 0.87962566103423978 * 1.0001);
	/* dense_3/kernel (128, 10), no ReLU: Glorot-uniform. */
	v = dt_model_variable(m, 4);
	moments(p + v->offset, v->count, &mean, &std, &mx);
	const double limit = sqrt(6.0 / (128 + 10));
	DT_CHECK(mx <= limit);
	DT_CHECK(mx > 0.95 * limit);
	DT_CHECK_NEAR(std, limit / sqrt(3.0), 0.1 * limit);
	for (int i = 1; i < 6; i += 2) {
		v = dt_model_variable(m, i);
		for (size_t j = 0; j < v->count; j++)
			DT_CHECK(p[v->offset + j] == 0.0f);
	}
	dt_model_free(m);
}

DT_TEST(nn_model, init_is_seeded_per_variable)
{
	struct dt_model *a = new_model("lenet", 28, 28, 1, 10, 1), *b = new_model("lenet", 28, 28, 1, 10, 1);
	dt_model_init_params(a, 7);
	dt_model_init_params(b, 7);
	const size_t n = dt_model_num_params(a);
	DT_CHECK(memcmp(dt_model_params(a), dt_model_params(b), n * sizeof(float)) == 0);
	dt_model_init_params(b, 8);
	DT_CHECK(memcmp(dt_model_params(a), dt_model_params(b), n * sizeof(float)) != 0);
	dt_model_free(a);
	dt_model_free(b);
	/* A variable's values depend only on its name and the seed: the mlp
	 * with dropout layers has the same variables and the same values. */
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("mlp_base");
	struct dt_model *plain, *dropped;
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &hp, 28, 28, 1, 10, 2, &plain, &err), &err);
	hp.dropout = 0.3;
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &hp, 28, 28, 1, 10, 2, &dropped, &err), &err);
	DT_CHECK(dt_model_num_layers(dropped) == dt_model_num_layers(plain) + 2);
	dt_model_init_params(plain, 3);
	dt_model_init_params(dropped, 3);
	DT_CHECK_INT_EQ(dt_model_num_params(plain), dt_model_num_params(dropped));
	DT_CHECK(memcmp(dt_model_params(plain), dt_model_params(dropped), dt_model_num_params(plain) * sizeof(float)) == 0);
	dt_model_free(plain);
	dt_model_free(dropped);
}

/* ---- training steps ---------------------------------------------------------------- */

/* Ten classes of 8x8 images: a fixed random prototype per class plus noise. */
struct synth {
	float proto[10][64];
	struct dt_rng rng;
};

static void synth_init(struct synth *s, uint64_t seed)
{
	dt_rng_seed(&s->rng, seed);
	for (int k = 0; k < 10; k++)
		for (int i = 0; i < 64; i++)
			s->proto[k][i] = dt_rng_normal(&s->rng);
}

static void synth_batch(struct synth *s, float *x, uint8_t *y, int B)
{
	for (int b = 0; b < B; b++) {
		int k = (int)dt_rng_below(&s->rng, 10);
		y[b] = (uint8_t)k;
		for (int i = 0; i < 64; i++)
			x[b * 64 + i] = s->proto[k][i] + 1.5f * dt_rng_normal(&s->rng);
	}
}

static void check_learns(const char *name, int steps)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set(dt_hparams_default_set(name));
	const int B = 32, H = 8;
	struct dt_model *m;
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &hp, H, H, 1, 10, B, &m, &err), &err);
	dt_model_init_params(m, 1);
	struct dt_optimizer opt;
	DT_CHECK_OK(dt_optimizer_init(&opt, &hp, dt_model_num_params(m), &err), &err);
	struct synth s;
	synth_init(&s, 11);
	float x[32 * 64];
	uint8_t y[32];
	struct dt_rng drop;
	dt_rng_seed(&drop, 2);
	double first = 0, last = 0;
	for (int step = 1; step <= steps; step++) {
		synth_batch(&s, x, y, B);
		float loss = dt_model_train_batch(m, x, y, B, &drop, NULL);
		DT_CHECK(isfinite(loss));
		if (step <= 10)
			first += (double)loss / 10.0;
		if (step > steps - 10)
			last += (double)loss / 10.0;
		dt_optimizer_apply(&opt, dt_model_params(m), dt_model_grads(m), 0, dt_model_num_params(m),
				   hp.learning_rate, step);
	}
	int correct_total = 0;
	for (int i = 0; i < 10; i++) {
		int c = 0;
		synth_batch(&s, x, y, B);
		dt_model_eval_batch(m, x, y, B, &c);
		correct_total += c;
	}
	double acc = correct_total / 320.0;
	if (!(last < 0.25 * first && acc >= 0.9))
		dt_test_fail(__FILE__, __LINE__, "%s did not learn: loss %.3f -> %.3f, held-out accuracy %.3f", name, first,
			     last, acc);
	dt_optimizer_release(&opt);
	dt_model_free(m);
}

DT_TEST_TIMEOUT(nn_model, mlp_learns_a_separable_problem, 60)
{
	check_learns("mlp", 150);
}

DT_TEST_TIMEOUT(nn_model, cnn_learns_a_separable_problem, 60)
{
	check_learns("cnn", 300); /* dropout slows it down */
}

DT_TEST_TIMEOUT(nn_model, lenet_learns_a_separable_problem, 60)
{
	/* LeNet needs inputs of at least 12x12: the 8x8 problem upsampled by 2. */
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp = set("lenet_base");
	const int B = 32;
	struct dt_model *m;
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &hp, 16, 16, 1, 10, B, &m, &err), &err);
	dt_model_init_params(m, 1);
	struct dt_optimizer opt;
	DT_CHECK_OK(dt_optimizer_init(&opt, &hp, dt_model_num_params(m), &err), &err);
	struct synth s;
	synth_init(&s, 12);
	float small[32 * 64], x[32 * 256];
	uint8_t y[32];
	double first = 0, last = 0;
	const int steps = 200;
	for (int step = 1; step <= steps + 10; step++) {
		synth_batch(&s, small, y, B);
		for (int b = 0; b < B; b++)
			for (int i = 0; i < 16; i++)
				for (int j = 0; j < 16; j++)
					x[b * 256 + i * 16 + j] = small[b * 64 + (i / 2) * 8 + j / 2];
		if (step > steps) { /* held out */
			int c = 0;
			last += (double)dt_model_eval_batch(m, x, y, B, &c) / 10.0;
			continue;
		}
		float loss = dt_model_train_batch(m, x, y, B, NULL, NULL);
		if (step <= 10)
			first += (double)loss / 10.0;
		dt_optimizer_apply(&opt, dt_model_params(m), dt_model_grads(m), 0, dt_model_num_params(m),
				   hp.learning_rate, step);
	}
	if (!(last < 0.25 * first))
		dt_test_fail(__FILE__, __LINE__, "lenet did not learn: loss %.3f -> held-out %.3f", first, last);
	dt_optimizer_release(&opt);
	dt_model_free(m);
}

DT_TEST(nn_model, train_batch_is_deterministic_and_overwrites_gradients)
{
	struct dt_model *a = new_model("cnn", 12, 12, 1, 10, 8), *b = new_model("cnn", 12, 12, 1, 10, 8);
	dt_model_init_params(a, 5);
	dt_model_init_params(b, 5);
	float x[8 * 144];
	uint8_t y[8];
	struct dt_rng r;
	dt_rng_seed(&r, 9);
	for (int i = 0; i < 8 * 144; i++)
		x[i] = dt_rng_normal(&r);
	for (int i = 0; i < 8; i++)
		y[i] = (uint8_t)i;
	struct dt_rng da, db;
	dt_rng_seed(&da, 1);
	dt_rng_seed(&db, 1);
	int ca = -1, cb = -1;
	float la = dt_model_train_batch(a, x, y, 8, &da, &ca);
	float lb = dt_model_train_batch(b, x, y, 8, &db, &cb);
	const size_t n = dt_model_num_params(a);
	DT_CHECK(la == lb);
	DT_CHECK_INT_EQ(ca, cb);
	DT_CHECK(memcmp(dt_model_grads(a), dt_model_grads(b), n * sizeof(float)) == 0);
	/* The same step again gives the same gradient, not twice it. */
	dt_rng_seed(&da, 1);
	float la2 = dt_model_train_batch(a, x, y, 8, &da, NULL);
	DT_CHECK(la2 == la);
	DT_CHECK(memcmp(dt_model_grads(a), dt_model_grads(b), n * sizeof(float)) == 0);
	/* A smaller batch than max_batch works, and eval leaves gradients alone. */
	int c = -1;
	float le = dt_model_eval_batch(a, x, y, 3, &c);
	DT_CHECK(isfinite(le) && c >= 0 && c <= 3);
	DT_CHECK(memcmp(dt_model_grads(a), dt_model_grads(b), n * sizeof(float)) == 0);
	/* correct counts arg-max hits of the logits. */
	const float *z = dt_model_logits(a);
	int hits = 0;
	for (int i = 0; i < 3; i++) {
		int best = 0;
		for (int k = 1; k < 10; k++)
			if (z[i * 10 + k] > z[i * 10 + best])
				best = k;
		hits += best == y[i];
	}
	DT_CHECK_INT_EQ(c, hits);
	dt_model_free(a);
	dt_model_free(b);
}

DT_TEST(nn_model, dropout_is_off_in_eval_and_on_in_training)
{
	struct dt_model *m = new_model("cnn", 8, 8, 1, 10, 4);
	dt_model_init_params(m, 5);
	float x[4 * 64];
	uint8_t y[4] = { 0, 1, 2, 3 };
	for (int i = 0; i < 4 * 64; i++)
		x[i] = (float)(i % 7) - 3.0f;
	float e1 = dt_model_eval_batch(m, x, y, 4, NULL);
	float e2 = dt_model_eval_batch(m, x, y, 4, NULL);
	DT_CHECK(e1 == e2);
	struct dt_rng r1, r2;
	dt_rng_seed(&r1, 1);
	dt_rng_seed(&r2, 2);
	float t1 = dt_model_train_batch(m, x, y, 4, &r1, NULL);
	float t2 = dt_model_train_batch(m, x, y, 4, &r2, NULL);
	DT_CHECK(t1 != t2); /* different masks */
	DT_CHECK(t1 != e1);
	dt_model_free(m);
}
