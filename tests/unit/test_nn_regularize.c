/*
 * Keras's regularizers and constraints (nn/regularize.h) on a tiny Keras
 * model: the loss is the data loss of the same model without them plus
 * the penalty computed here by hand (kernel L1L2, bias L2, an activity
 * L1L2 divided by the batch in Keras 2's flavour and not in Keras 3's), the
 * penalty is reported apart, and its gradient passes a finite-difference
 * check; the constraints project as Keras's formulas say, and a model with
 * one carries it to dt_model_apply_constraints. Refused spellings name the
 * field.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "grad_check.h"
#include "base/alloc.h"
#include "base/atomic_file.h"
#include "nn/keras.h"
#include "nn/model.h"
#include "nn/regularize.h"

enum { RB = 4, IN = 5, HID = 3, OUT = 2 };

/* x (RB, IN) -> dense "h" (HID, tanh) -> dense "out" (OUT, softmax). Keras 2
 * (tf.keras 2.15) or Keras 3 spellings; `regs` 0 leaves every regularizer out. */
static void model_json(char *buf, size_t cap, int keras3, int regs)
{
	const char *mod = keras3 ? "\"module\": \"keras.regularizers\", \"registered_name\": null, " : "";
	char kreg[200], breg[200], areg[200], oreg[200];
	snprintf(kreg, sizeof(kreg), "{%s\"class_name\": \"L1L2\", \"config\": {\"l1\": 0.01, \"l2\": 0.02}}", mod);
	snprintf(breg, sizeof(breg), "{%s\"class_name\": \"L2\", \"config\": {\"l2\": 0.03}}", mod);
	snprintf(areg, sizeof(areg), "{%s\"class_name\": \"L1L2\", \"config\": {\"l1\": 0.05, \"l2\": 0.04}}", mod);
	snprintf(oreg, sizeof(oreg), "{%s\"class_name\": \"L1\", \"config\": {\"l1\": 0.02}}", mod);
	snprintf(buf, cap,
		 "{%s\"class_name\": \"Sequential\", \"config\": {\"name\": \"r\", \"layers\": ["
		 "{\"class_name\": \"InputLayer\", \"config\": {\"name\": \"in\", \"batch_input_shape\": [null, %d]}},"
		 "{\"class_name\": \"Dense\", \"config\": {\"name\": \"h\", \"units\": %d, \"activation\": \"tanh\", "
		 "\"kernel_regularizer\": %s, \"bias_regularizer\": %s, \"activity_regularizer\": %s, "
		 "\"kernel_constraint\": null, \"dtype\": \"float32\"}},"
		 "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": %d, \"activation\": \"softmax\", "
		 "\"kernel_regularizer\": %s, \"bias_regularizer\": null}}]}%s}",
		 keras3 ? "\"module\": \"keras\", \"registered_name\": null, " : "", IN, HID, regs ? kreg : "null",
		 regs ? breg : "null", regs ? areg : "null", OUT, regs ? oreg : "null",
		 keras3 ? "" : ", \"keras_version\": \"2.15.0\", \"backend\": \"tensorflow\"");
}

static struct dt_model *load(int keras3, int regs)
{
	char json[4096];
	model_json(json, sizeof(json), keras3, regs);
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = NULL;
	struct dt_model *m = NULL;
	DT_CHECK_OK(dt_keras_parse(json, strlen(json), "reg.json", &g, NULL, &err), &err);
	if (g)
		DT_CHECK_OK(dt_model_from_graph(g, "reg", RB, &m, &err), &err);
	dt_graph_free(g);
	return m;
}

struct fixture {
	struct dt_model *m;
	float x[RB * IN];
	int32_t labels[RB];
	struct dt_model_batch batch;
};

static void fixture_init(struct fixture *f, struct dt_model *m)
{
	f->m = m;
	float *x = random_floats(RB * IN, 11, 1.0f);
	memcpy(f->x, x, sizeof(f->x));
	free(x);
	for (int b = 0; b < RB; b++)
		f->labels[b] = b % OUT;
	f->batch = (struct dt_model_batch){ .size = RB, .num_inputs = 1 };
	f->batch.inputs[0] = (struct dt_data){ DT_FLOAT32, f->x };
	f->batch.targets = (struct dt_data){ DT_INT32, f->labels };
	dt_model_init_params(m, 5);
	float *p = dt_model_params(m);
	for (size_t i = 0; i < dt_model_num_params(m); i++) { /* non-zero biases; none at L1's kink, 0 */
		p[i] += 0.05f * (float)((int)(i % 5) - 2);
		if (fabsf(p[i]) < 0.01f)
			p[i] = 0.03f;
	}
}

static double eval_loss(void *ctx)
{
	struct fixture *f = ctx;
	struct dt_step_result r;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_model_evaluate(f->m, &f->batch, &r, &err), &err);
	return r.loss;
}

static double l1l2(const float *v, size_t n, double l1, double l2)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += l1 * fabs((double)v[i]) + l2 * (double)v[i] * (double)v[i];
	return s;
}

/* The penalty by hand: h's kernel and bias, out's kernel, h's output. */
static double hand_penalty(const struct fixture *f, int keras3)
{
	const float *p = dt_model_params(f->m);
	const float *hk = p, *hb = p + IN * HID, *ok = hb + HID;
	double s = l1l2(hk, IN * HID, 0.01, 0.02) + l1l2(hb, HID, 0.0, 0.03) + l1l2(ok, HID * OUT, 0.02, 0.0);
	double act = 0;
	for (int b = 0; b < RB; b++)
		for (int j = 0; j < HID; j++) {
			double z = hb[j];
			for (int i = 0; i < IN; i++)
				z += (double)f->x[b * IN + i] * (double)hk[i * HID + j];
			const double h = tanh(z);
			act += 0.05 * fabs(h) + 0.04 * h * h;
		}
	return s + (keras3 ? act : act / RB);
}

static void loss_is_data_loss_plus_penalty(int keras3)
{
	struct dt_model *m = load(keras3, 1), *plain = load(keras3, 0);
	if (!m || !plain) {
		dt_model_free(m);
		dt_model_free(plain);
		return;
	}
	DT_CHECK(dt_model_has_regularizers(m) && !dt_model_has_regularizers(plain));
	DT_CHECK_INT_EQ((int)dt_model_num_params(m), (int)dt_model_num_params(plain));
	struct fixture f, g;
	fixture_init(&f, m);
	fixture_init(&g, plain);
	memcpy(dt_model_params(plain), dt_model_params(m), dt_model_num_params(m) * sizeof(float));
	const double data = eval_loss(&g), penalty = hand_penalty(&f, keras3);
	struct dt_step_result r;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_model_evaluate(m, &f.batch, &r, &err), &err);
	DT_CHECK(penalty > 0.01);
	DT_CHECK_NEAR(r.reg_loss, penalty, 1e-5 * penalty);
	DT_CHECK_NEAR(r.loss, data + penalty, 1e-5 * (data + penalty));
	/* training reports the same, and its gradient is the loss's */
	struct dt_rng rng;
	dt_rng_seed(&rng, 1);
	DT_CHECK_OK(dt_model_step(m, &f.batch, &rng, NULL, NULL, &r, &err), &err);
	DT_CHECK_NEAR(r.loss, data + penalty, 1e-5 * (data + penalty));
	DT_CHECK_NEAR(dt_model_last_reg_loss(m), penalty, 1e-5 * penalty);
	const size_t np = dt_model_num_params(m);
	float *grads = dt_xmalloc(np * sizeof(float));
	memcpy(grads, dt_model_grads(m), np * sizeof(float));
	for (int v = 0; v < dt_model_num_variables(m); v++) {
		const struct dt_variable *var = dt_model_variable(m, v);
		char what[DT_VAR_NAME_MAX + 16];
		snprintf(what, sizeof(what), "keras %d %s", keras3 ? 3 : 2, var->name);
		/* skip_kinks: an activation near L1's kink at 0 */
		const double agg = check_array(what, dt_model_params(m) + var->offset, var->count, grads + var->offset,
					       eval_loss, &f, 0.05, 1e-3, 1);
		if (!(agg <= 1e-2))
			dt_test_fail(__FILE__, __LINE__, "%s: aggregate relative error %.3g > 1e-2", what, agg);
	}
	free(grads);
	dt_model_free(m);
	dt_model_free(plain);
}

DT_TEST(nn_regularize, keras2_loss_is_the_hand_penalty_and_its_gradient_checks)
{
	loss_is_data_loss_plus_penalty(0);
}

DT_TEST(nn_regularize, keras3_loss_is_the_hand_penalty_and_its_gradient_checks)
{
	loss_is_data_loss_plus_penalty(1);
}

/* Keras 3's OrthogonalRegularizer on h's kernel (IN, HID), by hand. */
static double hand_orthogonal(const float *w, int rows, int cols, int by_cols, double factor)
{
	const int n = by_cols ? cols : rows, d = by_cols ? rows : cols;
	double u[IN * HID], sum = 0;
	for (int i = 0; i < n; i++) {
		double q = 0;
		for (int k = 0; k < d; k++) {
			const double v = by_cols ? w[k * cols + i] : w[i * cols + k];
			q += v * v;
		}
		for (int k = 0; k < d; k++)
			u[i * d + k] = (double)(by_cols ? w[k * cols + i] : w[i * cols + k]) / fmax(sqrt(q), 1e-7);
	}
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			double p = 0;
			for (int k = 0; k < d && i != j; k++)
				p += u[i * d + k] * u[j * d + k];
			sum += fabs(p);
		}
	return factor * 0.5 * sum / (n * (n - 1.0) / 2.0);
}

static struct dt_model *load_orthogonal(const char *mode, int on)
{
	char json[2048], reg[200];
	snprintf(reg, sizeof(reg),
		 "{\"module\": \"keras.regularizers\", \"class_name\": \"OrthogonalRegularizer\", \"config\": "
		 "{\"factor\": 0.3, \"mode\": \"%s\"}, \"registered_name\": null}",
		 mode);
	snprintf(json, sizeof(json),
		 "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"o\", \"layers\": ["
		 "{\"class_name\": \"InputLayer\", \"config\": {\"name\": \"in\", \"batch_shape\": [null, %d]}},"
		 "{\"class_name\": \"Dense\", \"config\": {\"name\": \"h\", \"units\": %d, \"activation\": \"tanh\", "
		 "\"kernel_regularizer\": %s}},"
		 "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": %d, \"activation\": \"softmax\"}}"
		 "]}}",
		 IN, HID, on ? reg : "null", OUT);
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = NULL;
	struct dt_model *m = NULL;
	DT_CHECK_OK(dt_keras_parse(json, strlen(json), "orth.json", &g, NULL, &err), &err);
	if (g)
		DT_CHECK_OK(dt_model_from_graph(g, "orth", RB, &m, &err), &err);
	dt_graph_free(g);
	return m;
}

DT_TEST(nn_regularize, orthogonal_regularizer_is_keras3s_and_its_gradient_checks)
{
	static const char *const modes[2] = { "rows", "columns" };
	for (int c = 0; c < 2; c++) {
		struct dt_model *m = load_orthogonal(modes[c], 1), *plain = load_orthogonal(modes[c], 0);
		if (!m || !plain) {
			dt_model_free(m);
			dt_model_free(plain);
			return;
		}
		struct fixture f, g;
		fixture_init(&f, m);
		fixture_init(&g, plain);
		memcpy(dt_model_params(plain), dt_model_params(m), dt_model_num_params(m) * sizeof(float));
		const double data = eval_loss(&g);
		const double want = hand_orthogonal(dt_model_params(m), IN, HID, c, 0.3);
		struct dt_step_result r;
		struct dt_err err = DT_ERR_INIT;
		DT_CHECK_OK(dt_model_evaluate(m, &f.batch, &r, &err), &err);
		DT_CHECK(want > 1e-3);
		DT_CHECK_NEAR(r.reg_loss, want, 1e-5 * want);
		DT_CHECK_NEAR(r.loss, data + want, 1e-5 * (data + want));
		struct dt_rng rng;
		dt_rng_seed(&rng, 1);
		DT_CHECK_OK(dt_model_step(m, &f.batch, &rng, NULL, NULL, &r, &err), &err);
		const struct dt_variable *k = dt_model_variable(m, 0);
		float *grads = dt_xmalloc(k->count * sizeof(float));
		memcpy(grads, dt_model_grads(m) + k->offset, k->count * sizeof(float));
		char what[64];
		snprintf(what, sizeof(what), "orthogonal %s h/kernel", modes[c]);
		const double agg = check_array(what, dt_model_params(m) + k->offset, k->count, grads, eval_loss, &f, 0.05,
					       1e-3, 1);
		if (!(agg <= 1e-2))
			dt_test_fail(__FILE__, __LINE__, "%s: aggregate relative error %.3g > 1e-2", what, agg);
		free(grads);
		dt_model_free(m);
		dt_model_free(plain);
	}
}

DT_TEST(nn_regularize, constraints_project_as_keras_says)
{
	/* a (3, 2) kernel: Keras's default axis 0 is one norm per column */
	const int64_t shape[2] = { 3, 2 };
	float w[6] = { 3, 0.1f, 4, 0.2f, 0, -0.2f }; /* column norms 5 and 0.3 */
	struct dt_constraint c = { .kind = DT_CONSTRAINT_MAX_NORM, .max_value = 2.0f, .axes = 1 };
	dt_constraint_apply(&c, w, 2, shape);
	DT_CHECK_NEAR(w[0], 3 * 2 / (5 + 1e-7), 1e-6);
	DT_CHECK_NEAR(w[2], 4 * 2 / (5 + 1e-7), 1e-6);
	DT_CHECK_NEAR(w[1], 0.1 * 0.3 / (0.3 + 1e-7), 1e-6); /* under the bound: (nearly) unchanged */
	float u[6] = { 3, 0.1f, 4, 0.2f, 0, -0.2f };
	c = (struct dt_constraint){ .kind = DT_CONSTRAINT_UNIT_NORM, .axes = 2 }; /* axis 1: one norm per row */
	dt_constraint_apply(&c, u, 2, shape);
	DT_CHECK_NEAR(u[0], 3 / (sqrt(9.01) + 1e-7), 1e-6);
	DT_CHECK_NEAR(u[5], -1.0, 1e-5);
	float mm[6] = { 3, 0.1f, 4, 0.2f, 0, -0.2f };
	c = (struct dt_constraint){ .kind = DT_CONSTRAINT_MIN_MAX_NORM, .min_value = 1, .max_value = 4, .rate = 0.5f,
				    .axes = 1 };
	dt_constraint_apply(&c, mm, 2, shape);
	DT_CHECK_NEAR(mm[0], 3 * (0.5 * 4 + 0.5 * 5) / (5 + 1e-7), 1e-5);
	DT_CHECK_NEAR(mm[1], 0.1 * (0.5 * 1 + 0.5 * 0.3) / (0.3 + 1e-7), 1e-5);
	float nn[3] = { -1, 0, 2 };
	c = (struct dt_constraint){ .kind = DT_CONSTRAINT_NON_NEG };
	dt_constraint_apply(&c, nn, 1, (const int64_t[]){ 3 });
	DT_CHECK(nn[0] == 0.0f && nn[1] == 0.0f && nn[2] == 2.0f);
	/* a conv kernel (KH, KW, C, OC) over axes [0, 1, 2]: one norm per filter */
	float k[2 * 2 * 1 * 2];
	for (int i = 0; i < 8; i++)
		k[i] = (float)(i + 1);
	c = (struct dt_constraint){ .kind = DT_CONSTRAINT_UNIT_NORM, .axes = 7 };
	dt_constraint_apply(&c, k, 4, (const int64_t[]){ 2, 2, 1, 2 });
	double n0 = 0, n1 = 0;
	for (int i = 0; i < 8; i += 2) {
		n0 += (double)k[i] * (double)k[i];
		n1 += (double)k[i + 1] * (double)k[i + 1];
	}
	DT_CHECK_NEAR(n0, 1.0, 1e-5);
	DT_CHECK_NEAR(n1, 1.0, 1e-5);
}

DT_TEST(nn_regularize, a_keras_constraint_reaches_the_model_and_refusals_name_the_field)
{
	static const char json[] =
		"{\"class_name\": \"Sequential\", \"config\": {\"name\": \"c\", \"layers\": ["
		"{\"class_name\": \"InputLayer\", \"config\": {\"name\": \"in\", \"batch_input_shape\": [null, 4]}},"
		"{\"class_name\": \"Dense\", \"config\": {\"name\": \"h\", \"units\": 3, "
		"\"kernel_constraint\": {\"class_name\": \"MaxNorm\", \"config\": {\"max_value\": 0.1, \"axis\": 0}}, "
		"\"bias_constraint\": {\"class_name\": \"NonNeg\", \"config\": {}}}},"
		"{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 2, \"activation\": \"softmax\"}}]}}";
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = NULL;
	struct dt_model *m = NULL;
	DT_CHECK_OK(dt_keras_parse(json, sizeof(json) - 1, "c.json", &g, NULL, &err), &err);
	if (g)
		DT_CHECK_OK(dt_model_from_graph(g, "c", 2, &m, &err), &err);
	dt_graph_free(g);
	if (!m)
		return;
	const char *node = NULL, *field = NULL;
	DT_CHECK(dt_model_has_constraints(m, &node, &field));
	DT_CHECK_STR_EQ(node, "h");
	DT_CHECK_STR_EQ(field, "kernel_constraint");
	dt_model_init_params(m, 3);
	float *p = dt_model_params(m);
	p[4 * 3] = -0.5f; /* h/bias[0] */
	dt_model_apply_constraints(m);
	for (int j = 0; j < 3; j++) {
		double n = 0;
		for (int i = 0; i < 4; i++)
			n += (double)p[i * 3 + j] * (double)p[i * 3 + j];
		DT_CHECK(sqrt(n) <= 0.1 + 1e-6);
	}
	DT_CHECK(p[4 * 3] == 0.0f);
	dt_model_free(m);

	/* no bias, as Keras: its bias_regularizer and bias_constraint are ignored */
	static const char nobias[] =
		"{\"class_name\": \"Sequential\", \"config\": {\"name\": \"c\", \"layers\": ["
		"{\"class_name\": \"InputLayer\", \"config\": {\"name\": \"in\", \"batch_input_shape\": [null, 4]}},"
		"{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 2, \"use_bias\": false, "
		"\"bias_regularizer\": {\"class_name\": \"L2\", \"config\": {\"l2\": 0.1}}, "
		"\"bias_constraint\": {\"class_name\": \"NonNeg\", \"config\": {}}}}]}}";
	g = NULL;
	DT_CHECK_OK(dt_keras_parse(nobias, sizeof(nobias) - 1, "nobias.json", &g, NULL, &err), &err);
	dt_graph_free(g);

	static const struct {
		const char *field, *needle;
	} bad[] = {
		{ "\"bias_regularizer\": {\"class_name\": \"OrthogonalRegularizer\", \"config\": {\"factor\": 0.01}}",
		  "field 'bias_regularizer' is an OrthogonalRegularizer (supported on a Dense kernel_regularizer only" },
		{ "\"kernel_regularizer\": {\"class_name\": \"L1L2Plus\", \"config\": {}}",
		  "field 'kernel_regularizer' is regularizer 'L1L2Plus' (supported: L1, L2, L1L2, OrthogonalRegularizer)" },
		{ "\"kernel_constraint\": {\"class_name\": \"RadialConstraint\", \"config\": {}}",
		  "field 'kernel_constraint' is constraint 'RadialConstraint' (supported: MaxNorm, NonNeg" },
		{ "\"kernel_constraint\": {\"class_name\": \"MaxNorm\", \"config\": {\"axis\": 2}}",
		  "field 'kernel_constraint': 'axis' must be integers from -2 to 1" },
		{ "\"kernel_regularizer\": {\"class_name\": \"L2\", \"config\": {\"l2\": -1}}",
		  "field 'kernel_regularizer': 'l2' is -1" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char text[1024];
		snprintf(text, sizeof(text),
			 "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"c\", \"layers\": ["
			 "{\"class_name\": \"InputLayer\", \"config\": {\"name\": \"in\", \"batch_input_shape\": [null, 4]}},"
			 "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 2, %s}}]}}",
			 bad[i].field);
		g = NULL;
		DT_CHECK(dt_keras_parse(text, strlen(text), "bad.json", &g, NULL, &err) == DT_USAGE);
		DT_CHECK_CONTAINS(err.msg, "layer 'out' (Dense)");
		DT_CHECK_CONTAINS(err.msg, bad[i].needle);
		dt_graph_free(g);
	}
}

/* The case: a MobileNetV2 whose head carries Keras 2.2.4's L2 (an
 * L1L2 with l1 0) loads, and its penalty is 0.01 * sum k^2 of the head. */
DT_TEST(nn_regularize, mobilenet_v2_with_an_l2_head_in_keras_2_2_4s_spelling)
{
	char *text = NULL;
	size_t len = 0;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_read_file("tests/fixtures/keras/mobilenet_v2_k3.json", (size_t)16 << 20, &text, &len, &err), &err);
	if (!text)
		return;
	/* the last Dense is the head: its kernel_regularizer */
	const char *key = "\"kernel_regularizer\": null";
	char *at = NULL;
	for (char *p = strstr(text, key); p; p = strstr(p + 1, key))
		at = p;
	DT_CHECK(at != NULL);
	if (!at) {
		free(text);
		return;
	}
	const char *l2 = "\"kernel_regularizer\": {\"class_name\": \"L1L2\", \"config\": {\"l1\": 0.0, \"l2\": 0.01}}";
	char *json = dt_xmalloc(len + strlen(l2) + 1);
	const size_t head = (size_t)(at - text);
	memcpy(json, text, head);
	strcpy(json + head, l2);
	strcat(json, at + strlen(key));
	free(text);
	struct dt_graph *g = NULL;
	struct dt_model *m = NULL;
	DT_CHECK_OK(dt_keras_parse(json, strlen(json), "mbv2_l2.json", &g, NULL, &err), &err);
	free(json);
	if (g)
		DT_CHECK_OK(dt_model_from_graph(g, "mbv2", 2, &m, &err), &err);
	dt_graph_free(g);
	if (!m)
		return;
	dt_model_init_params(m, 4);
	const struct dt_variable *k = NULL;
	for (int v = 0; v < dt_model_num_variables(m); v++)
		if (strcmp(dt_model_variable(m, v)->name, "predictions/kernel") == 0)
			k = dt_model_variable(m, v);
	DT_CHECK(k != NULL);
	float *x = random_floats(2 * 32 * 32 * 3, 9, 1.0f);
	int32_t labels[2] = { 0, 3 };
	struct dt_model_batch b = { .size = 2, .num_inputs = 1 };
	b.inputs[0] = (struct dt_data){ DT_FLOAT32, x };
	b.targets = (struct dt_data){ DT_INT32, labels };
	struct dt_step_result r;
	DT_CHECK_OK(dt_model_evaluate(m, &b, &r, &err), &err);
	if (k) {
		const double want = l1l2(dt_model_params(m) + k->offset, k->count, 0.0, 0.01);
		DT_CHECK(want > 0.01);
		DT_CHECK_NEAR(r.reg_loss, want, 1e-5 * want);
	}
	free(x);
	dt_model_free(m);
}

/* The graph calls: an axis past the variable's rank fails compilation;
 * a node without weights, a missing bias, a non-separable depthwise
 * target and a negative factor are refused where they are set. */
DT_TEST(nn_regularize, graph_calls_check_their_targets)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = dt_graph_new();
	const int in[1] = { 4 };
	DT_CHECK_OK(dt_graph_input(g, "x", DT_FLOAT32, 1, in, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, "d", NULL, 3, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_dropout(g, "drop", NULL, 0.0f, &err), &err);
	const struct dt_constraint far = { .kind = DT_CONSTRAINT_UNIT_NORM, .axes = 4 }; /* axis 2 of a rank-2 kernel */
	DT_CHECK_OK(dt_graph_set_constraint(g, "d", 0, &far, "kernel_constraint", &err), &err);
	DT_CHECK(dt_graph_set_constraint(g, "drop", 0, &far, "kernel_constraint", &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "node 'drop' has no kernel or bias");
	DT_CHECK(dt_graph_set_regularizer(g, "d", 3, (struct dt_regularizer){ .l2 = 0.1f }, 0, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "is not a separable convolution");
	DT_CHECK(dt_graph_set_regularizer(g, "d", 0, (struct dt_regularizer){ .l1 = -1.0f }, 0, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "must be finite and >= 0");
	DT_CHECK(dt_graph_set_regularizer(g, "nope", 0, (struct dt_regularizer){ .l2 = 0.1f }, 0, &err) == DT_CONFIG);
	DT_CHECK_OK(dt_graph_drop_bias(g, "d", &err), &err);
	DT_CHECK(dt_graph_set_regularizer(g, "d", 1, (struct dt_regularizer){ .l2 = 0.1f }, 0, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "node 'd' has no bias");
	DT_CHECK_OK(dt_graph_loss(g, NULL, DT_LOSS_SOFTMAX_XENT, &err), &err);
	struct dt_model *m = NULL;
	DT_CHECK(dt_model_from_graph(g, "far", 2, &m, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "kernel_constraint of 'd' normalizes over an axis past the rank 2 of its variable 'd/kernel'");
	DT_CHECK(m == NULL);
	dt_graph_free(g);
}
