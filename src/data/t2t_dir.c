/*
 * t2t_dir.c — a t2t data directory of a problem dtrain has no entry for
 * (data/t2t_dir.h): its kind from the first records, its vocabulary by
 * t2t's names, its splits as text sets or decoded images.
 */
#include "data/t2t_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "data/example.h"
#include "data/image.h"
#include "data/subword.h"
#include "data/text.h"
#include "data/tfrecord.h"

/* Records of the first training shard that decide the kind. */
#define PROBE_RECORDS 64
/* A shard is at most this big, decompressed (as text_files.c). */
#define MAX_FILE_BYTES ((size_t)4 << 30)
/* t2t's byte-level encoder: 256 bytes after PAD and EOS. */
#define BYTE_VOCAB (256 + DT_TEXT_RESERVED)

enum kind { K_TEXT2TEXT, K_LM, K_TEXT_CLASS, K_IMAGE_CLASS };

static const char *const kind_names[] = {
	[K_TEXT2TEXT] = "text to text (int64 inputs and targets)",
	[K_LM] = "language model (int64 targets alone)",
	[K_TEXT_CLASS] = "text classification (int64 inputs, one-element targets)",
	[K_IMAGE_CLASS] = "image classification (image/encoded, image/class/label)",
};

struct probe {
	enum kind kind;
	int64_t max_id;   /* the largest inputs or targets id seen (text kinds) */
	int records;      /* records read */
};

struct shards {
	char **paths;
	int n;
};

static void shards_release(struct shards *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->paths[i]);
	free(s->paths);
	s->paths = NULL;
	s->n = 0;
}

/* Files of one split name ("train", "dev", "test"), through data/text.h's
 * finder (which takes a split, not a name). */
static void find_split(const char *dir, const char *problem, const char *name, struct shards *s)
{
	enum dt_split split = strcmp(name, "train") == 0 ? DT_SPLIT_TRAIN : strcmp(name, "dev") == 0 ? DT_SPLIT_DEV
													: DT_SPLIT_TEST;
	dt_text_files_find(dir, problem, split, &s->paths, &s->n);
	if (split == DT_SPLIT_TEST && s->n && !strstr(s->paths[0] + strlen(dir), "-test-"))
		shards_release(s); /* the finder fell back to dev: count only the test files here */
}

int dt_t2t_dir_has(const char *problem, const char *data_dir)
{
	if (!problem || !*problem || !data_dir || !*data_dir)
		return 0;
	struct shards s = { 0 };
	find_split(data_dir, problem, "train", &s);
	const int has = s.n > 0;
	shards_release(&s);
	return has;
}

static int is_int64(const struct dt_feature *f)
{
	return f && (f->kind == DT_FEATURE_INT64 || (f->kind == DT_FEATURE_NONE && f->count == 0));
}

/* "inputs, targets" — the Example's feature names, for messages. */
static void feature_list(const struct dt_example *ex, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int i = 0; i < ex->count && used < cap; i++) {
		int n = snprintf(buf + used, cap - used, "%s'%.*s'", i ? ", " : "", (int)ex->f[i].name_len, ex->f[i].name);
		if (n > 0)
			used += (size_t)n;
	}
	if (!ex->count)
		snprintf(buf, cap, "none");
}

/* The kind of one Example, or DT_DATA naming its features. */
static enum dt_status record_kind(const struct dt_example *ex, const char *path, int64_t rec, enum kind *kind,
				  struct dt_err *err)
{
	const struct dt_feature *img = dt_example_find(ex, "image/encoded");
	const struct dt_feature *label = dt_example_find(ex, "image/class/label");
	const struct dt_feature *in = dt_example_find(ex, "inputs"), *tg = dt_example_find(ex, "targets");
	char names[512];
	if (img && label && img->kind == DT_FEATURE_BYTES && img->count >= 1 && label->kind == DT_FEATURE_INT64 &&
	    label->count >= 1) {
		*kind = K_IMAGE_CLASS;
		return DT_OK;
	}
	if (is_int64(tg) && (!in || is_int64(in))) {
		*kind = !in ? K_LM : tg->count == 1 ? K_TEXT_CLASS : K_TEXT2TEXT;
		return DT_OK;
	}
	feature_list(ex, names, sizeof(names));
	enum dt_status st = dt_err_set(err, DT_DATA, "'%s' record %lld: an Example with features %s is none of the "
						     "kinds of t2t problem dtrain reads", path, (long long)rec, names);
	dt_err_hint(err, "dtrain reads int64 'inputs' and 'targets' (text to text, text classification), 'targets' "
			 "alone (language model), or 'image/encoded' with int64 'image/class/label' (image classification)");
	return st;
}

static int64_t max_of(const struct dt_feature *f, int64_t m)
{
	for (int64_t i = 0; f && f->kind == DT_FEATURE_INT64 && i < f->count; i++)
		if (f->i64[i] > m)
			m = f->i64[i];
	return m;
}

/* Reads up to PROBE_RECORDS records of `path`: every one must be of one
 * kind, except that a text-to-text problem may have one-element targets
 * in some records (a single word), so text classification needs all. */
static enum dt_status probe_shard(const char *path, struct probe *p, struct dt_err *err)
{
	struct dt_tfrecord_reader r;
	enum dt_status st = dt_tfrecord_open(&r, path, MAX_FILE_BYTES, err);
	p->records = 0;
	p->max_id = -1;
	int first = 1;
	while (!st && p->records < PROBE_RECORDS) {
		const uint8_t *data;
		size_t len;
		const int64_t rec = r.index;
		if ((st = dt_tfrecord_next(&r, &data, &len, err)) || !data)
			break;
		struct dt_example ex;
		if ((st = dt_example_parse(data, len, &ex, err))) {
			st = dt_err_prefix(err, "'%s' record %lld", path, (long long)rec);
			break;
		}
		enum kind k = K_TEXT2TEXT;
		st = record_kind(&ex, path, rec, &k, err);
		if (!st && first) {
			p->kind = k;
			first = 0;
		} else if (!st && k != p->kind) {
			const int text_pair = (k == K_TEXT2TEXT || k == K_TEXT_CLASS) &&
					      (p->kind == K_TEXT2TEXT || p->kind == K_TEXT_CLASS);
			if (text_pair)
				p->kind = K_TEXT2TEXT;
			else
				st = dt_err_set(err, DT_DATA, "'%s' record %lld is a %s example, record 0 a %s one", path,
						(long long)rec, kind_names[k], kind_names[p->kind]);
		}
		if (!st)
			p->max_id = max_of(dt_example_find(&ex, "targets"), max_of(dt_example_find(&ex, "inputs"), p->max_id));
		dt_example_free(&ex);
		p->records++;
	}
	dt_tfrecord_close(&r);
	if (!st && p->records == 0)
		st = dt_err_set(err, DT_DATA, "'%s' holds no record", path);
	return st;
}

/* ---- the vocabulary ------------------------------------------------------------ */

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int all_digits(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* The vocabulary file of `problem` in dir by t2t's names (data/t2t_dir.h),
 * into path; 0 when none. `looked` gets the patterns, for messages. */
static int find_vocab(const char *problem, const char *dir, char *path, size_t cap, char *looked, size_t lcap)
{
	char pair[64] = "";
	if (strncmp(problem, "translate_", 10) == 0) {
		const char *p = problem + 10, *us = strchr(p, '_');
		const size_t len = us ? (size_t)(us - p) : strlen(p);
		if (len > 0 && len < sizeof(pair))
			snprintf(pair, sizeof(pair), "%.*s", (int)len, p);
	}
	if (*pair)
		snprintf(looked, lcap, "'%s/vocab.%s.SIZE.subwords' and '%s/vocab.%s.SIZE'", dir, problem, dir, pair);
	else
		snprintf(looked, lcap, "'%s/vocab.%s.SIZE.subwords'", dir, problem);
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	char best[512] = "", best_old[512] = "";
	char want[300], want_old[100];
	snprintf(want, sizeof(want), "vocab.%s.", problem);
	snprintf(want_old, sizeof(want_old), "vocab.%s.", pair);
	for (struct dirent *e; (e = readdir(d));) {
		const char *n = e->d_name;
		if (strlen(n) >= sizeof(best))
			continue;
		if (strncmp(n, want, strlen(want)) == 0 && ends_with(n, ".subwords")) {
			char size[64];
			snprintf(size, sizeof(size), "%.*s", (int)(strlen(n) - strlen(want) - 9), n + strlen(want));
			if (all_digits(size) && (!*best || strcmp(n, best) < 0))
				snprintf(best, sizeof(best), "%s", n);
		} else if (*pair && strncmp(n, want_old, strlen(want_old)) == 0 && all_digits(n + strlen(want_old))) {
			if (!*best_old || strcmp(n, best_old) < 0)
				snprintf(best_old, sizeof(best_old), "%s", n);
		}
	}
	closedir(d);
	const char *pick = *best ? best : best_old;
	if (!*pick)
		return 0;
	snprintf(path, cap, "%s/%s", dir, pick);
	return 1;
}

/* The text set's vocabulary: --vocab_file, t2t's names, or byte-level. */
static enum dt_status set_vocab(const char *problem, const char *dir, const struct dt_data_options *o,
				const struct probe *p, struct dt_text_set *t, char *what, size_t wcap,
				struct dt_err *err)
{
	char path[4096], looked[1200];
	int found = 0;
	if (o && o->vocab_file[0]) {
		snprintf(path, sizeof(path), "%s", o->vocab_file);
		if (access(path, R_OK) != 0)
			return dt_err_set(err, DT_USAGE, "--vocab_file '%s': %s", path, strerror(errno));
		found = 1;
	} else {
		found = find_vocab(problem, dir, path, sizeof(path), looked, sizeof(looked));
	}
	if (found) {
		enum dt_status st = dt_subword_load(path, &t->subword, err);
		if (st)
			return st;
		t->encoder = DT_TEXT_SUBWORD;
		t->input_vocab = t->target_vocab = dt_subword_size(t->subword);
		const char *slash = strrchr(path, '/');
		snprintf(what, wcap, "%d subwords from '%.900s'", t->input_vocab, slash && !o->vocab_file[0] ? slash + 1 : path);
		return DT_OK;
	}
	if (p->max_id < BYTE_VOCAB) {
		t->encoder = DT_TEXT_BYTES;
		t->input_vocab = t->target_vocab = BYTE_VOCAB;
		snprintf(what, wcap, "byte-level, %d ids (no vocabulary file: looked for %s)", BYTE_VOCAB, looked);
		return DT_OK;
	}
	enum dt_status st = dt_err_set(err, DT_USAGE, "problem '%s': its shards hold ids up to %lld and no vocabulary "
						      "was found (looked for %s)", problem, (long long)p->max_id, looked);
	dt_err_hint(err, "pass --vocab_file=PATH, the SubwordTextEncoder file the shards were written with");
	return st;
}

/* ---- images ---------------------------------------------------------------------- */

struct images {
	uint8_t *pixels;          /* (count, h, w, c) */
	uint8_t *labels;          /* (count) */
	uint32_t count, cap;
	int h, w, c;              /* of the first image; 0 before it */
	int64_t max_label;
};

/* 1 when every pixel of an RGB image is grey. */
static int is_grey(const struct dt_image *im)
{
	const size_t n = (size_t)im->height * (size_t)im->width;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *px = im->pixels + 3 * i;
		if (px[0] != px[1] || px[1] != px[2])
			return 0;
	}
	return 1;
}

/* Appends one record's image (decoded, at the first image's size and
 * channels) and label to `im`; decode 0 reads the label alone. */
static enum dt_status add_image(struct images *im, const struct dt_example *ex, int decode, const char *path,
				int64_t rec, struct dt_err *err)
{
	const struct dt_feature *f = dt_example_find(ex, "image/encoded");
	const struct dt_feature *l = dt_example_find(ex, "image/class/label");
	if (!f || !l || f->kind != DT_FEATURE_BYTES || f->count < 1 || l->kind != DT_FEATURE_INT64 || l->count < 1)
		return dt_err_set(err, DT_DATA, "'%s' record %lld: no 'image/encoded' bytes with an int64 "
						"'image/class/label' (the problem's first shard has them)", path, (long long)rec);
	const int64_t label = l->i64[0];
	if (label < 0 || label >= DT_MAX_CLASSES)
		return dt_err_set(err, DT_DATA, "'%s' record %lld: label %lld is outside 0-%d", path, (long long)rec,
				  (long long)label, DT_MAX_CLASSES - 1);
	if (label > im->max_label)
		im->max_label = label;
	if (!decode)
		return DT_OK;
	struct dt_image pic = { 0 };
	enum dt_status st = dt_image_decode(f->bytes[0], f->bytes_len[0], 3, 0, &pic, err);
	if (st)
		return dt_err_prefix(err, "'%s' record %lld: image/encoded", path, (long long)rec);
	if (!im->h) {
		im->h = pic.height;
		im->w = pic.width;
		im->c = is_grey(&pic) ? 1 : 3;
	}
	const size_t size = (size_t)im->h * (size_t)im->w * (size_t)im->c;
	if (im->count == im->cap) {
		im->cap = im->cap ? 2 * im->cap : 1024;
		im->pixels = dt_xrealloc(im->pixels, (size_t)im->cap * size);
		im->labels = dt_xrealloc(im->labels, im->cap);
	}
	uint8_t *dst = im->pixels + (size_t)im->count * size;
	uint8_t *rgb = pic.pixels;
	uint8_t *resized = NULL;
	if (pic.height != im->h || pic.width != im->w) {
		resized = dt_xmalloc((size_t)im->h * (size_t)im->w * 3);
		dt_image_resample(&pic, (struct dt_image_window){ 0, 0, (float)pic.height, (float)pic.width }, 0, im->h,
				  im->w, resized);
		rgb = resized;
	}
	if (im->c == 3)
		memcpy(dst, rgb, size);
	else
		dt_image_convert(dst, 1, rgb, 3, (size_t)im->h * (size_t)im->w);
	free(resized);
	dt_image_release(&pic);
	im->labels[im->count++] = (uint8_t)label;
	return DT_OK;
}

static enum dt_status read_images(const struct shards *s, int decode, struct images *im, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	for (int f = 0; f < s->n && !st; f++) {
		struct dt_tfrecord_reader r;
		st = dt_tfrecord_open(&r, s->paths[f], MAX_FILE_BYTES, err);
		while (!st) {
			const uint8_t *data;
			size_t len;
			const int64_t rec = r.index;
			if ((st = dt_tfrecord_next(&r, &data, &len, err)) || !data)
				break;
			struct dt_example ex;
			if ((st = dt_example_parse(data, len, &ex, err))) {
				st = dt_err_prefix(err, "'%s' record %lld", s->paths[f], (long long)rec);
				break;
			}
			st = add_image(im, &ex, decode, s->paths[f], rec, err);
			dt_example_free(&ex);
			if (!st && im->count >= UINT32_MAX - 1)
				st = dt_err_set(err, DT_DATA, "'%s': more than 2^32 - 2 images", s->paths[f]);
		}
		dt_tfrecord_close(&r);
	}
	return st;
}

/* An image split: decoded into out->images; the classes are the training
 * split's (its largest label + 1), whichever split this is. */
static enum dt_status load_images(const struct shards *train, const struct shards *s, struct dt_dataset *out,
				  struct dt_err *err)
{
	struct images im = { .max_label = -1 };
	struct images tr = { .max_label = -1 };
	enum dt_status st = read_images(s, 1, &im, err);
	if (!st && s != train)
		st = read_images(train, 0, &tr, err);
	const int64_t classes = (s != train ? tr.max_label : im.max_label) + 1;
	if (!st && im.count == 0)
		st = dt_err_set(err, DT_DATA, "%d file(s) from '%s' hold no record", s->n, s->paths[0]);
	if (!st && s != train && im.max_label >= classes)
		st = dt_err_set(err, DT_DATA, "'%s' holds label %lld but the training shards' largest is %lld",
				s->paths[0], (long long)im.max_label, (long long)classes - 1);
	if (!st && classes < 2)
		st = dt_err_set(err, DT_DATA, "the training shards hold one class only (label %lld)", (long long)classes - 1);
	if (st) {
		free(im.pixels);
		free(im.labels);
		return st;
	}
	out->count = im.count;
	out->height = im.h;
	out->width = im.w;
	out->channels = im.c;
	out->num_classes = (int)classes;
	out->images = im.pixels;
	out->labels = im.labels;
	out->mean = 0.5f; /* as image_folder: (p/255 - 0.5) / 0.5 */
	out->std = 0.5f;
	return DT_OK;
}

/* ---- loading ------------------------------------------------------------------- */

static const char *const split_names[] = { "train", "test", "dev" };

enum dt_status dt_t2t_dir_load(const char *problem, const char *data_dir, const struct dt_data_options *o,
			       enum dt_split split, struct dt_dataset *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	struct shards train = { 0 }, dev = { 0 }, test = { 0 };
	find_split(data_dir, problem, "train", &train);
	find_split(data_dir, problem, "dev", &dev);
	find_split(data_dir, problem, "test", &test);
	const struct shards *s = split == DT_SPLIT_TRAIN ? &train
				 : split == DT_SPLIT_DEV ? &dev
				 : test.n	      ? &test
							: &dev;
	enum dt_status st = DT_OK;
	struct probe p = { 0 };
	char vocab[2400] = "";
	if (!train.n) {
		st = dt_err_set(err, DT_USAGE, "problem '%s': no training shards '%s/%s-train-NNNNN-of-NNNNN'", problem,
				data_dir, problem);
		goto out;
	}
	if (!s->n) {
		st = dt_err_set(err, DT_DATA, "problem '%s': no %s shards in '%s' (looked for %s-%s-NNNNN-of-NNNNN)",
				problem, split_names[split], data_dir, problem,
				split == DT_SPLIT_TEST ? "test-… or -dev" : split_names[split]);
		dt_err_hint(err, "t2t-datagen writes '-dev-' shards beside the training ones; or train with --noeval");
		goto out;
	}
	if ((st = probe_shard(train.paths[0], &p, err)))
		goto out;
	if (p.kind == K_TEXT_CLASS) {
		st = dt_err_set(err, DT_USAGE, "problem '%s' is %s: not built yet", problem, kind_names[p.kind]);
		dt_err_hint(err, "dtrain trains t2t's text-to-text, language-model and image-classification data dirs; "
				 "t2t's transformer_encoder with a class head is not built");
		goto out;
	}
	if (s != &train) { /* the split's shards must be of the training shards' kind */
		struct probe q = { 0 };
		if ((st = probe_shard(s->paths[0], &q, err)))
			goto out;
		/* a text-to-text dev split may happen to have one-element targets only */
		if (q.kind != p.kind && !(p.kind == K_TEXT2TEXT && q.kind == K_TEXT_CLASS)) {
			st = dt_err_set(err, DT_DATA, "'%s' holds %s examples but the training shards hold %s ones",
					s->paths[0], kind_names[q.kind], kind_names[p.kind]);
			dt_err_hint(err, "is it a shard of another problem?");
			goto out;
		}
	}
	if (p.kind == K_IMAGE_CLASS) {
		st = load_images(&train, s, out, err);
		if (!st)
			snprintf(vocab, sizeof(vocab), "%d classes, %dx%dx%d images", out->num_classes, out->height,
				 out->width, out->channels);
	} else {
		struct dt_text_set *t = dt_xcalloc(1, sizeof(*t));
		out->text = t;
		t->has_inputs = p.kind == K_TEXT2TEXT;
		t->text2text = 1;
		st = set_vocab(problem, data_dir, o, &p, t, vocab, sizeof(vocab), err);
		if (!st && (st = dt_text_files_load(s->paths, s->n, t, err)) && t->encoder == DT_TEXT_SUBWORD)
			dt_err_hint(err, "the vocabulary has %d ids: is it the one these shards were written with?",
				    t->target_vocab);
		out->count = (uint32_t)t->count;
	}
	if (st)
		goto out;
	const char *slash = strrchr(s->paths[0], '/');
	snprintf(out->source, sizeof(out->source), "%s: %d t2t data file(s) (TFRecord, %s) in %s", problem, s->n,
		 p.kind == K_IMAGE_CLASS ? "images" : "text", data_dir);
	if (split == DT_SPLIT_TRAIN)
		dt_info("t2t data dir: problem %s is %s; %s; shards: %d train, %d dev, %d test in %s", problem,
			kind_names[p.kind], vocab, train.n, dev.n, test.n, data_dir);
	dt_info("%s split: %u examples from %d t2t data file(s) (%s) in %s", split_names[split], out->count, s->n,
		slash ? slash + 1 : s->paths[0], data_dir);
out:
	if (st)
		dt_dataset_release(out);
	shards_release(&train);
	shards_release(&dev);
	shards_release(&test);
	return st;
}
