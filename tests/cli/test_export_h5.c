/* dtrain export --format=keras_h5 end to end: a Keras model trained a few
 * steps with Adam is exported, and an independent reader (h5py,
 * tests/tools/h5_check.py) finds every variable of the checkpoint with its
 * name, shape and values, Keras's weight order inside each layer, and with
 * --keras_model the model's layer order; a checkpoint of another model, a
 * damaged checkpoint, no checkpoint and a bad format are refused. */
#include <stdio.h>
#include <string.h>

#include "cli_util.h"
#include "dt_test.h"

#define MODEL "tests/fixtures/keras/small_residual_k2.json"

static void run(struct dt_run *r, const char *const *argv)
{
	dt_test_run(r, argv, NULL, 300);
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

DT_TEST_TIMEOUT(export_h5, keras_weights_match_the_checkpoint_in_h5py, 300)
{
	need_h5py();
	char out[512], dir_flag[600], ckpt[700], h5[512], to[600], h5n[512], ton[600];
	dt_test_path(out, sizeof(out), "run");
	snprintf(dir_flag, sizeof(dir_flag), "--output_dir=%s", out);
	snprintf(ckpt, sizeof(ckpt), "%s/model.ckpt-30.safetensors", out);
	dt_test_path(h5, sizeof(h5), "weights.h5");
	snprintf(to, sizeof(to), "--to=%s", h5);
	dt_test_path(h5n, sizeof(h5n), "by_name.h5");
	snprintf(ton, sizeof(ton), "--to=%s", h5n);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--keras_model=" MODEL, "--problem=synthetic", "--train_steps=30",
				  "--noeval", "--log_every=0", "--hparams=optimizer=adam", dir_flag, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);

	run(&r, (const char *[]){ "dtrain", "export", "--format=keras_h5", dir_flag, to, "--keras_model=" MODEL, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "exported 17 variables of 7 layers");
	dt_run_release(&r);
	run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/h5_check.py", ckpt, h5, MODEL, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "ok 17 variables in 7 layers");
	dt_run_release(&r);

	/* without the model: name order, which the checker refuses as the model's order */
	run(&r, (const char *[]){ "dtrain", "export", "--format=keras_h5", dir_flag, ton, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "by_name=True");
	dt_run_release(&r);
	run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/h5_check.py", ckpt, h5n, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/h5_check.py", ckpt, h5n, MODEL, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 1);
	DT_CHECK_CONTAINS(r.err, "not in the model's order");
	dt_run_release(&r);

	/* another model's JSON */
	run(&r, (const char *[]){ "dtrain", "export", "--format=keras_h5", dir_flag, to,
				  "--keras_model=tests/fixtures/keras/sequential_k2.json", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "the Keras model has");
	dt_run_release(&r);
	/* a flipped byte in the data: the checkpoint's CRC refuses it */
	FILE *f = fopen(ckpt, "r+b");
	DT_CHECK(f != NULL);
	DT_CHECK(fseek(f, -5, SEEK_END) == 0);
	int c = fgetc(f);
	DT_CHECK(fseek(f, -5, SEEK_END) == 0);
	fputc(c ^ 0x10, f);
	fclose(f);
	char file_flag[800];
	snprintf(file_flag, sizeof(file_flag), "--output_dir=%s", ckpt);
	run(&r, (const char *[]){ "dtrain", "export", "--format=keras_h5", file_flag, to, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 4);
	dt_run_release(&r);
}

DT_TEST(export_h5, bad_arguments_exit_2_and_no_checkpoint_exits_4)
{
	char empty[512], flag[600];
	dt_test_path(empty, sizeof(empty), "");
	snprintf(flag, sizeof(flag), "--output_dir=%s", empty);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "export", "--format=onnx", flag, "--to=x.h5", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--format=onnx: the formats are keras_h5");
	dt_run_release(&r);
	run(&r, (const char *[]){ "dtrain", "export", "--format=keras_h5", "--to=x.h5", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	dt_run_release(&r);
	run(&r, (const char *[]){ "dtrain", "export", "--format=keras_h5", flag, "--to=x.h5", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "no checkpoint in");
	dt_run_release(&r);
}
