/* Unit tests for the image_folder problem and the image decoders
 * (src/data/image*.c, image_folder.c): a folder of real JPEG, PNG, GIF and
 * BMP files written by PIL (tests/tools/make_images.py, python3-pil), with
 * grey-scale and RGBA images, a non-image file, a file that is text named
 * .jpg and a JPEG cut short; classes sorted by name; the seeded, disjoint
 * validation split; bilinear resizing against hand-computed values; the
 * pipeline decoding on its threads with the same batches however it runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dt_test.h"
#include "base/err.h"
#include "data/image.h"
#include "data/image_folder.h"
#include "data/pipeline.h"
#include "data/problem.h"

/* Writes the fixture folder of make_images.py (mode "fixture" or
 * "fixture_bad") into <tmp>/<name>; skips without python3-pil. */
static const char *make_folder(const char *mode, const char *name)
{
	static char dir[512];
	dt_test_path(dir, sizeof(dir), name);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "-c", "import PIL", NULL }, NULL, 30);
	int have_pil = r.exit_code == 0;
	dt_run_release(&r);
	if (!have_pil)
		DT_SKIP("python3-pil missing (scripts/install-deps.sh installs it)");
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/make_images.py", mode, dir, NULL }, NULL, 60);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	return dir;
}

static struct dt_data_options opts(int h, int w, int channels, double split)
{
	struct dt_data_options o;
	dt_data_options_init(&o);
	o.image_height = h;
	o.image_width = w;
	o.channels = channels;
	o.validation_split = split;
	return o;
}

struct expected {
	char path[128];
	int label, r, g, b, grey;
};

static int read_expected(const char *dir, struct expected *e, int cap)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/expected.txt", dir);
	FILE *f = fopen(path, "r");
	DT_CHECK(f != NULL);
	int n = 0;
	while (n < cap && fscanf(f, "%127s %d %d %d %d %d", e[n].path, &e[n].label, &e[n].r, &e[n].g, &e[n].b,
				 &e[n].grey) == 6)
		n++;
	fclose(f);
	return n;
}

static const struct expected *find(const struct expected *e, int n, const char *dir, const char *path)
{
	size_t dl = strlen(dir);
	DT_CHECK(strncmp(path, dir, dl) == 0 && path[dl] == '/');
	for (int i = 0; i < n; i++)
		if (strcmp(e[i].path, path + dl + 1) == 0)
			return &e[i];
	dt_test_fail(__FILE__, __LINE__, "'%s' was read but is not in expected.txt", path);
}

DT_TEST_TIMEOUT(data_image, folder_reads_every_format_sorted_by_class_with_its_colours, 120)
{
	const char *dir = make_folder("fixture", "imgs");
	struct expected ex[64];
	const int nex = read_expected(dir, ex, 64);
	DT_CHECK_INT_EQ(nex, 21);
	for (int channels = 1; channels <= 4; channels += channels == 1 ? 2 : 1) {
		struct dt_data_options o = opts(8, 6, channels, 0);
		struct dt_dataset ds;
		struct dt_err err = DT_ERR_INIT;
		DT_CHECK_OK(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 1, &ds, &err), &err);
		/* 7 images in each of 3 classes; readme.txt and .hidden_class are not read */
		DT_CHECK_INT_EQ(ds.count, 21);
		DT_CHECK_INT_EQ(ds.num_classes, 3);
		DT_CHECK(ds.files && !ds.images && !ds.features);
		DT_CHECK_INT_EQ(ds.height, 8);
		DT_CHECK_INT_EQ(ds.width, 6);
		DT_CHECK_INT_EQ(ds.channels, channels);
		uint8_t px[8 * 6 * 4];
		for (uint32_t i = 0; i < ds.count; i++) {
			const char *path = ds.files->paths[i];
			const struct expected *e = find(ex, nex, dir, path);
			/* classes by name, bytewise: C_birds 0, a_cats 1, b_dogs 2 */
			DT_CHECK_INT_EQ(ds.labels[i], e->label);
			if (i > 0 && ds.labels[i] == ds.labels[i - 1])
				DT_CHECK(strcmp(ds.files->paths[i - 1], path) < 0);
			DT_CHECK_OK(dt_image_files_read(ds.files, i, 0, px, &err), &err);
			const int want[4] = { channels == 1 ? e->grey : e->r, e->g, e->b, 255 };
			/* JPEG is lossy: a flat colour comes back within a few levels */
			const int tol = strstr(path, ".jp") ? 6 : 0;
			const int keeps_alpha = channels == 4 && strstr(path, "rgba.png");
			for (int k = 0; k < 8 * 6 * channels; k++) {
				if (keeps_alpha && k % 4 == 3) {
					/* alpha 0 on the left half of the file, 255 on the right */
					const int col = k / 4 % 6;
					if (col == 0 || col == 5)
						DT_CHECK_INT_EQ(px[k], col == 0 ? 0 : 255);
					continue;
				}
				int d = px[k] - want[k % channels];
				if (d > tol || d < -tol)
					dt_test_fail(__FILE__, __LINE__, "'%s' in %d channels: byte %d is %d, want %d", path,
						     channels, k, px[k], want[k % channels]);
			}
		}
		dt_dataset_release(&ds);
	}
}

DT_TEST_TIMEOUT(data_image, a_bad_image_is_named_and_fails_or_is_skipped, 120)
{
	const char *dir = make_folder("fixture_bad", "imgs");
	struct dt_data_options o = opts(8, 8, 3, 0);
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_DATA);
	/* the first bad file in order is a_cats/cut.jpg: named with libjpeg's reason */
	DT_CHECK_CONTAINS(err.msg, "cannot use image '");
	DT_CHECK_CONTAINS(err.msg, "a_cats/cut.jpg': corrupt JPEG: Premature end of JPEG file");
	DT_CHECK_CONTAINS(err.msg, "--bad_images=skip");

	o.bad_images = DT_BAD_IMAGES_SKIP;
	dt_err_clear(&err);
	DT_CHECK_OK(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 1, &ds, &err), &err);
	DT_CHECK_INT_EQ(ds.count, 21);
	for (uint32_t i = 0; i < ds.count; i++)
		DT_CHECK(!strstr(ds.files->paths[i], "cut.jpg") && !strstr(ds.files->paths[i], "notes.jpg"));
	dt_dataset_release(&ds);

	/* text named .jpg, decoded directly: the sniffer names its first bytes */
	struct dt_image im;
	const char *text = "hello, I am text\n";
	DT_CHECK_INT_EQ(dt_image_decode((const uint8_t *)text, strlen(text), 3, 0, &im, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "not an image: it starts with bytes 68 65 6c 6c 6f 2c 20 49");
	DT_CHECK_INT_EQ(dt_image_decode((const uint8_t *)"", 0, 3, 0, &im, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "empty");
}

DT_TEST_TIMEOUT(data_image, validation_split_is_disjoint_complete_and_seeded, 120)
{
	const char *dir = make_folder("fixture", "imgs");
	struct dt_data_options o = opts(4, 4, 3, 0.25);
	struct dt_dataset tr, te, tr2, other;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 9, &tr, &err), &err);
	DT_CHECK_OK(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TEST, 9, &te, &err), &err);
	DT_CHECK_OK(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 9, &tr2, &err), &err);
	DT_CHECK_OK(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 10, &other, &err), &err);
	/* Keras: floor(0.25 * 21) = 5 held out */
	DT_CHECK_INT_EQ(te.count, 5);
	DT_CHECK_INT_EQ(tr.count, 16);
	for (uint32_t i = 0; i < te.count; i++)
		for (uint32_t j = 0; j < tr.count; j++)
			DT_CHECK(strcmp(te.files->paths[i], tr.files->paths[j]) != 0);
	int same = 1;
	for (uint32_t i = 0; i < tr.count; i++) {
		DT_CHECK_STR_EQ(tr.files->paths[i], tr2.files->paths[i]);
		DT_CHECK_INT_EQ(tr.labels[i], tr2.labels[i]);
		same &= strcmp(tr.files->paths[i], other.files->paths[i]) == 0;
	}
	DT_CHECK(!same); /* another seed holds out other files */
	dt_dataset_release(&tr);
	dt_dataset_release(&te);
	dt_dataset_release(&tr2);
	dt_dataset_release(&other);

	o.validation_split = 0;
	DT_CHECK_INT_EQ(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TEST, 9, &te, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "no test split without --validation_split");
	o.validation_split = 1.5;
	DT_CHECK_INT_EQ(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 9, &te, &err), DT_USAGE);
}

DT_TEST(data_image, folder_errors_name_the_directory)
{
	char dir[512];
	dt_test_path(dir, sizeof(dir), "none");
	struct dt_data_options o = opts(4, 4, 3, 0);
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, "cannot read image folder");
	DT_CHECK_INT_EQ(dt_problem_load("image_folder", NULL, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "needs --data_dir");
	/* one class only */
	dt_test_path(dir, sizeof(dir), "one");
	char sub[600];
	snprintf(sub, sizeof(sub), "%s/only", dir);
	DT_CHECK(mkdir(dir, 0755) == 0 && mkdir(sub, 0755) == 0);
	DT_CHECK_INT_EQ(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "has 1 class directories");
	/* two classes, no images */
	snprintf(sub, sizeof(sub), "%s/second", dir);
	DT_CHECK(mkdir(sub, 0755) == 0);
	DT_CHECK_INT_EQ(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "no images in");
}

DT_TEST(data_image, bilinear_resize_matches_half_pixel_centres)
{
	/* 1x2 grey image [0, 100] to width 4: tf.image.resize samples at
	 * x = (j + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25 -> clamped
	 * 0, 0.25, 0.75, 1 -> 0, 25, 75, 100. */
	uint8_t src_px[2] = { 0, 100 };
	struct dt_image src = { 1, 2, 1, src_px };
	uint8_t out[4];
	dt_image_resample(&src, (struct dt_image_window){ 0, 0, 1, 2 }, 0, 1, 4, out);
	DT_CHECK_INT_EQ(out[0], 0);
	DT_CHECK_INT_EQ(out[1], 25);
	DT_CHECK_INT_EQ(out[2], 75);
	DT_CHECK_INT_EQ(out[3], 100);
	dt_image_resample(&src, (struct dt_image_window){ 0, 0, 1, 2 }, 1, 1, 4, out);
	DT_CHECK_INT_EQ(out[0], 100); /* flipped */
	DT_CHECK_INT_EQ(out[3], 0);
	/* down to one pixel: the centre, (0 + 100) / 2 */
	dt_image_resample(&src, (struct dt_image_window){ 0, 0, 1, 2 }, 0, 1, 1, out);
	DT_CHECK_INT_EQ(out[0], 50);
	/* Keras's crop_to_aspect_ratio: 300x200 (h x w) to a square crops 200x200 at row 50 */
	struct dt_image_window w = dt_image_aspect_window(300, 200, 64, 64);
	DT_CHECK_NEAR(w.y, 50, 0);
	DT_CHECK_NEAR(w.x, 0, 0);
	DT_CHECK_NEAR(w.h, 200, 0);
	DT_CHECK_NEAR(w.w, 200, 0);
	w = dt_image_aspect_window(100, 400, 50, 100);
	DT_CHECK_NEAR(w.x, 100, 0);
	DT_CHECK_NEAR(w.w, 200, 0);
	DT_CHECK_NEAR(w.h, 100, 0);
}

DT_TEST(data_image, channel_conversion_follows_tensorflow)
{
	const uint8_t rgba[4] = { 200, 100, 50, 0 };
	uint8_t out[4];
	dt_image_convert(out, 3, rgba, 4, 1); /* alpha dropped, not composited */
	DT_CHECK_INT_EQ(out[0], 200);
	DT_CHECK_INT_EQ(out[1], 100);
	DT_CHECK_INT_EQ(out[2], 50);
	dt_image_convert(out, 1, rgba, 4, 1);
	DT_CHECK_INT_EQ(out[0], (77 * 200 + 150 * 100 + 29 * 50 + 128) >> 8);
	const uint8_t ga[2] = { 9, 7 };
	dt_image_convert(out, 4, ga, 2, 1);
	DT_CHECK(out[0] == 9 && out[1] == 9 && out[2] == 9 && out[3] == 7);
	dt_image_convert(out, 4, rgba, 3, 1);
	DT_CHECK_INT_EQ(out[3], 255);
}

DT_TEST(data_image, bmp_reader_is_strict)
{
	/* a 2x2 24-bit bottom-up BMP: rows padded to 8 bytes */
	uint8_t b[54 + 16] = { 'B', 'M' };
	b[10] = 54;
	b[14] = 40;
	b[18] = 2;
	b[22] = 2;
	b[26] = 1;
	b[28] = 24;
	const uint8_t bottom[6] = { 255, 0, 0, 0, 255, 0 }, top[6] = { 0, 0, 255, 255, 255, 255 }; /* B,G,R */
	memcpy(b + 54, bottom, 6);
	memcpy(b + 62, top, 6);
	struct dt_image im;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_image_decode(b, sizeof(b), 3, 0, &im, &err), &err);
	DT_CHECK_INT_EQ(im.height, 2);
	DT_CHECK_INT_EQ(im.width, 2);
	const uint8_t want[12] = { 255, 0, 0, 255, 255, 255, 0, 0, 255, 0, 255, 0 };
	DT_CHECK(memcmp(im.pixels, want, 12) == 0);
	dt_image_release(&im);
	DT_CHECK_INT_EQ(dt_image_decode(b, sizeof(b) - 3, 3, 0, &im, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "corrupt BMP: 2 rows of 8 bytes from offset 54");
	b[28] = 4;
	DT_CHECK_INT_EQ(dt_image_decode(b, sizeof(b), 3, 0, &im, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "BMP with 4 bits per pixel is not supported");
	b[28] = 24;
	b[30] = 1; /* RLE */
	DT_CHECK_INT_EQ(dt_image_decode(b, sizeof(b), 3, 0, &im, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "compression 1");
	b[30] = 0;
	b[22] = 0xff, b[23] = 0xff, b[24] = 0xff, b[25] = 0x7f; /* 2 x 2^31-1 */
	DT_CHECK_INT_EQ(dt_image_decode(b, sizeof(b), 3, 0, &im, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "larger than the limit");
}

/* Every batch of two pipelines is the same, bit for bit. */
static void check_same(struct dt_pipeline *a, struct dt_pipeline *b, int batches, size_t elems)
{
	for (int i = 0; i < batches; i++) {
		const struct dt_batch *x = dt_pipeline_next(a), *y = dt_pipeline_next(b);
		DT_CHECK(x && y);
		DT_CHECK_INT_EQ(x->size, y->size);
		DT_CHECK(memcmp(x->x, y->x, (size_t)x->size * elems * sizeof(float)) == 0);
		DT_CHECK(memcmp(x->y, y->y, (size_t)x->size) == 0);
	}
}

DT_TEST_TIMEOUT(data_image, pipeline_decodes_the_same_batches_on_any_threads, 120)
{
	const char *dir = make_folder("fixture", "imgs");
	struct dt_data_options o = opts(12, 10, 3, 0);
	o.random_flip = 1;
	o.random_crop = 0.7;
	o.crop_to_aspect_ratio = 1;
	struct dt_dataset one, three;
	struct dt_err err = DT_ERR_INIT;
	o.data_threads = 1;
	DT_CHECK_OK(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 3, &one, &err), &err);
	o.data_threads = 3;
	DT_CHECK_OK(dt_problem_load("image_folder", dir, &o, DT_SPLIT_TRAIN, 3, &three, &err), &err);
	struct dt_pipeline_config c = { .data = &one, .batch_size = 5, .seed = 4, .shard_count = 1 };
	struct dt_pipeline *plain, *fetched;
	DT_CHECK_OK(dt_pipeline_new(&c, &plain, &err), &err);
	c.data = &three;
	c.prefetch = 1;
	DT_CHECK_OK(dt_pipeline_new(&c, &fetched, &err), &err);
	check_same(plain, fetched, 12, 12 * 10 * 3); /* 3 epochs of 4 batches */
	/* the values are normalized pixels: (p/255 - 0.5) / 0.5 lies in [-1, 1] */
	const struct dt_batch *bt = dt_pipeline_next(plain);
	for (size_t k = 0; k < (size_t)bt->size * 360; k++)
		DT_CHECK(bt->x[k] >= -1.0f && bt->x[k] <= 1.0f);
	dt_pipeline_free(plain);
	dt_pipeline_free(fetched);

	/* augmentation moves pixels from one epoch to the next; a test split
	 * (centre crop, no flip) reads the same every time */
	c.data = &one;
	c.prefetch = 0;
	c.batch_size = 21;
	DT_CHECK_OK(dt_pipeline_new(&c, &plain, &err), &err);
	const struct dt_batch *e0 = dt_pipeline_next(plain);
	float *first = malloc(21 * 360 * sizeof(float));
	DT_CHECK(first != NULL);
	memcpy(first, e0->x, 21 * 360 * sizeof(float));
	const struct dt_batch *e1 = dt_pipeline_next(plain);
	DT_CHECK_INT_EQ(e1->epoch, 1);
	DT_CHECK(memcmp(first, e1->x, 21 * 360 * sizeof(float)) != 0);
	free(first);
	dt_pipeline_free(plain);
	dt_dataset_release(&one);
	dt_dataset_release(&three);
}
