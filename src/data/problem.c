/*
 * problem.c — the problem registry: IDX problems read from files and the
 * synthetic problem generated in memory.
 */
#include "data/problem.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "data/idx.h"

#define IMAGE_SIDE 28
#define NUM_CLASSES 10

/* Synthetic data: 10 class prototypes plus per-pixel noise. */
#define SYNTH_TRAIN 60000u
#define SYNTH_TEST 10000u
#define SYNTH_BLOBS 4
#define SYNTH_NOISE 64 /* noise is triangular in [-SYNTH_NOISE, SYNTH_NOISE) */

enum source_kind { FROM_IDX, FROM_SYNTHETIC };

struct problem {
	const char *name;
	enum source_kind kind;
	const char *default_dir; /* NULL: needs --data_dir (IDX) or no files (synthetic) */
	const char *missing_hint;
	float mean, std;          /* of p/255 over the training set */
};

static const struct problem problems[] = {
	{ "fashion_mnist", FROM_IDX, "/usr/share/datasets/fashion-mnist",
	  "install the Debian package dataset-fashion-mnist or pass --data_dir", 0.2860f, 0.3530f },
	{ "mnist", FROM_IDX, NULL,
	  "download the four MNIST IDX files (train-images-idx3-ubyte.gz, ...) into that directory "
	  "or pass the right --data_dir",
	  0.1307f, 0.3081f },
	{ "synthetic", FROM_SYNTHETIC, NULL, NULL, 0.0f, 0.0f },
};

static const char *const problem_names[] = { "fashion_mnist", "mnist", "synthetic" };

const char *const *dt_problem_names(size_t *count)
{
	_Static_assert(DT_ARRAY_LEN(problem_names) == DT_ARRAY_LEN(problems), "one name per problem");
	if (count)
		*count = DT_ARRAY_LEN(problem_names);
	return problem_names;
}

static const struct problem *find_problem(const char *name)
{
	for (size_t i = 0; name && i < DT_ARRAY_LEN(problems); i++)
		if (strcmp(problems[i].name, name) == 0)
			return &problems[i];
	return NULL;
}

const char *dt_problem_default_dir(const char *problem)
{
	const struct problem *p = find_problem(problem);
	return p ? p->default_dir : NULL;
}

void dt_dataset_release(struct dt_dataset *ds)
{
	if (!ds)
		return;
	free(ds->images);
	free(ds->labels);
	memset(ds, 0, sizeof(*ds));
}

static int file_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* Finds "<dir>/<stem>.gz" or "<dir>/<stem>"; fails naming both. */
static enum dt_status find_file(const struct problem *pr, const char *dir, const char *stem, char *path,
				size_t cap, struct dt_err *err)
{
	int n = snprintf(path, cap, "%s/%s.gz", dir, stem);
	if (n < 0 || (size_t)n >= cap)
		return dt_err_set(err, DT_USAGE, "data directory path '%s' is too long", dir);
	if (file_exists(path))
		return DT_OK;
	snprintf(path, cap, "%s/%s", dir, stem);
	if (file_exists(path))
		return DT_OK;
	enum dt_status st = dt_err_set(err, DT_IO, "cannot find '%s/%s.gz' or '%s/%s' for problem '%s'", dir, stem,
				       dir, stem, pr->name);
	dt_err_hint(err, "%s", pr->missing_hint);
	return st;
}

static enum dt_status load_idx_problem(const struct problem *pr, const char *dir, enum dt_split split,
				       struct dt_dataset *out, struct dt_err *err)
{
	const char *prefix = split == DT_SPLIT_TRAIN ? "train" : "t10k";
	char stem[64], img_path[4096], lbl_path[4096];
	snprintf(stem, sizeof(stem), "%s-images-idx3-ubyte", prefix);
	enum dt_status st = find_file(pr, dir, stem, img_path, sizeof(img_path), err);
	if (st)
		return st;
	snprintf(stem, sizeof(stem), "%s-labels-idx1-ubyte", prefix);
	st = find_file(pr, dir, stem, lbl_path, sizeof(lbl_path), err);
	if (st)
		return st;

	struct dt_idx img, lbl;
	st = dt_idx_load(img_path, DT_IDX_DEFAULT_MAX_BYTES, &img, err);
	if (st)
		return st;
	if (img.type != DT_IDX_U8 || img.ndims != 3) {
		st = dt_err_set(err, DT_DATA, "'%s' is not an image file: expected uint8 with 3 dimensions "
				"(magic 0x00000803), found %s with %d", img_path, dt_idx_type_name(img.type), img.ndims);
		goto fail_img;
	}
	if (img.dims[1] != IMAGE_SIDE || img.dims[2] != IMAGE_SIDE) {
		st = dt_err_set(err, DT_DATA, "'%s' has %" PRIu32 "x%" PRIu32 " images; problem '%s' needs %dx%d",
				img_path, img.dims[1], img.dims[2], pr->name, IMAGE_SIDE, IMAGE_SIDE);
		goto fail_img;
	}
	st = dt_idx_load(lbl_path, DT_IDX_DEFAULT_MAX_BYTES, &lbl, err);
	if (st)
		goto fail_img;
	if (lbl.type != DT_IDX_U8 || lbl.ndims != 1) {
		st = dt_err_set(err, DT_DATA, "'%s' is not a label file: expected uint8 with 1 dimension "
				"(magic 0x00000801), found %s with %d", lbl_path, dt_idx_type_name(lbl.type), lbl.ndims);
		goto fail_both;
	}
	if (lbl.dims[0] != img.dims[0]) {
		st = dt_err_set(err, DT_DATA, "'%s' has %" PRIu32 " labels but '%s' has %" PRIu32 " images",
				lbl_path, lbl.dims[0], img_path, img.dims[0]);
		goto fail_both;
	}
	for (uint32_t i = 0; i < lbl.dims[0]; i++) {
		if (lbl.data[i] >= NUM_CLASSES) {
			st = dt_err_set(err, DT_DATA, "'%s': label %d of example %" PRIu32
					" is out of range (problem '%s' has %d classes)",
					lbl_path, lbl.data[i], i, pr->name, NUM_CLASSES);
			goto fail_both;
		}
	}

	memset(out, 0, sizeof(*out));
	out->count = img.dims[0];
	out->height = IMAGE_SIDE;
	out->width = IMAGE_SIDE;
	out->channels = 1;
	out->num_classes = NUM_CLASSES;
	out->images = img.data; /* ownership moves to the dataset */
	out->labels = lbl.data;
	out->mean = pr->mean;
	out->std = pr->std;
	snprintf(out->source, sizeof(out->source), "%s %s from '%s'", pr->name,
		 split == DT_SPLIT_TRAIN ? "train" : "test", dir);
	return DT_OK;

fail_both:
	dt_idx_release(&lbl);
fail_img:
	dt_idx_release(&img);
	return st;
}

/* Ten prototype images, each a few soft blobs, from the seed alone so both
 * splits share them. */
static void synth_prototypes(uint64_t seed, uint8_t *proto /* (10, 28, 28) */)
{
	struct dt_rng rng;
	dt_rng_derive(&rng, seed, "synthetic/prototypes", 0);
	for (int c = 0; c < NUM_CLASSES; c++) {
		float cx[SYNTH_BLOBS], cy[SYNTH_BLOBS], r2[SYNTH_BLOBS], amp[SYNTH_BLOBS];
		for (int b = 0; b < SYNTH_BLOBS; b++) {
			cx[b] = 4.0f + 20.0f * dt_rng_uniform(&rng);
			cy[b] = 4.0f + 20.0f * dt_rng_uniform(&rng);
			float r = 2.0f + 4.0f * dt_rng_uniform(&rng);
			r2[b] = 2.0f * r * r;
			amp[b] = 120.0f + 135.0f * dt_rng_uniform(&rng);
		}
		for (int y = 0; y < IMAGE_SIDE; y++) {
			for (int x = 0; x < IMAGE_SIDE; x++) {
				float v = 0.0f;
				for (int b = 0; b < SYNTH_BLOBS; b++) {
					float dx = (float)x - cx[b], dy = (float)y - cy[b];
					v += amp[b] * expf(-(dx * dx + dy * dy) / r2[b]);
				}
				proto[(c * IMAGE_SIDE + y) * IMAGE_SIDE + x] = (uint8_t)(v > 255.0f ? 255.0f : v);
			}
		}
	}
}

static uint8_t clamp_u8(int v)
{
	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static enum dt_status load_synthetic(const struct problem *pr, enum dt_split split, uint64_t seed,
				     struct dt_dataset *out)
{
	enum { PIXELS = IMAGE_SIDE * IMAGE_SIDE };
	uint8_t proto[NUM_CLASSES * PIXELS];
	synth_prototypes(seed, proto);

	/* Normalization from the prototypes and the noise alone, so both splits
	 * agree: mean of the prototypes; variance of the prototypes plus that of
	 * the triangular noise (N^2/6 for two uniforms on [0, N) summed). */
	double sum = 0.0, sum2 = 0.0;
	for (size_t i = 0; i < sizeof(proto); i++) {
		double v = proto[i] / 255.0;
		sum += v;
		sum2 += v * v;
	}
	double mean = sum / (double)sizeof(proto);
	double noise = SYNTH_NOISE / 255.0;
	double var = sum2 / (double)sizeof(proto) - mean * mean + noise * noise / 6.0;

	uint32_t count = split == DT_SPLIT_TRAIN ? SYNTH_TRAIN : SYNTH_TEST;
	memset(out, 0, sizeof(*out));
	out->count = count;
	out->height = IMAGE_SIDE;
	out->width = IMAGE_SIDE;
	out->channels = 1;
	out->num_classes = NUM_CLASSES;
	out->images = dt_xmallocarray(count, PIXELS);
	out->labels = dt_xmalloc(count);
	out->mean = (float)mean;
	out->std = (float)sqrt(var);
	snprintf(out->source, sizeof(out->source), "%s %s generated from seed %" PRIu64, pr->name,
		 split == DT_SPLIT_TRAIN ? "train" : "test", seed);

	struct dt_rng rng;
	dt_rng_derive(&rng, seed, split == DT_SPLIT_TRAIN ? "synthetic/train" : "synthetic/test", 0);
	/* Balanced labels in a shuffled order, so any shard sees every class. */
	for (uint32_t i = 0; i < count; i++)
		out->labels[i] = (uint8_t)(i % NUM_CLASSES);
	for (uint32_t i = count; i > 1; i--) {
		uint32_t j = (uint32_t)dt_rng_below(&rng, i);
		uint8_t t = out->labels[i - 1];
		out->labels[i - 1] = out->labels[j];
		out->labels[j] = t;
	}
	/* Noise: each 64-bit draw gives four pixels two bytes each; the sum of
	 * two bytes, scaled, is triangular noise. Tight enough for 47M pixels. */
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *src = proto + (size_t)out->labels[i] * PIXELS;
		uint8_t *dst = out->images + (size_t)i * PIXELS;
		for (int k = 0; k < PIXELS; k += 4) {
			uint64_t r = dt_rng_next(&rng);
			for (int j = 0; j < 4; j++) {
				int a = (int)(r >> (16 * j) & 0xff), b = (int)(r >> (16 * j + 8) & 0xff);
				int n = ((a + b) * SYNTH_NOISE >> 8) - SYNTH_NOISE;
				dst[k + j] = clamp_u8(src[k + j] + n);
			}
		}
	}
	return DT_OK;
}

enum dt_status dt_problem_load(const char *problem, const char *data_dir, enum dt_split split, uint64_t seed,
			       struct dt_dataset *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	const struct problem *pr = find_problem(problem);
	if (!pr) {
		char list[256] = "";
		size_t used = 0;
		for (size_t i = 0; i < DT_ARRAY_LEN(problems) && used < sizeof(list); i++) {
			int n = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", problems[i].name);
			if (n > 0)
				used += (size_t)n;
		}
		return dt_err_set(err, DT_USAGE, "unknown problem '%s' (valid problems: %s)", problem ? problem : "",
				  list);
	}
	if (pr->kind == FROM_SYNTHETIC)
		return load_synthetic(pr, split, seed, out);

	const char *dir = data_dir && *data_dir ? data_dir : pr->default_dir;
	if (!dir) {
		enum dt_status st = dt_err_set(err, DT_USAGE, "problem '%s' needs --data_dir", pr->name);
		dt_err_hint(err, "pass --data_dir DIR with train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
			    "t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz]");
		return st;
	}
	return load_idx_problem(pr, dir, split, out, err);
}
