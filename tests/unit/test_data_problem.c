/* Unit tests for src/data/problem: the registry, Fashion-MNIST from the
 * Debian package, MNIST from a directory of fixture files, the checks on
 * bad files, and the synthetic problem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "dt_test.h"
#include "base/clock.h"
#include "base/err.h"
#include "data/problem.h"

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* Writes an IDX file of uint8 with the given dims; `data` holds the
 * product of dims bytes. gz picks gzip or plain. */
static void write_idx(const char *dir, const char *name, int gz, int ndims, const uint32_t *dims,
		      const uint8_t *data)
{
	size_t n = 1;
	uint8_t head[4 + 4 * 3] = { 0, 0, 0x08, (uint8_t)ndims };
	for (int i = 0; i < ndims; i++) {
		head[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
		head[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
		head[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
		head[7 + 4 * i] = (uint8_t)dims[i];
		n *= dims[i];
	}
	size_t hlen = 4 + 4 * (size_t)ndims;
	uint8_t *buf = malloc(hlen + n + 1);
	DT_CHECK(buf != NULL);
	memcpy(buf, head, hlen);
	memcpy(buf + hlen, data, n);
	char path[512];
	snprintf(path, sizeof(path), "%s/%s%s", dir, name, gz ? ".gz" : "");
	if (gz) {
		gzFile f = gzopen(path, "wb");
		DT_CHECK(f != NULL);
		DT_CHECK_INT_EQ(gzwrite(f, buf, (unsigned)(hlen + n)), (long long)(hlen + n));
		DT_CHECK_INT_EQ(gzclose(f), Z_OK);
	} else {
		dt_test_write_file(path, buf, hlen + n);
	}
	free(buf);
}

/* A small MNIST-shaped split: `count` 28x28 images whose pixels encode the
 * example, labels i % 10 unless overridden. */
static void write_split(const char *dir, const char *prefix, int gz, uint32_t images, uint32_t labels,
			uint32_t side, int bad_label_at)
{
	uint32_t idims[3] = { images, side, side }, ldims[1] = { labels };
	uint8_t *px = malloc((size_t)images * side * side + 1);
	uint8_t *lb = malloc(labels + 1u);
	DT_CHECK(px && lb);
	for (size_t i = 0; i < (size_t)images * side * side; i++)
		px[i] = (uint8_t)(i * 31 + i / 784);
	for (uint32_t i = 0; i < labels; i++)
		lb[i] = (uint8_t)(i % 10);
	if (bad_label_at >= 0)
		lb[bad_label_at] = 12;
	char name[128];
	snprintf(name, sizeof(name), "%s-images-idx3-ubyte", prefix);
	write_idx(dir, name, gz, 3, idims, px);
	snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", prefix);
	write_idx(dir, name, gz, 1, ldims, lb);
	free(px);
	free(lb);
}

static int fashion_installed(void)
{
	struct stat st;
	return stat(FASHION_DIR "/train-images-idx3-ubyte.gz", &st) == 0 &&
	       stat(FASHION_DIR "/t10k-labels-idx1-ubyte.gz", &st) == 0;
}

DT_TEST(data_problem, registry_lists_names_and_default_dirs)
{
	size_t n = 0;
	const char *const *names = dt_problem_names(&n);
	DT_CHECK_UINT_EQ(n, 11); /* the image problems, then t2t's text problems (data/text.h) */
	DT_CHECK_STR_EQ(names[0], "fashion_mnist");
	DT_CHECK_STR_EQ(names[1], "mnist");
	DT_CHECK_STR_EQ(names[2], "synthetic");
	DT_CHECK_STR_EQ(names[3], "image_folder");
	DT_CHECK_STR_EQ(names[4], "csv");
	DT_CHECK_STR_EQ(names[5], "algorithmic_identity_binary40");
	DT_CHECK_STR_EQ(names[10], "text2text_tmpdir");
	DT_CHECK(dt_problem_default_dir("image_folder") == NULL);
	DT_CHECK(dt_problem_default_dir("csv") == NULL);
	DT_CHECK_STR_EQ(dt_problem_default_dir("fashion_mnist"), FASHION_DIR);
	DT_CHECK(dt_problem_default_dir("mnist") == NULL);
	DT_CHECK(dt_problem_default_dir("synthetic") == NULL);
	DT_CHECK(dt_problem_default_dir("cifar10") == NULL);
}

DT_TEST(data_problem, unknown_problem_lists_the_valid_ones)
{
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_problem_load("cifar10", NULL, NULL, DT_SPLIT_TRAIN, 1, &ds, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "unknown problem 'cifar10'");
	DT_CHECK_CONTAINS(err.msg, "fashion_mnist, mnist, synthetic, image_folder, csv");
	DT_CHECK(ds.images == NULL);
	dt_dataset_release(&ds);
	dt_dataset_release(NULL);
}

DT_TEST_TIMEOUT(data_problem, fashion_mnist_loads_both_splits_balanced, 60)
{
	if (!fashion_installed())
		DT_SKIP("dataset-fashion-mnist not installed");
	struct dt_dataset tr, te;
	struct dt_err err = DT_ERR_INIT;
	int64_t t0 = dt_now_ns();
	DT_CHECK_OK(dt_problem_load("fashion_mnist", NULL, NULL, DT_SPLIT_TRAIN, 0, &tr, &err), &err);
	DT_CHECK_OK(dt_problem_load("fashion_mnist", "", NULL, DT_SPLIT_TEST, 0, &te, &err), &err);
	printf("fashion_mnist: both splits loaded in %.3f s\n", (double)(dt_now_ns() - t0) / 1e9);

	DT_CHECK_UINT_EQ(tr.count, 60000);
	DT_CHECK_UINT_EQ(te.count, 10000);
	DT_CHECK_INT_EQ(tr.height, 28);
	DT_CHECK_INT_EQ(tr.width, 28);
	DT_CHECK_INT_EQ(tr.channels, 1);
	DT_CHECK_INT_EQ(tr.num_classes, 10);
	DT_CHECK_NEAR(tr.mean, 0.2860, 1e-6);
	DT_CHECK_NEAR(tr.std, 0.3530, 1e-6);
	DT_CHECK_CONTAINS(tr.source, FASHION_DIR);
	uint32_t per_class_tr[10] = { 0 }, per_class_te[10] = { 0 };
	for (uint32_t i = 0; i < tr.count; i++)
		per_class_tr[tr.labels[i]]++;
	for (uint32_t i = 0; i < te.count; i++)
		per_class_te[te.labels[i]]++;
	for (int c = 0; c < 10; c++) {
		DT_CHECK_UINT_EQ(per_class_tr[c], 6000);
		DT_CHECK_UINT_EQ(per_class_te[c], 1000);
	}
	/* The reference says the mean training pixel is 72.94 of 255. */
	double sum = 0.0;
	for (size_t i = 0; i < (size_t)tr.count * 784; i++)
		sum += tr.images[i];
	DT_CHECK_NEAR(sum / ((double)tr.count * 784.0), 72.94, 0.01);
	dt_dataset_release(&tr);
	dt_dataset_release(&te);
	DT_CHECK(tr.images == NULL && tr.count == 0);
}

DT_TEST(data_problem, mnist_without_data_dir_is_a_usage_error)
{
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_problem_load("mnist", NULL, NULL, DT_SPLIT_TRAIN, 0, &ds, &err), DT_USAGE);
	DT_CHECK_INT_EQ(dt_status_exit_code(err.status), 2);
	DT_CHECK_CONTAINS(err.msg, "problem 'mnist' needs --data_dir");
	DT_CHECK_CONTAINS(err.msg, "\nhint: pass --data_dir");
	dt_err_clear(&err);
	DT_CHECK_INT_EQ(dt_problem_load("mnist", "", NULL, DT_SPLIT_TEST, 0, &ds, &err), DT_USAGE);
}

DT_TEST(data_problem, mnist_loads_fixture_files_gzipped_or_plain)
{
	const char *dir = dt_test_tmpdir();
	write_split(dir, "train", 1, 30, 30, 28, -1);
	write_split(dir, "t10k", 0, 20, 20, 28, -1);
	struct dt_dataset tr, te;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load("mnist", dir, NULL, DT_SPLIT_TRAIN, 0, &tr, &err), &err);
	DT_CHECK_OK(dt_problem_load("mnist", dir, NULL, DT_SPLIT_TEST, 0, &te, &err), &err);
	DT_CHECK_UINT_EQ(tr.count, 30);
	DT_CHECK_UINT_EQ(te.count, 20);
	DT_CHECK_NEAR(tr.mean, 0.1307, 1e-6);
	DT_CHECK_NEAR(te.std, 0.3081, 1e-6);
	DT_CHECK_UINT_EQ(tr.labels[17], 7);
	DT_CHECK_UINT_EQ(tr.images[5], (uint8_t)(5 * 31));
	DT_CHECK_UINT_EQ(te.images[784 * 2 + 1], (uint8_t)((784 * 2 + 1) * 31 + 2));
	DT_CHECK_CONTAINS(tr.source, "mnist train");
	DT_CHECK_CONTAINS(te.source, dir);
	dt_dataset_release(&tr);
	dt_dataset_release(&te);
}

DT_TEST(data_problem, missing_files_are_io_errors_with_a_hint)
{
	const char *dir = dt_test_tmpdir();
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_problem_load("fashion_mnist", dir, NULL, DT_SPLIT_TRAIN, 0, &ds, &err), DT_IO);
	DT_CHECK_INT_EQ(dt_status_exit_code(err.status), 4);
	char want[600];
	snprintf(want, sizeof(want), "cannot find '%s/train-images-idx3-ubyte.gz' or '%s/train-images-idx3-ubyte'",
		 dir, dir);
	DT_CHECK_CONTAINS(err.msg, want);
	DT_CHECK_CONTAINS(err.msg, "hint: install the Debian package dataset-fashion-mnist or pass --data_dir");

	/* Images there, labels not. */
	write_split(dir, "t10k", 0, 10, 10, 28, -1);
	snprintf(want, sizeof(want), "%s/t10k-labels-idx1-ubyte", dir);
	DT_CHECK_INT_EQ(remove(want), 0);
	dt_err_clear(&err);
	DT_CHECK_INT_EQ(dt_problem_load("mnist", dir, NULL, DT_SPLIT_TEST, 0, &ds, &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, want);
	DT_CHECK_CONTAINS(err.msg, "hint: download the four MNIST IDX files");
}

DT_TEST(data_problem, images_and_labels_count_mismatch)
{
	const char *dir = dt_test_tmpdir();
	write_split(dir, "train", 0, 30, 29, 28, -1);
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_problem_load("mnist", dir, NULL, DT_SPLIT_TRAIN, 0, &ds, &err), DT_DATA);
	char want[600];
	snprintf(want, sizeof(want), "'%s/train-labels-idx1-ubyte' has 29 labels but '%s/train-images-idx3-ubyte' has 30 images",
		 dir, dir);
	DT_CHECK_CONTAINS(err.msg, want);
	DT_CHECK(ds.images == NULL);
}

DT_TEST(data_problem, label_out_of_range)
{
	const char *dir = dt_test_tmpdir();
	write_split(dir, "train", 1, 30, 30, 28, 13);
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_problem_load("mnist", dir, NULL, DT_SPLIT_TRAIN, 0, &ds, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "train-labels-idx1-ubyte.gz': label 12 of example 13 is out of range");
	DT_CHECK_CONTAINS(err.msg, "problem 'mnist' has 10 classes");
}

DT_TEST(data_problem, wrong_image_size_or_swapped_files)
{
	const char *dir = dt_test_tmpdir();
	write_split(dir, "train", 0, 5, 5, 32, -1);
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_problem_load("mnist", dir, NULL, DT_SPLIT_TRAIN, 0, &ds, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "train-images-idx3-ubyte' has 32x32 images; problem 'mnist' needs 28x28");

	/* A labels file where the images should be. */
	uint8_t labels[5] = { 1, 2, 3, 4, 5 };
	uint32_t dims[1] = { 5 };
	write_idx(dir, "train-images-idx3-ubyte", 0, 1, dims, labels);
	dt_err_clear(&err);
	DT_CHECK_INT_EQ(dt_problem_load("mnist", dir, NULL, DT_SPLIT_TRAIN, 0, &ds, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "train-images-idx3-ubyte' is not an image file");
	DT_CHECK_CONTAINS(err.msg, "found 1 of uint8");

	/* A valid file with no examples. */
	uint32_t none[3] = { 0, 28, 28 };
	write_idx(dir, "train-images-idx3-ubyte", 0, 3, none, labels);
	dt_err_clear(&err);
	DT_CHECK_INT_EQ(dt_problem_load("mnist", dir, NULL, DT_SPLIT_TRAIN, 0, &ds, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "train-images-idx3-ubyte' holds no images");
}

DT_TEST(data_problem, corrupt_file_error_names_it)
{
	const char *dir = dt_test_tmpdir();
	write_split(dir, "train", 0, 5, 5, 28, -1);
	char path[600];
	snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte", dir);
	dt_test_write_file(path, "\x1f\x8b garbage", 10);
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_problem_load("mnist", dir, NULL, DT_SPLIT_TRAIN, 0, &ds, &err), DT_DATA);
	char want[700];
	snprintf(want, sizeof(want), "cannot load IDX file '%s'", path);
	DT_CHECK_CONTAINS(err.msg, want);
}

DT_TEST_TIMEOUT(data_problem, synthetic_is_deterministic_per_seed, 60)
{
	struct dt_dataset a, b, c, t;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load("synthetic", NULL, NULL, DT_SPLIT_TRAIN, 42, &a, &err), &err);
	DT_CHECK_OK(dt_problem_load("synthetic", NULL, NULL, DT_SPLIT_TEST, 42, &t, &err), &err);
	DT_CHECK_OK(dt_problem_load("synthetic", NULL, NULL, DT_SPLIT_TRAIN, 42, &b, &err), &err);
	DT_CHECK_OK(dt_problem_load("synthetic", "ignored", NULL, DT_SPLIT_TRAIN, 43, &c, &err), &err);

	DT_CHECK_UINT_EQ(a.count, 60000);
	DT_CHECK_UINT_EQ(t.count, 10000);
	DT_CHECK_INT_EQ(a.height * a.width * a.channels, 784);
	DT_CHECK(memcmp(a.images, b.images, (size_t)a.count * 784) == 0);
	DT_CHECK(memcmp(a.labels, b.labels, a.count) == 0);
	DT_CHECK(a.mean == b.mean && a.std == b.std);
	DT_CHECK(memcmp(a.images, c.images, (size_t)a.count * 784) != 0);
	DT_CHECK(memcmp(a.labels, c.labels, a.count) != 0);
	DT_CHECK(memcmp(a.images, t.images, (size_t)t.count * 784) != 0);
	/* Both splits share the normalization. */
	DT_CHECK(a.mean == t.mean && a.std == t.std);

	uint32_t per_class[10] = { 0 };
	for (uint32_t i = 0; i < a.count; i++) {
		DT_CHECK(a.labels[i] < 10);
		per_class[a.labels[i]]++;
	}
	for (int k = 0; k < 10; k++)
		DT_CHECK_UINT_EQ(per_class[k], 6000);
	dt_dataset_release(&a);
	dt_dataset_release(&b);
	dt_dataset_release(&c);
	dt_dataset_release(&t);
}

DT_TEST_TIMEOUT(data_problem, synthetic_is_learnable_and_its_normalization_fits, 60)
{
	struct dt_dataset tr, te;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load("synthetic", NULL, NULL, DT_SPLIT_TRAIN, 7, &tr, &err), &err);
	DT_CHECK_OK(dt_problem_load("synthetic", NULL, NULL, DT_SPLIT_TEST, 7, &te, &err), &err);

	/* Nearest class mean, fitted on train, scored on test: a learnable
	 * problem scores far above chance (10 %). */
	static double centroid[10][784];
	uint32_t n[10] = { 0 };
	double sum = 0.0, sum2 = 0.0;
	for (uint32_t i = 0; i < tr.count; i++) {
		const uint8_t *px = tr.images + (size_t)i * 784;
		for (int k = 0; k < 784; k++) {
			centroid[tr.labels[i]][k] += px[k];
			double v = px[k] / 255.0;
			sum += v;
			sum2 += v * v;
		}
		n[tr.labels[i]]++;
	}
	double mean = sum / (tr.count * 784.0), std = sqrt(sum2 / (tr.count * 784.0) - mean * mean);
	DT_CHECK_NEAR(tr.mean, mean, 0.002);
	DT_CHECK_NEAR(tr.std, std, 0.002);
	for (int c = 0; c < 10; c++)
		for (int k = 0; k < 784; k++)
			centroid[c][k] /= n[c];
	uint32_t correct = 0;
	for (uint32_t i = 0; i < te.count; i++) {
		const uint8_t *px = te.images + (size_t)i * 784;
		int best = -1;
		double best_d = 0.0;
		for (int c = 0; c < 10; c++) {
			double d = 0.0;
			for (int k = 0; k < 784; k++)
				d += (px[k] - centroid[c][k]) * (px[k] - centroid[c][k]);
			if (best < 0 || d < best_d) {
				best = c;
				best_d = d;
			}
		}
		correct += best == te.labels[i];
	}
	printf("synthetic: nearest class mean scores %.2f %% on test\n", 100.0 * correct / te.count);
	DT_CHECK(correct > te.count * 9 / 10);
	dt_dataset_release(&tr);
	dt_dataset_release(&te);
}
