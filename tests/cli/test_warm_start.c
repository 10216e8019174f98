/* --warm_start_from, --warm_start_vars and evaluation-only runs
 * (`dtrain evaluate`, --predictions_file), end to end. A source run trains a
 * small Keras model (convolution, batch norm, dense layers) a few steps; an
 * independent writer (h5py, tests/tools/keras_weights.py) puts its
 * checkpoint's values in Keras's layouts (HDF5, a .keras zip, TF.js); every layout loads to exactly the
 * same model, which the per-example predictions show byte for byte (every
 * variable, batch norm's moving statistics included, reaches the logits);
 * a warm start from the run's checkpoint evaluates to the run's own final
 * evaluation; shapes that differ are exit 2, truncated or lying files exit
 * 4; a checkpoint of the run's own wins; frozen layers stay frozen while
 * the rest fine-tunes; the ps chief and the all-reduce chief load it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "cluster_procs.h"
#include "dt_test.h"

#define MODEL "tests/fixtures/keras/warm_small_k2.json"
#define KW "tests/tools/keras_weights.py"

static void run(struct dt_run *r, const char *const *argv)
{
	dt_test_run(r, argv, NULL, 120);
	DT_CHECK(!r->timed_out);
}

static void need_h5py(void)
{
	struct dt_run r;
	run(&r, (const char *[]){ "/usr/bin/python3", "-c", "import h5py, numpy", NULL });
	int ok = r.exit_code == 0;
	dt_run_release(&r);
	if (!ok)
		DT_SKIP("python3-h5py missing (scripts/install-deps.sh installs it)");
}

/* The source run: 30 steps, evaluated at the end; its checkpoint's path. */
static void source_run(char *dir, size_t dcap, char *ckpt, size_t ccap, char **eval_line)
{
	char flag[700];
	dt_test_path(dir, dcap, "source");
	snprintf(flag, sizeof(flag), "--output_dir=%s", dir);
	snprintf(ckpt, ccap, "%s/model.ckpt-30.safetensors", dir);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--keras_model=" MODEL, "--problem=synthetic", "--train_steps=30",
				  "--log_every=0", flag, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "eval (test split, 10000 examples) at global step 30: accuracy = ");
	if (eval_line)
		*eval_line = strdup(strstr(r.out, "eval (test split"));
	dt_run_release(&r);
}

static void write_layout(const char *ckpt, const char *out, const char *layout)
{
	struct dt_run r;
	run(&r, (const char *[]){ "/usr/bin/python3", KW, ckpt, out, layout, MODEL, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
}

/* `dtrain evaluate` of `from`; its predictions to `pred`; returns the run (caller releases). */
static void evaluate(struct dt_run *r, const char *from, const char *pred, const char *extra)
{
	char f[800], p[800];
	snprintf(f, sizeof(f), "--warm_start_from=%s", from);
	snprintf(p, sizeof(p), "--predictions_file=%s", pred);
	run(r, (const char *[]){ "dtrain", "evaluate", "--keras_model=" MODEL, "--problem=synthetic", f, p,
				 extra ? extra : "--log_level=info", NULL });
}

DT_TEST_TIMEOUT(warm_start, every_keras_layout_loads_exactly_the_written_values, 120)
{
	need_h5py();
	char dir[512], ckpt[700], pred0[512];
	char *line = NULL;
	source_run(dir, sizeof(dir), ckpt, sizeof(ckpt), &line);
	dt_test_path(pred0, sizeof(pred0), "p0.jsonl");
	struct dt_run r;
	evaluate(&r, ckpt, pred0, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	/* the source run's own final evaluation, to the digit, at its step */
	DT_CHECK_STR_EQ(r.out, line);
	DT_CHECK_CONTAINS(r.err, "variables loaded: 10");
	DT_CHECK_CONTAINS(r.err, "variables left at their initializer: none");
	DT_CHECK_CONTAINS(r.err, "tensors of the file not used: none");
	DT_CHECK_CONTAINS(r.err, "wrote 10000 predictions");
	dt_run_release(&r);
	char *p0 = cli_read_file(pred0);
	DT_CHECK(p0 != NULL);
	DT_CHECK_CONTAINS(p0, "\"logits\":[");
	DT_CHECK_CONTAINS(p0, "\"probabilities\":[");

	static const char *const layouts[] = { "keras2", "keras2_vlen", "keras2_order", "full", "keras3", "keras_zip" };
	for (size_t i = 0; i < sizeof(layouts) / sizeof(*layouts); i++) {
		char h5[512], pred[512];
		dt_test_path(h5, sizeof(h5), layouts[i]);
		dt_test_path(pred, sizeof(pred), "p.jsonl");
		write_layout(ckpt, h5, layouts[i]);
		evaluate(&r, h5, pred, NULL);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		DT_CHECK_CONTAINS(r.err, "variables loaded: 10");
		DT_CHECK_CONTAINS(r.err, "variables left at their initializer: none");
		DT_CHECK_CONTAINS(r.err, strcmp(layouts[i], "keras3") == 0      ? "Keras 3 .weights.h5"
					 : strcmp(layouts[i], "keras_zip") == 0 ? "Keras 3 .keras archive"
										: "Keras 2 HDF5");
		if (strcmp(layouts[i], "keras2_order") == 0)
			DT_CHECK_CONTAINS(r.err, "layers matched by order");
		dt_run_release(&r);
		char *p = cli_read_file(pred);
		DT_CHECK(p != NULL);
		DT_CHECK_STR_EQ(p, p0);
		free(p);
	}
	/* the output dir itself, and a changed value shows */
	char pred[512], h5[512];
	dt_test_path(pred, sizeof(pred), "pd.jsonl");
	evaluate(&r, dir, pred, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_STR_EQ(r.out, line);
	dt_run_release(&r);
	dt_test_path(h5, sizeof(h5), "perturb.h5");
	write_layout(ckpt, h5, "perturb");
	evaluate(&r, h5, pred, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	char *p = cli_read_file(pred);
	DT_CHECK(p != NULL && strcmp(p, p0) != 0);
	free(p);
	free(p0);
	free(line);
}

/* TF.js: model.json and its shards in a folder of their own. */
static void tfjs_dir(const char *ckpt, const char *layout, char *json, size_t cap)
{
	char dir[512], cmd[1100];
	dt_test_path(dir, sizeof(dir), layout);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", dir);
	DT_CHECK_INT_EQ(system(cmd), 0);
	snprintf(json, cap, "%s/model.json", dir);
	write_layout(ckpt, json, layout);
}

DT_TEST_TIMEOUT(warm_start, tfjs_weights_float32_and_quantized_load_exactly, 120)
{
	need_h5py();
	char dir[512], ckpt[700], pred0[512], pred[512], json[600], expect[700];
	source_run(dir, sizeof(dir), ckpt, sizeof(ckpt), NULL);
	dt_test_path(pred0, sizeof(pred0), "p0.jsonl");
	dt_test_path(pred, sizeof(pred), "p.jsonl");
	struct dt_run r;
	evaluate(&r, ckpt, pred0, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	char *p0 = cli_read_file(pred0);
	tfjs_dir(ckpt, "tfjs", json, sizeof(json));
	evaluate(&r, json, pred, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "(TF.js model.json and weight shards)");
	DT_CHECK_CONTAINS(r.err, "variables loaded: 10");
	DT_CHECK_CONTAINS(r.err, "tensors of the file not used: none");
	dt_run_release(&r);
	char *p = cli_read_file(pred);
	DT_CHECK_STR_EQ(p, p0);
	free(p);
	/* quantized: the values TF.js's dequantization gives, as the writer computed them */
	static const char *const quant[] = { "tfjs_u8", "tfjs_f16" };
	for (int i = 0; i < 2; i++) {
		char pe[512];
		dt_test_path(pe, sizeof(pe), "pe.jsonl");
		tfjs_dir(ckpt, quant[i], json, sizeof(json));
		evaluate(&r, json, pred, NULL);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		DT_CHECK_CONTAINS(r.err, "variables loaded: 10");
		dt_run_release(&r);
		snprintf(expect, sizeof(expect), "%s.expected.h5", json);
		evaluate(&r, expect, pe, NULL);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		dt_run_release(&r);
		char *a = cli_read_file(pred), *b = cli_read_file(pe);
		DT_CHECK_STR_EQ(a, b);
		DT_CHECK(strcmp(a, p0) != 0);
		free(a);
		free(b);
	}
	/* a shard cut short: exit 4 naming the weight */
	tfjs_dir(ckpt, "tfjs_short", json, sizeof(json));
	evaluate(&r, json, pred, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "shorter than their weights");
	dt_run_release(&r);
	/* a Keras JSON is no weights file */
	evaluate(&r, MODEL, pred, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "without a TF.js weightsManifest");
	dt_run_release(&r);
	free(p0);
}

/* Any safetensors file: F16, BF16, F64 and F32 tensors, a slot and a tensor
 * of no variable; the values as the writer converted them. */
DT_TEST_TIMEOUT(warm_start, plain_safetensors_of_every_float_dtype_load_exactly, 120)
{
	need_h5py();
	char dir[512], ckpt[700], st[512], expect[600], pred[512], pe[512];
	source_run(dir, sizeof(dir), ckpt, sizeof(ckpt), NULL);
	dt_test_path(st, sizeof(st), "mixed.safetensors");
	dt_test_path(pred, sizeof(pred), "p.jsonl");
	dt_test_path(pe, sizeof(pe), "pe.jsonl");
	write_layout(ckpt, st, "st_mixed");
	struct dt_run r;
	evaluate(&r, st, pred, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "(safetensors)");
	DT_CHECK_CONTAINS(r.err, "variables loaded: 10");
	DT_CHECK_CONTAINS(r.err, "tensors of the file not used: 1 ('not_in_the_model/kernel')");
	dt_run_release(&r);
	snprintf(expect, sizeof(expect), "%s.expected.h5", st);
	evaluate(&r, expect, pe, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	char *a = cli_read_file(pred), *b = cli_read_file(pe);
	DT_CHECK(a && b);
	DT_CHECK_STR_EQ(a, b);
	free(a);
	free(b);
}

DT_TEST_TIMEOUT(warm_start, bad_files_are_exit_2_or_4_never_a_crash, 120)
{
	need_h5py();
	char dir[512], ckpt[700], h5[512], pred[512];
	source_run(dir, sizeof(dir), ckpt, sizeof(ckpt), NULL);
	dt_test_path(pred, sizeof(pred), "p.jsonl");
	static const struct {
		const char *layout;
		int code;
		const char *msg;
	} cases[] = {
		{ "bad_shape", 2, "cannot warm-start variable 'conv2d/kernel' (shape [3, 3, 1, 4])" },
		{ "lie_names", 4, "weight_names lists a weight with no dataset" },
		{ "int_data", 4, "not floating-point numbers" },
		{ "truncated", 4, "truncated or damaged" },
		{ "keras_zip_cut", 4, "Truncated ZIP file data" },
		{ "keras_zip_crc", 4, "ZIP bad CRC" },
	};
	struct dt_run r;
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		dt_test_path(h5, sizeof(h5), cases[i].layout);
		write_layout(ckpt, h5, cases[i].layout);
		evaluate(&r, h5, pred, NULL);
		DT_CHECK_INT_EQ(r.exit_code, cases[i].code);
		DT_CHECK_CONTAINS(r.err, cases[i].msg);
		dt_run_release(&r);
	}
	/* a bad shape names both */
	dt_test_path(h5, sizeof(h5), "bad_shape");
	evaluate(&r, h5, pred, NULL);
	DT_CHECK_CONTAINS(r.err, "has shape [4, 3, 3, 1]");
	dt_run_release(&r);
	/* a truncated checkpoint, garbage, an empty dir, nothing there */
	char cut[512];
	dt_test_path(cut, sizeof(cut), "cut.safetensors");
	char *bytes = cli_read_file(ckpt);
	DT_CHECK(bytes != NULL);
	FILE *f = fopen(ckpt, "rb");
	DT_CHECK(f != NULL);
	DT_CHECK(fseek(f, 0, SEEK_END) == 0);
	long size = ftell(f);
	fclose(f);
	free(bytes);
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "head -c %ld '%s' > '%s'", size - 100, ckpt, cut);
	DT_CHECK_INT_EQ(system(cmd), 0);
	evaluate(&r, cut, pred, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	dt_run_release(&r);
	snprintf(cmd, sizeof(cmd), "head -c 3000 /dev/urandom > '%s'", cut);
	DT_CHECK_INT_EQ(system(cmd), 0);
	evaluate(&r, cut, pred, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "neither safetensors, HDF5");
	dt_run_release(&r);
	char empty[512];
	dt_test_path(empty, sizeof(empty), "empty");
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", empty);
	DT_CHECK_INT_EQ(system(cmd), 0);
	evaluate(&r, empty, pred, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "has no checkpoint");
	dt_run_release(&r);
	evaluate(&r, "/nonexistent/w.h5", pred, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	dt_run_release(&r);
	/* --predictions_file off an evaluation-only run; a bad regex */
	run(&r, (const char *[]){ "dtrain", "train", "--keras_model=" MODEL, "--problem=synthetic", "--train_steps=1",
				  "--predictions_file=x", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	dt_run_release(&r);
	char from[800];
	snprintf(from, sizeof(from), "--warm_start_from=%s", ckpt);
	run(&r, (const char *[]){ "dtrain", "train", "--keras_model=" MODEL, "--problem=synthetic", "--train_steps=1",
				  "--noeval", from, "--warm_start_vars=(", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "not a valid");
	dt_run_release(&r);
}

/* The model with conv2d, bn and dense marked trainable: false (a frozen
 * BatchNormalization runs in inference mode: its moving statistics stay). */
static void frozen_model(char *path, size_t cap)
{
	dt_test_path(path, cap, "frozen.json");
	char cmd[1400];
	snprintf(cmd, sizeof(cmd),
		 "/usr/bin/python3 -c \"import json,sys; m=json.load(open('" MODEL "'))\n"
		 "for l in m['config']['layers']:\n"
		 "    if l['config'].get('name') in ('conv2d','bn','dense'): l['config']['trainable']=False\n"
		 "json.dump(m, open(sys.argv[1],'w'))\" '%s'",
		 path);
	DT_CHECK_INT_EQ(system(cmd), 0);
}

DT_TEST_TIMEOUT(warm_start, fine_tune_keeps_the_frozen_base_and_a_restore_wins, 120)
{
	need_h5py();
	char dir[512], ckpt[700], h5[512], json[512], out[512], oflag[600], fflag[600], mflag[600], ck2[700];
	source_run(dir, sizeof(dir), ckpt, sizeof(ckpt), NULL);
	dt_test_path(h5, sizeof(h5), "w.h5");
	write_layout(ckpt, h5, "keras2");
	frozen_model(json, sizeof(json));
	dt_test_path(out, sizeof(out), "tune");
	snprintf(oflag, sizeof(oflag), "--output_dir=%s", out);
	snprintf(fflag, sizeof(fflag), "--warm_start_from=%s", h5);
	snprintf(mflag, sizeof(mflag), "--keras_model=%s", json);
	snprintf(ck2, sizeof(ck2), "%s/model.ckpt-10.safetensors", out);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", mflag, "--problem=synthetic", "--train_steps=10", "--noeval",
				  "--log_every=0", oflag, fflag, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "warm-starting from");
	DT_CHECK_CONTAINS(r.err, "variables loaded: 10");
	dt_run_release(&r);
	run(&r, (const char *[]){ "/usr/bin/python3", KW, "--same", ckpt, ck2,
				  "conv2d/kernel,conv2d/bias,bn/gamma,bn/beta,bn/moving_mean,bn/moving_variance,"
				  "dense/kernel,dense/bias",
				  NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	run(&r, (const char *[]){ "/usr/bin/python3", KW, "--differ", ckpt, ck2, "logits/kernel,logits/bias", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	/* again, now that the run has a checkpoint of its own: it restores, no warm start */
	run(&r, (const char *[]){ "dtrain", "train", mflag, "--problem=synthetic", "--train_steps=12", "--noeval",
				  "--log_every=0", oflag, fflag, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "restored step 10");
	DT_CHECK(strstr(r.err, "warm start") == NULL);
	dt_run_release(&r);
	/* --warm_start_vars: only the head */
	char out2[512], o2[600];
	dt_test_path(out2, sizeof(out2), "head_only");
	snprintf(o2, sizeof(o2), "--output_dir=%s", out2);
	run(&r, (const char *[]){ "dtrain", "train", "--keras_model=" MODEL, "--problem=synthetic", "--train_steps=1",
				  "--noeval", "--log_every=0", o2, fflag, "--warm_start_vars=^logits/", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "variables loaded: 2 ('logits/kernel', 'logits/bias')");
	DT_CHECK_CONTAINS(r.err, "variables left at their initializer: 8");
	DT_CHECK_CONTAINS(r.err, "tensors of the file not used: 8");
	dt_run_release(&r);
}

/* With SGD at learning rate 1e-30 a step changes no kernel (the change is far below half an ulp): the chief's first
 * checkpoint holds the warm-start values, whoever loaded them. */
static void check_kept(const char *src_ckpt, const char *out_dir)
{
	char ck[700];
	snprintf(ck, sizeof(ck), "%s/model.ckpt-2.safetensors", out_dir);
	struct dt_run r;
	run(&r, (const char *[]){ "/usr/bin/python3", KW, "--same", src_ckpt, ck,
				  "conv2d/kernel,bn/gamma,bn/beta,dense/kernel,logits/kernel,logits/bias", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(warm_start, the_ps_chief_and_the_allreduce_chief_load_it, 180)
{
	need_h5py();
	char dir[512], ckpt[700], h5[512], fflag[600];
	source_run(dir, sizeof(dir), ckpt, sizeof(ckpt), NULL);
	dt_test_path(h5, sizeof(h5), "w3.h5");
	write_layout(ckpt, h5, "keras3");
	snprintf(fflag, sizeof(fflag), "--warm_start_from=%s", h5);
	const char *const args[] = { "--keras_model=" MODEL, "--problem=synthetic", "--train_steps=2", "--noeval",
				     "--log_every=0", "--hparams=optimizer=sgd,learning_rate=1e-30", fflag,
				     "--save_checkpoints_steps=100", NULL, NULL };
	const char *a2[10];
	memcpy(a2, args, sizeof(args));
	struct cluster c;
	cluster_init(&c, "chief", 0, 1);
	cluster_output_dir(&c, "ps_run");
	a2[8] = c.out_flag;
	struct task *ps0 = cluster_start_train(&c, "ps", 0, a2);
	struct task *chief = cluster_start_train(&c, "chief", 0, a2);
	EXPECT_EXIT(&c, chief, 0, 90);
	EXPECT_EXIT(&c, ps0, 0, 30);
	char *log = task_read(chief, 1);
	DT_CHECK_CONTAINS(log, "variables loaded: 10");
	free(log);
	check_kept(ckpt, c.out_dir);

	struct cluster a;
	cluster_init(&a, "chief", 1, 0);
	cluster_output_dir(&a, "ar_run");
	a2[8] = a.out_flag;
	struct task *ch = cluster_start_train(&a, "chief", 0, a2);
	struct task *w = cluster_start_train(&a, "worker", 0, a2);
	EXPECT_EXIT(&a, ch, 0, 90);
	EXPECT_EXIT(&a, w, 0, 30);
	log = task_read(ch, 1);
	DT_CHECK_CONTAINS(log, "variables loaded: 10");
	free(log);
	check_kept(ckpt, a.out_dir);
}
