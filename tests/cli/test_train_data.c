/* dtrain train on the file problems end to end: --problem=image_folder on a
 * folder of PIL-written JPEG and PNG files and --problem=csv on a CSV file
 * each train a few steps with a falling loss and evaluate on the held-out
 * split; a corrupt image and a missing CSV value exit 4 naming the file;
 * no --validation_split with evaluation on exits 2. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "dt_test.h"

static void run(struct dt_run *r, const char *const *argv)
{
	dt_test_run(r, argv, NULL, 300);
	DT_CHECK(!r->timed_out);
}

static const char *make_images(const char *mode, const char *n)
{
	static char dir[512];
	dt_test_path(dir, sizeof(dir), "imgs");
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "-c", "import PIL", NULL }, NULL, 30);
	int have_pil = r.exit_code == 0;
	dt_run_release(&r);
	if (!have_pil)
		DT_SKIP("python3-pil missing (scripts/install-deps.sh installs it)");
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/make_images.py", mode, dir, n, NULL }, NULL,
		    120);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	return dir;
}

/* The metrics file's final training loss. */
static double final_loss(const char *metrics)
{
	json_error_t je;
	json_t *m = json_load_file(metrics, 0, &je);
	DT_CHECK(m != NULL);
	double loss = json_real_value(json_object_get(m, "final_train_loss"));
	json_decref(m);
	return loss;
}

DT_TEST_TIMEOUT(train_data, image_folder_trains_with_a_falling_loss, 300)
{
	const char *dir = make_images("train", "40");
	char flag[600], metrics[512], mflag[600];
	snprintf(flag, sizeof(flag), "--data_dir=%s", dir);
	dt_test_path(metrics, sizeof(metrics), "metrics.json");
	snprintf(mflag, sizeof(mflag), "--metrics_file=%s", metrics);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--problem=image_folder", flag, "--image_size=16x16",
				  "--validation_split=0.25", "--random_flip", "--random_crop=0.9", "--model=lenet",
				  "--train_steps=60", "--log_every=20", "--hparams=batch_size=16,learning_rate=0.005",
				  mflag, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "image_folder train from");
	DT_CHECK_CONTAINS(r.err, "90 images of 16x16x3");
	DT_CHECK_CONTAINS(r.out, "eval (test split, 30 examples)");
	dt_run_release(&r);
	/* three colour classes: ln 3 = 1.10 at the start */
	const double loss = final_loss(metrics);
	DT_CHECK(loss > 0 && loss < 0.7);
}

DT_TEST_TIMEOUT(train_data, image_folder_refuses_a_bad_image_with_exit_4_or_skips_it, 300)
{
	const char *dir = make_images("fixture_bad", "");
	char flag[600];
	snprintf(flag, sizeof(flag), "--data_dir=%s", dir);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--problem=image_folder", flag, "--image_size=8", "--model=mlp",
				  "--train_steps=2", "--noeval", "--hparams=batch_size=4", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "a_cats/cut.jpg': corrupt JPEG: Premature end of JPEG file");
	dt_run_release(&r);
	run(&r, (const char *[]){ "dtrain", "train", "--problem=image_folder", flag, "--image_size=8", "--model=mlp",
				  "--train_steps=2", "--noeval", "--hparams=batch_size=4", "--bad_images=skip", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "skipping image");
	DT_CHECK_CONTAINS(r.err, "notes.jpg': not an image");
	dt_run_release(&r);
	/* evaluation needs a test split */
	run(&r, (const char *[]){ "dtrain", "train", "--problem=image_folder", flag, "--image_size=8", "--model=mlp",
				  "--train_steps=2", "--bad_images=skip", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "no test split without --validation_split");
	dt_run_release(&r);
	run(&r, (const char *[]){ "dtrain", "train", "--problem=image_folder", flag, "--bad_images=maybe", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--bad_images=maybe: expected fail or skip");
	dt_run_release(&r);
}

/* Two features, three classes in a ring of clusters: learnable by an mlp. */
static void write_csv(const char *path, int missing_at)
{
	FILE *f = fopen(path, "w");
	DT_CHECK(f != NULL);
	fprintf(f, "\"petal length\",\"petal, width\",species\n");
	unsigned s = 12345;
	for (int i = 0; i < 300; i++) {
		s = s * 1103515245u + 12345u;
		double nx = (double)(s >> 16 & 1023) / 1023 - 0.5;
		s = s * 1103515245u + 12345u;
		double ny = (double)(s >> 16 & 1023) / 1023 - 0.5;
		const char *names[3] = { "setosa", "versicolor", "\"virginica\"" };
		int c = i % 3;
		if (i == missing_at)
			fprintf(f, "%.3f,,%s\n", 3 * cos(2.1 * c) + nx, names[c]);
		else
			fprintf(f, "%.3f,\"%.3f\",%s\n", 3 * cos(2.1 * c) + nx, 3 * sin(2.1 * c) + ny, names[c]);
	}
	fclose(f);
}

DT_TEST_TIMEOUT(train_data, csv_trains_with_a_falling_loss_and_a_missing_value_exits_4, 300)
{
	char csv[512], flag[600], metrics[512], mflag[600];
	dt_test_path(csv, sizeof(csv), "iris.csv");
	write_csv(csv, -1);
	snprintf(flag, sizeof(flag), "--data_dir=%s", csv);
	dt_test_path(metrics, sizeof(metrics), "metrics.json");
	snprintf(mflag, sizeof(mflag), "--metrics_file=%s", metrics);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--problem=csv", flag, "--label_column=species",
				  "--validation_split=0.2", "--model=mlp", "--train_steps=80", "--log_every=20",
				  "--hparams=batch_size=16,learning_rate=0.01", mflag, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "240 rows of 2 features, label 'species' with 3 classes");
	DT_CHECK_CONTAINS(r.out, "eval (test split, 60 examples)");
	const double acc = cli_accuracy_of(r.out);
	DT_CHECK(acc > 0.9);
	dt_run_release(&r);
	const double loss = final_loss(metrics);
	DT_CHECK(loss > 0 && loss < 0.5);

	write_csv(csv, 7);
	run(&r, (const char *[]){ "dtrain", "train", "--problem=csv", flag, "--label_column=species",
				  "--validation_split=0.2", "--model=mlp", "--train_steps=5", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "iris.csv' row 8 (line 9), column 'petal, width': missing value");
	dt_run_release(&r);
	run(&r, (const char *[]){ "dtrain", "train", "--problem=csv", flag, "--label_column=kind", "--train_steps=5",
				  NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--label_column 'kind' is not a column");
	dt_run_release(&r);
}
