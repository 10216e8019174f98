/*
 * image_folder.c — the image_folder problem: listing, the split, the check
 * pass, and reading one example for the pipeline (image_folder.h).
 */
#include "data/image_folder.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/rng.h"
#include "data/image.h"
#include "data/internal.h"

#define MAX_FILE_BYTES ((size_t)256 << 20) /* one image file */
#define MAX_DEPTH 16                       /* sub-directories inside a class */
#define MAX_FILES (1u << 26)

struct list {
	char **items;
	uint32_t n, cap;
};

static void list_push(struct list *l, char *s)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->items = dt_xrealloc(l->items, (size_t)l->cap * sizeof(char *));
	}
	l->items[l->n++] = s;
}

static void list_free(struct list *l)
{
	for (uint32_t i = 0; i < l->n; i++)
		free(l->items[i]);
	free(l->items);
	memset(l, 0, sizeof(*l));
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_image_extension(const char *name)
{
	static const char *const exts[] = { ".jpg", ".jpeg", ".png", ".bmp", ".gif" };
	size_t n = strlen(name);
	for (size_t i = 0; i < DT_ARRAY_LEN(exts); i++) {
		size_t e = strlen(exts[i]);
		if (n > e && strcasecmp(name + n - e, exts[i]) == 0)
			return 1;
	}
	return 0;
}

static char *join(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *s = dt_xmalloc(n);
	snprintf(s, n, "%s/%s", a, b);
	return s;
}

/* Adds the image files under `dir` (recursively) to `files`. */
static enum dt_status walk(const char *dir, int depth, struct list *files, struct dt_err *err)
{
	DIR *d = opendir(dir);
	if (!d)
		return dt_err_set(err, DT_IO, "cannot read directory '%s': %s", dir, strerror(errno));
	enum dt_status st = DT_OK;
	struct dirent *e;
	while (!st && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char *path = join(dir, e->d_name);
		struct stat sb;
		if (stat(path, &sb) != 0) {
			free(path); /* a dangling link: not an image Keras would list either */
			continue;
		}
		if (S_ISDIR(sb.st_mode)) {
			if (depth >= MAX_DEPTH)
				st = dt_err_set(err, DT_DATA, "'%s' is nested more than %d directories deep", path,
						MAX_DEPTH);
			else
				st = walk(path, depth + 1, files, err);
			free(path);
		} else if (S_ISREG(sb.st_mode) && has_image_extension(e->d_name)) {
			if (files->n >= MAX_FILES)
				st = dt_err_set(err, DT_DATA, "more than %u image files under '%s'", MAX_FILES, dir);
			list_push(files, path);
		} else {
			free(path);
		}
	}
	closedir(d);
	return st;
}

/* The class directories of `dir`, sorted. */
static enum dt_status list_classes(const char *dir, struct list *classes, struct dt_err *err)
{
	DIR *d = opendir(dir);
	if (!d) {
		enum dt_status st = dt_err_set(err, DT_IO, "cannot read image folder '%s': %s", dir, strerror(errno));
		dt_err_hint(err, "--data_dir of problem 'image_folder' is a directory with one sub-directory of images "
			    "per class");
		return st;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char *path = join(dir, e->d_name);
		struct stat sb;
		if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
			list_push(classes, dt_xstrdup(e->d_name));
		free(path);
	}
	closedir(d);
	if (classes->n > 1)
		qsort(classes->items, classes->n, sizeof(char *), cmp_str);
	return DT_OK;
}

enum dt_status dt__read_file(const char *path, size_t max_bytes, uint8_t **buf, size_t *len, struct dt_err *err)
{
	*buf = NULL;
	*len = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return dt_err_set(err, DT_IO, "cannot open '%s': %s", path, strerror(errno));
	struct stat sb;
	if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
		fclose(f);
		return dt_err_set(err, DT_IO, "'%s' is not a regular file", path);
	}
	if ((uint64_t)sb.st_size > max_bytes) {
		fclose(f);
		return dt_err_set(err, DT_DATA, "'%s' has %lld bytes, more than the limit of %zu", path,
				  (long long)sb.st_size, max_bytes);
	}
	size_t n = (size_t)sb.st_size;
	uint8_t *b = dt_xmalloc(n ? n : 1);
	size_t got = fread(b, 1, n, f);
	int bad = ferror(f);
	fclose(f);
	if (got != n || bad) {
		free(b);
		return dt_err_set(err, DT_IO, "cannot read '%s': %s", path, bad ? strerror(errno) : "file shrank");
	}
	*buf = b;
	*len = n;
	return DT_OK;
}

/* ---- the check pass ------------------------------------------------------ */

struct check {
	struct dt_image_files *f;
	char **why;            /* (count) NULL, or why the file fails */
	pthread_mutex_t mu;
	uint32_t next;
};

static void check_one(struct check *c, uint32_t i)
{
	struct dt_err e = DT_ERR_INIT;
	uint8_t *buf;
	size_t len;
	enum dt_status st = dt__read_file(c->f->paths[i], MAX_FILE_BYTES, &buf, &len, &e);
	if (!st) {
		struct dt_image im;
		st = dt_image_decode(buf, len, c->f->channels, 1, &im, &e);
		dt_image_release(&im);
		free(buf);
	}
	if (st)
		c->why[i] = dt_xstrdup(e.msg);
}

static void *check_main(void *arg)
{
	struct check *c = arg;
	for (;;) {
		pthread_mutex_lock(&c->mu);
		uint32_t i = c->next < c->f->count ? c->next++ : c->f->count;
		pthread_mutex_unlock(&c->mu);
		if (i >= c->f->count)
			return NULL;
		check_one(c, i);
	}
}

/* Decodes every file once; drops or refuses the bad ones by o->bad_images. */
static enum dt_status check_files(struct dt_image_files *f, uint8_t *labels, const struct dt_data_options *o,
				  struct dt_err *err)
{
	struct check c = { .f = f, .why = dt_xcalloc(f->count ? f->count : 1, sizeof(char *)) };
	pthread_mutex_init(&c.mu, NULL);
	pthread_t th[64];
	int started = 0;
	for (int t = 1; t < f->threads && t < 64; t++, started++)
		if (pthread_create(&th[started], NULL, check_main, &c) != 0)
			break;
	check_main(&c);
	for (int t = 0; t < started; t++)
		pthread_join(th[t], NULL);
	pthread_mutex_destroy(&c.mu);

	enum dt_status st = DT_OK;
	uint32_t kept = 0, bad = 0;
	for (uint32_t i = 0; i < f->count; i++) {
		if (!c.why[i]) {
			f->paths[kept] = f->paths[i];
			labels[kept++] = labels[i];
			continue;
		}
		if (!st && o->bad_images == DT_BAD_IMAGES_FAIL) {
			st = dt_err_set(err, DT_DATA, "cannot use image '%s': %s", f->paths[i], c.why[i]);
			dt_err_hint(err, "remove or fix the file, or pass --bad_images=skip to leave bad images out");
		} else if (o->bad_images == DT_BAD_IMAGES_SKIP) {
			dt_log(DT_LOG_WARN, "skipping image '%s': %s", f->paths[i], c.why[i]);
		}
		bad++;
		free(f->paths[i]);
		free(c.why[i]);
	}
	free(c.why);
	f->count = kept;
	if (!st && bad)
		dt_log(DT_LOG_WARN, "left out %u bad image(s) of %u (--bad_images=skip)", bad, kept + bad);
	return st;
}

/* ---- loading ------------------------------------------------------------- */

void dt_image_files_free(struct dt_image_files *f)
{
	if (!f)
		return;
	for (uint32_t i = 0; i < f->count; i++)
		free(f->paths[i]);
	free(f->paths);
	free(f);
}

enum dt_status dt__image_folder_load(const char *dir, const struct dt_data_options *o, enum dt_split split,
				     uint64_t seed, struct dt_dataset *out, struct dt_err *err)
{
	struct list classes = { 0 }, files = { 0 };
	uint8_t *all_labels = NULL;
	enum dt_status st = list_classes(dir, &classes, err);
	if (st)
		goto done;
	if (classes.n < 2 || classes.n > DT_MAX_CLASSES) {
		st = dt_err_set(err, DT_DATA, "image folder '%s' has %u class directories; dtrain needs 2 to %d",
				dir, classes.n, DT_MAX_CLASSES);
		dt_err_hint(err, "put each class's images in its own sub-directory: '%s/<class>/<image>.jpg'", dir);
		goto done;
	}
	for (uint32_t c = 0; c < classes.n && !st; c++) {
		char *cdir = join(dir, classes.items[c]);
		uint32_t first = files.n;
		st = walk(cdir, 0, &files, err);
		free(cdir);
		if (files.n > first)
			qsort(files.items + first, files.n - first, sizeof(char *), cmp_str);
		all_labels = dt_xrealloc(all_labels, files.n ? files.n : 1);
		for (uint32_t i = first; i < files.n; i++)
			all_labels[i] = (uint8_t)c;
	}
	if (st)
		goto done;
	if (files.n == 0) {
		st = dt_err_set(err, DT_DATA, "no images in '%s' (looked for *.jpg, *.jpeg, *.png, *.bmp, *.gif in its "
				"%u class directories)", dir, classes.n);
		goto done;
	}

	uint32_t *pick, n;
	if ((st = dt__split_select(files.n, o->validation_split, seed, split, dir, &pick, &n, err)))
		goto done;
	struct dt_image_files *f = dt_xcalloc(1, sizeof(*f));
	f->paths = dt_xmallocarray(n, sizeof(char *));
	uint8_t *labels = dt_xmalloc(n);
	for (uint32_t i = 0; i < n; i++) {
		f->paths[i] = files.items[pick[i]];
		files.items[pick[i]] = NULL;
		labels[i] = all_labels[pick[i]];
	}
	free(pick);
	f->count = n;
	f->height = o->image_height;
	f->width = o->image_width;
	f->channels = o->channels;
	f->crop_to_aspect_ratio = o->crop_to_aspect_ratio;
	f->augment = split == DT_SPLIT_TRAIN;
	f->random_flip = o->random_flip;
	f->random_crop = (float)o->random_crop;
	f->threads = o->data_threads;
	f->seed = seed;
	if ((st = check_files(f, labels, o, err)) || f->count == 0) {
		if (!st)
			st = dt_err_set(err, DT_DATA, "no usable images in the %s split of '%s'",
					split == DT_SPLIT_TRAIN ? "training" : "test", dir);
		dt_image_files_free(f);
		free(labels);
		goto done;
	}
	memset(out, 0, sizeof(*out));
	out->count = f->count;
	out->height = f->height;
	out->width = f->width;
	out->channels = f->channels;
	out->num_classes = (int)classes.n;
	out->files = f;
	out->labels = labels;
	/* (p/255 - 0.5) / 0.5 = p/127.5 - 1: MobileNetV2's preprocess_input. */
	out->mean = 0.5f;
	out->std = 0.5f;
	snprintf(out->source, sizeof(out->source), "image_folder %s from %s (%u classes)",
		 split == DT_SPLIT_TRAIN ? "train" : "test", dir, classes.n);
	dt_log(DT_LOG_INFO, "%s: %u images of %ux%ux%d", out->source, f->count, f->height, f->width, f->channels);
done:
	for (uint32_t i = 0; i < files.n; i++)
		free(files.items[i]);
	free(files.items);
	list_free(&classes);
	free(all_labels);
	return st;
}

/* ---- one example --------------------------------------------------------- */

enum dt_status dt_image_files_read(const struct dt_image_files *f, uint32_t i, int64_t epoch, uint8_t *out,
				   struct dt_err *err)
{
	const size_t bytes = (size_t)f->height * (size_t)f->width * (size_t)f->channels;
	uint8_t *buf;
	size_t len;
	struct dt_image im;
	enum dt_status st = dt__read_file(f->paths[i], MAX_FILE_BYTES, &buf, &len, err);
	if (!st) {
		st = dt_image_decode(buf, len, f->channels, 0, &im, err);
		free(buf);
	}
	if (st) {
		memset(out, 0, bytes);
		return dt_err_prefix(err, "image '%s'", f->paths[i]);
	}
	struct dt_image_window win = { 0, 0, (float)im.height, (float)im.width };
	if (f->crop_to_aspect_ratio)
		win = dt_image_aspect_window(im.height, im.width, f->height, f->width);
	int flip = 0;
	if (f->random_crop > 0 || f->random_flip) {
		struct dt_rng rng;
		dt_rng_derive(&rng, f->seed, "image_folder/augment", (uint64_t)epoch << 32 ^ i);
		float ch = win.h * f->random_crop, cw = win.w * f->random_crop;
		if (f->random_crop > 0) {
			/* training: anywhere inside the window; test: its centre */
			float ty = f->augment ? dt_rng_uniform(&rng) : 0.5f, tx = f->augment ? dt_rng_uniform(&rng) : 0.5f;
			win.y += (win.h - ch) * ty;
			win.x += (win.w - cw) * tx;
			win.h = ch;
			win.w = cw;
		}
		flip = f->augment && f->random_flip && (dt_rng_next(&rng) >> 63);
	}
	dt_image_resample(&im, win, flip, f->height, f->width, out);
	dt_image_release(&im);
	return DT_OK;
}
