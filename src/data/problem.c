/*
 * problem.c — the problem registry: IDX problems read from files, the
 * synthetic problem generated in memory, and the entries of the file
 * problems (image_folder.c, csv.c) with the validation split they share.
 */
#include "data/problem.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "base/strutil.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/internal.h"
#include "data/t2t_dir.h"
#include "data/text.h"

#define IMAGE_SIDE 28
#define NUM_CLASSES 10

/* Synthetic data: 10 class prototypes plus per-pixel noise. */
#define SYNTH_TRAIN 60000u
#define SYNTH_TEST 10000u
#define SYNTH_BLOBS 4
#define SYNTH_NOISE 64 /* noise is triangular in [-SYNTH_NOISE, SYNTH_NOISE) */

enum source_kind { FROM_IDX, FROM_SYNTHETIC, FROM_IMAGE_FOLDER, FROM_CSV };

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
	{ "image_folder", FROM_IMAGE_FOLDER, NULL,
	  "pass --data_dir DIR holding one sub-directory of images (jpg, png, bmp, gif) per class", 0.0f, 0.0f },
	{ "csv", FROM_CSV, NULL, "pass --data_dir FILE.csv (a header row, numeric features) and --label_column NAME",
	  0.0f, 0.0f },
};

/* The image problems above (image_folder.h, csv.h), then the text problems of data/text.h. */
static const char *const problem_names[] = {
	"fashion_mnist", "mnist", "synthetic", "image_folder", "csv", "algorithmic_identity_binary40",
	"algorithmic_reverse_binary40", "algorithmic_addition_decimal40", "algorithmic_multiplication_decimal40",
	"algorithmic_sort_problem", "text2text_tmpdir",
};

const char *const *dt_problem_names(size_t *count)
{
	_Static_assert(DT_ARRAY_LEN(problem_names) == DT_ARRAY_LEN(problems) + 6, "one name per problem");
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

void dt_data_options_init(struct dt_data_options *o)
{
	memset(o, 0, sizeof(*o));
	o->image_height = 256;
	o->image_width = 256;
	o->channels = 3;
	o->bad_images = DT_BAD_IMAGES_FAIL;
	o->data_threads = 2;
}

void dt_dataset_release(struct dt_dataset *ds)
{
	if (!ds)
		return;
	free(ds->images);
	dt_image_files_free(ds->files);
	free(ds->features);
	free(ds->labels);
	dt_text_set_free(ds->text);
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

	struct dt_idx img, lbl;
	st = dt_idx_load(img_path, DT_IDX_DEFAULT_MAX_BYTES, &img, err);
	if (st)
		return st;
	if (img.type != DT_IDX_U8 || img.ndims != 3) {
		st = dt_err_set(err, DT_DATA, "'%s' is not an image file: expected 3 dimensions of uint8 "
				"(magic 0x00000803), found %d of %s", img_path, img.ndims, dt_idx_type_name(img.type));
		goto fail_img;
	}
	if (img.dims[0] == 0) {
		st = dt_err_set(err, DT_DATA, "'%s' holds no images", img_path);
		goto fail_img;
	}
	if (img.dims[1] != IMAGE_SIDE || img.dims[2] != IMAGE_SIDE) {
		st = dt_err_set(err, DT_DATA, "'%s' has %" PRIu32 "x%" PRIu32 " images; problem '%s' needs %dx%d",
				img_path, img.dims[1], img.dims[2], pr->name, IMAGE_SIDE, IMAGE_SIDE);
		goto fail_img;
	}
	snprintf(stem, sizeof(stem), "%s-labels-idx1-ubyte", prefix);
	st = find_file(pr, dir, stem, lbl_path, sizeof(lbl_path), err);
	if (st)
		goto fail_img;
	st = dt_idx_load(lbl_path, DT_IDX_DEFAULT_MAX_BYTES, &lbl, err);
	if (st)
		goto fail_img;
	if (lbl.type != DT_IDX_U8 || lbl.ndims != 1) {
		st = dt_err_set(err, DT_DATA, "'%s' is not a label file: expected 1 dimension of uint8 "
				"(magic 0x00000801), found %d of %s", lbl_path, lbl.ndims, dt_idx_type_name(lbl.type));
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
	snprintf(out->source, sizeof(out->source), "%s %s from %s", pr->name,
		 split == DT_SPLIT_TRAIN ? "train" : "test", dir);
	return DT_OK;

fail_both:
	dt_idx_release(&lbl);
fail_img:
	dt_idx_release(&img);
	return st;
}

/* Ten prototype images, each a few soft blobs, from the seed alone so both
 * splits share them. A blob is a paraboloid, amp * (1 - d^2 / r^2) inside
 * radius r, in integers so every host makes the same bytes. */
static void synth_prototypes(uint64_t seed, uint8_t *proto /* (10, 28, 28) */)
{
	struct dt_rng rng;
	dt_rng_derive(&rng, seed, "synthetic/prototypes", 0);
	for (int c = 0; c < NUM_CLASSES; c++) {
		int cx[SYNTH_BLOBS], cy[SYNTH_BLOBS], r2[SYNTH_BLOBS], amp[SYNTH_BLOBS];
		for (int b = 0; b < SYNTH_BLOBS; b++) {
			cx[b] = 4 + (int)dt_rng_below(&rng, 20);
			cy[b] = 4 + (int)dt_rng_below(&rng, 20);
			int r = 3 + (int)dt_rng_below(&rng, 6);
			r2[b] = r * r;
			amp[b] = 120 + (int)dt_rng_below(&rng, 136);
		}
		for (int y = 0; y < IMAGE_SIDE; y++) {
			for (int x = 0; x < IMAGE_SIDE; x++) {
				int v = 0;
				for (int b = 0; b < SYNTH_BLOBS; b++) {
					int d2 = (x - cx[b]) * (x - cx[b]) + (y - cy[b]) * (y - cy[b]);
					if (d2 < r2[b])
						v += amp[b] * (r2[b] - d2) / r2[b];
				}
				proto[(c * IMAGE_SIDE + y) * IMAGE_SIDE + x] = (uint8_t)(v > 255 ? 255 : v);
			}
		}
	}
}

static uint8_t clamp_u8(int v)
{
	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The noise added to a pixel from its two random bytes a and b. */
static int synth_noise(int a, int b)
{
	return ((a + b) * SYNTH_NOISE >> 8) - SYNTH_NOISE;
}

/* Mean and std of p/255 under the generating distribution itself (classes
 * equally likely, every (a, b) noise pair equally likely, clamping
 * included), so both splits get the same exact numbers. */
static void synth_normalization(const uint8_t *proto, double *mean, double *std)
{
	double hist[256] = { 0 }, pair[511] = { 0 }; /* pixel values; a + b */
	for (size_t i = 0; i < NUM_CLASSES * IMAGE_SIDE * IMAGE_SIDE; i++)
		hist[proto[i]] += 1.0;
	for (int a = 0; a < 256; a++)
		for (int b = 0; b < 256; b++)
			pair[a + b] += 1.0;
	double total = (double)(NUM_CLASSES * IMAGE_SIDE * IMAGE_SIDE) * 65536.0, sum = 0.0, sum2 = 0.0;
	for (int v = 0; v < 256; v++) {
		if (hist[v] == 0.0)
			continue;
		for (int s = 0; s < 511; s++) {
			double p = clamp_u8(v + synth_noise(s, 0)) / 255.0, w = hist[v] * pair[s];
			sum += w * p;
			sum2 += w * p * p;
		}
	}
	*mean = sum / total;
	*std = sqrt(sum2 / total - *mean * *mean);
}

static enum dt_status load_synthetic(const struct problem *pr, enum dt_split split, uint64_t seed,
				     struct dt_dataset *out)
{
	enum { PIXELS = IMAGE_SIDE * IMAGE_SIDE };
	uint8_t proto[NUM_CLASSES * PIXELS];
	synth_prototypes(seed, proto);

	double mean, std;
	synth_normalization(proto, &mean, &std);

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
	out->std = (float)std;
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
	/* Noise: two random bytes per pixel, their sum scaled to [-N, N) is
	 * triangular. Drawing a whole image's bytes first keeps the pixel loop
	 * free of calls so it vectorizes: 47M pixels must take well under 0.3 s. */
	for (uint32_t i = 0; i < count; i++) {
		uint8_t bytes[2 * PIXELS];
		for (int k = 0; k < 2 * PIXELS; k += 8) {
			uint64_t r = dt_rng_next(&rng);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
			r = __builtin_bswap64(r); /* the same bytes on every host */
#endif
			memcpy(bytes + k, &r, sizeof(r));
		}
		const uint8_t *src = proto + (size_t)out->labels[i] * PIXELS;
		uint8_t *dst = out->images + (size_t)i * PIXELS;
		for (int k = 0; k < PIXELS; k++) {
			dst[k] = clamp_u8(src[k] + synth_noise(bytes[2 * k], bytes[2 * k + 1]));
		}
	}
	return DT_OK;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static enum dt_status check_options(const struct dt_data_options *o, struct dt_err *err)
{
	if (!(o->validation_split >= 0 && o->validation_split < 1))
		return dt_err_set(err, DT_USAGE, "--validation_split must be in [0, 1), got %g", o->validation_split);
	if (o->image_height < 1 || o->image_width < 1 || o->image_height > 8192 || o->image_width > 8192)
		return dt_err_set(err, DT_USAGE, "--image_size %dx%d is out of range (1 to 8192 a side)", o->image_height,
				  o->image_width);
	if (o->channels != 1 && o->channels != 3 && o->channels != 4)
		return dt_err_set(err, DT_USAGE, "image channels must be 1, 3 or 4, got %d", o->channels);
	if (!(o->random_crop == 0 || (o->random_crop >= 0.05 && o->random_crop <= 1)))
		return dt_err_set(err, DT_USAGE, "--random_crop must be 0 (off) or a fraction in [0.05, 1], got %g",
				  o->random_crop);
	if (o->data_threads < 1 || o->data_threads > 64)
		return dt_err_set(err, DT_USAGE, "--data_threads must be in [1, 64], got %d", o->data_threads);
	return DT_OK;
}

enum dt_status dt__split_select(uint32_t count, double fraction, uint64_t seed, enum dt_split split,
				const char *source, uint32_t **out, uint32_t *n, struct dt_err *err)
{
	*out = NULL;
	*n = 0;
	if (split == DT_SPLIT_TEST && fraction <= 0) {
		enum dt_status st = dt_err_set(err, DT_USAGE, "'%s' has no test split without --validation_split",
					       source);
		dt_err_hint(err, "pass --validation_split=0.2 to hold out 20%% as the test split (Keras's "
			    "validation subset), or --noeval");
		return st;
	}
	const uint32_t nval = (uint32_t)floor(fraction * count);
	uint32_t *perm = dt_xmallocarray(count ? count : 1, sizeof(uint32_t));
	for (uint32_t i = 0; i < count; i++)
		perm[i] = i;
	if (fraction > 0) {
		struct dt_rng rng;
		dt_rng_derive(&rng, seed, "validation_split", 0);
		dt_rng_shuffle_u32(&rng, perm, count);
	}
	const uint32_t from = split == DT_SPLIT_TRAIN ? 0 : count - nval;
	const uint32_t to = split == DT_SPLIT_TRAIN ? count - nval : count;
	if (to == from) {
		free(perm);
		return dt_err_set(err, DT_DATA, "--validation_split=%g of the %u examples of '%s' leaves the %s split "
				  "empty", fraction, count, source, split == DT_SPLIT_TRAIN ? "training" : "test");
	}
	memmove(perm, perm + from, (size_t)(to - from) * sizeof(uint32_t));
	*n = to - from;
	/* ascending: each split keeps the source's order */
	qsort(perm, *n, sizeof(uint32_t), cmp_u32);
	*out = perm;
	return DT_OK;
}

enum dt_status dt_problem_load(const char *problem, const char *data_dir, const struct dt_data_options *opts,
			       enum dt_split split, uint64_t seed, struct dt_dataset *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (dt_text_problem_is(problem))
		return dt_text_problem_load(problem, data_dir, split, seed, out, err);
	const struct problem *pr = find_problem(problem);
	if (!pr && dt_t2t_dir_has(problem, data_dir)) {
		struct dt_data_options defaults;
		dt_data_options_init(&defaults);
		return dt_t2t_dir_load(problem, data_dir, opts ? opts : &defaults, split, out, err);
	}
	if (!pr) {
		size_t used = 0;
		char list[512] = "";
		for (size_t i = 0; i < DT_ARRAY_LEN(problem_names) && used < sizeof(list); i++) {
			int n = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", problem_names[i]);
			if (n > 0)
				used += (size_t)n;
		}
		const char *name = problem ? problem : "";
		enum dt_status st;
		if (data_dir && *data_dir)
			st = dt_err_set(err, DT_USAGE, "unknown problem '%s': no built-in entry, and '%s' holds no t2t "
						       "shards '%s-train-NNNNN-of-NNNNN' (built-in problems: %s)",
					name, data_dir, name, list);
		else
			st = dt_err_set(err, DT_USAGE, "unknown problem '%s' (valid problems: %s)", name, list);
		size_t nt;
		const char *const *text = dt_text_problem_names(&nt);
		char gen[512];
		dt_join(gen, sizeof(gen), text, nt, ", ");
		dt_err_hint(err, "a problem t2t-datagen wrote trains by its name from --data_dir=DIR holding its shards "
				 "(%s-train-*, %s-dev-*) and vocabulary (vocab.%s.SIZE.subwords, or --vocab_file): write "
				 "them with `t2t-datagen --problem=%s --data_dir=DIR --tmp_dir=TMP`; `dtrain datagen "
				 "--problem=NAME --data_dir=DIR` writes those of %s",
			    name, name, name, name, gen);
		return st;
	}
	if (pr->kind == FROM_SYNTHETIC)
		return load_synthetic(pr, split, seed, out);

	const char *dir = data_dir && *data_dir ? data_dir : pr->default_dir;
	if (!dir) {
		enum dt_status st = dt_err_set(err, DT_USAGE, "problem '%s' needs --data_dir", pr->name);
		if (pr->kind == FROM_IDX)
			dt_err_hint(err, "pass --data_dir DIR with train-images-idx3-ubyte[.gz], "
				    "train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz]");
		else
			dt_err_hint(err, "%s", pr->missing_hint);
		return st;
	}
	if (pr->kind == FROM_IDX)
		return load_idx_problem(pr, dir, split, out, err);
	struct dt_data_options defaults;
	dt_data_options_init(&defaults);
	if (!opts)
		opts = &defaults;
	enum dt_status st = check_options(opts, err);
	if (!st)
		st = pr->kind == FROM_CSV ? dt__csv_problem_load(dir, opts, split, seed, out, err)
					  : dt__image_folder_load(dir, opts, split, seed, out, err);
	return st;
}
