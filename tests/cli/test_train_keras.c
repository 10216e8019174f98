/* dtrain train --keras_model end to end: a Keras model trains on
 * synthetic data and its loss goes down; every refused layer and field
 * exits 2 naming the layer and the field; a model that does not fit the
 * data exits 2 saying both shapes. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "dt_test.h"

#define FIXTURES "tests/fixtures/keras/"

static void run(struct dt_run *r, const char *const *argv)
{
	dt_test_run(r, argv, NULL, 300);
	DT_CHECK(!r->timed_out);
}

DT_TEST(train_keras, a_keras_sequential_model_trains_and_its_loss_goes_down)
{
	char metrics[512];
	dt_test_path(metrics, sizeof(metrics), "metrics.json");
	char mflag[600];
	snprintf(mflag, sizeof(mflag), "--metrics_file=%s", metrics);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--keras_model=" FIXTURES "sequential_k2.json", "--problem=synthetic",
				  "--train_steps=200", "--log_every=50", "--hparams=learning_rate=0.01,batch_size=32",
				  "--noeval", mflag, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "training keras on synthetic");
	dt_run_release(&r);
	json_error_t je;
	json_t *m = json_load_file(metrics, 0, &je);
	DT_CHECK(m != NULL);
	if (!m)
		return;
	const double loss = json_real_value(json_object_get(m, "final_train_loss"));
	/* ln(10) = 2.30 at the start; the fixture reaches about 1.35 */
	DT_CHECK(loss > 0.0 && loss < 1.9);
	DT_CHECK_STR_EQ(json_string_value(json_object_get(m, "model")), "keras");
	json_decref(m);
}

static void write_model(char *path, size_t cap, const char *name, const char *layer_json)
{
	char text[2048];
	snprintf(text, sizeof(text),
		 "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": ["
		 "{\"class_name\": \"InputLayer\", \"config\": {\"name\": \"in\", \"batch_input_shape\": [null, 28, 28, 1]}},"
		 "%s,"
		 "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flat\"}},"
		 "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 10, \"activation\": \"softmax\"}}]}}",
		 layer_json);
	dt_test_path(path, cap, name);
	dt_test_write_file(path, text, strlen(text));
}

DT_TEST(train_keras, every_refused_layer_and_field_exits_2_with_its_name)
{
	static const struct {
		const char *layer, *needles[2];
	} cases[] = {
		{ "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"rnn\", \"units\": 4}}",
		  { "layer 'rnn' (LSTM)", "layer class 'LSTM' is not supported (supported: InputLayer, Dense" } },
		{ "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, \"kernel_size\": 3, "
		  "\"data_format\": \"channels_first\"}}",
		  { "layer 'c' (Conv2D)", "field 'data_format' is 'channels_first' (supported: channels_last)" } },
		{ "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, \"kernel_size\": 3, "
		  "\"kernel_regularizer\": {\"class_name\": \"OrthogonalRegularizer\", \"config\": {\"factor\": 0.01}}}}",
		  { "layer 'c' (Conv2D)", "field 'kernel_regularizer' is an OrthogonalRegularizer (supported on a Dense "
					  "kernel_regularizer only" } },
		{ "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, \"kernel_size\": 3, "
		  "\"dilation_rate\": [2, 2]}}",
		  { "layer 'c' (Conv2D)", "field 'dilation_rate' is (2, 2)" } },
		{ "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, \"kernel_size\": 3, "
		  "\"padding\": \"causal\"}}",
		  { "layer 'c' (Conv2D)", "field 'padding' is 'causal' (supported: valid, same)" } },
		{ "{\"class_name\": \"ReLU\", \"config\": {\"name\": \"r\", \"max_value\": 5.0}}",
		  { "layer 'r' (ReLU)", "field 'max_value' is 5 (supported: none, or 6 for ReLU6)" } },
		{ "{\"class_name\": \"Activation\", \"config\": {\"name\": \"a\", \"activation\": \"elu\"}}",
		  { "layer 'a' (Activation)", "field 'activation' is 'elu' (supported: linear, relu, relu6" } },
		{ "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\", \"axis\": 1}}",
		  { "layer 'bn' (BatchNormalization)", "field 'axis' must be the last axis" } },
		{ "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\", \"scale\": false}}",
		  { "layer 'bn' (BatchNormalization)", "field 'scale' is false (supported: center and scale true)" } },
		{ "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, \"kernel_size\": 3, "
		  "\"kernel_initializer\": {\"class_name\": \"Orthogonal\", \"config\": {}}}}",
		  { "layer 'c' (Conv2D)", "field 'kernel_initializer' is initializer 'Orthogonal' (supported: GlorotUniform" } },
		{ "{\"class_name\": \"GlobalAveragePooling2D\", \"config\": {\"name\": \"g\", \"keepdims\": true}}",
		  { "layer 'g' (GlobalAveragePooling2D)", "field 'keepdims' is true (supported: false)" } },
		{ "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"d\", \"rate\": 0.5, \"noise_shape\": [null, 1, 1, 1]}}",
		  { "layer 'd' (Dropout)", "field 'noise_shape' is set (supported: null" } },
		{ "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"d\", \"rate\": 0.5, \"mystery\": 3}}",
		  { "layer 'd' (Dropout)", "field 'mystery' is not supported (supported fields: rate, noise_shape)" } },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char path[512], flag[600], name[32];
		snprintf(name, sizeof(name), "m%zu.json", i);
		write_model(path, sizeof(path), name, cases[i].layer);
		snprintf(flag, sizeof(flag), "--keras_model=%s", path);
		struct dt_run r;
		run(&r, (const char *[]){ "dtrain", "train", flag, "--problem=synthetic", "--train_steps=1", "--noeval",
					  NULL });
		if (r.exit_code != 2)
			dt_test_fail(__FILE__, __LINE__, "case %zu exited %d: %s", i, r.exit_code, r.err);
		DT_CHECK_CONTAINS(r.err, cases[i].needles[0]);
		DT_CHECK_CONTAINS(r.err, cases[i].needles[1]);
		dt_run_release(&r);
	}
	/* the output's activation must be softmax or linear */
	char path[512], flag[600];
	write_model(path, sizeof(path), "sig.json", "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"d\", \"rate\": 0.1}}");
	char *text = cli_read_file(path);
	char *soft = strstr(text, "\"softmax\"");
	DT_CHECK(soft != NULL);
	if (soft) {
		memcpy(soft, "\"sigmoid\"", 9);
		dt_test_write_file(path, text, strlen(text));
	}
	free(text);
	snprintf(flag, sizeof(flag), "--keras_model=%s", path);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", flag, "--problem=synthetic", "--train_steps=1", "--noeval", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "layer 'out' (Dense): field 'activation' is 'sigmoid' on the output layer");
	dt_run_release(&r);
}

DT_TEST(train_keras, a_model_that_does_not_fit_the_data_exits_2)
{
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--keras_model=" FIXTURES "mobilenet_v2_k3.json",
				  "--problem=synthetic", "--train_steps=1", "--noeval", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "takes 1 float input(s) of shape (32, 32, 3) and gives 5 classes, but the data has "
				 "images of (28, 28, 1) and 10 classes");
	dt_run_release(&r);
	run(&r, (const char *[]){ "dtrain", "train", "--keras_model=/nonexistent/model.json", "--problem=synthetic",
				  "--train_steps=1", "--noeval", NULL });
	DT_CHECK(r.exit_code != 0 && r.exit_code != 2);
	DT_CHECK_CONTAINS(r.err, "/nonexistent/model.json");
	dt_run_release(&r);
}
