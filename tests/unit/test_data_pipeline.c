/* Unit tests for src/data/pipeline: sharding, the per-epoch shuffle,
 * dropped last batches, single pass, resume, normalization, and prefetch
 * (identical output, clean shutdown mid-epoch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/err.h"
#include "data/pipeline.h"
#include "data/problem.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifdef UNDER_ASAN
#include <sanitizer/lsan_interface.h>
#endif

/* A dataset of 2x2x1 images whose pixels spell the example index, so a
 * batch says which examples it holds: pixel 0 = i & 255, pixel 1 = i >> 8,
 * pixels 2-3 = 255 - pixel 0, 0. mean 0 and std 1 make x = p/255. */
static void make_indexed(struct dt_dataset *ds, uint32_t count)
{
	memset(ds, 0, sizeof(*ds));
	ds->count = count;
	ds->height = 2;
	ds->width = 2;
	ds->channels = 1;
	ds->num_classes = 10;
	ds->images = malloc((size_t)count * 4 + 1);
	ds->labels = malloc((size_t)count + 1);
	DT_CHECK(ds->images && ds->labels);
	for (uint32_t i = 0; i < count; i++) {
		ds->images[4 * i] = (uint8_t)(i & 255);
		ds->images[4 * i + 1] = (uint8_t)(i >> 8);
		ds->images[4 * i + 2] = (uint8_t)(255 - (i & 255));
		ds->images[4 * i + 3] = 0;
		ds->labels[i] = (uint8_t)(i % 10);
	}
	ds->mean = 0.0f;
	ds->std = 1.0f;
	snprintf(ds->source, sizeof(ds->source), "indexed test data");
}

/* The dataset index of example j of a batch from make_indexed data. */
static uint32_t example_index(const struct dt_batch *b, int j)
{
	float lo = b->x[4 * j] * 255.0f, hi = b->x[4 * j + 1] * 255.0f;
	return (uint32_t)(lo + 0.5f) + 256u * (uint32_t)(hi + 0.5f);
}

static struct dt_pipeline_config config(const struct dt_dataset *ds, int batch, uint64_t seed)
{
	struct dt_pipeline_config c;
	memset(&c, 0, sizeof(c));
	c.data = ds;
	c.batch_size = batch;
	c.seed = seed;
	c.shard_index = 0;
	c.shard_count = 1;
	return c;
}

static struct dt_pipeline *open_pipeline(const struct dt_pipeline_config *c)
{
	struct dt_pipeline *p = NULL;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_pipeline_new(c, &p, &err), &err);
	DT_CHECK(p != NULL);
	return p;
}

/* Reads `n` examples' indices in order from training batches. */
static void read_indices(struct dt_pipeline *p, uint32_t *out, int n)
{
	int got = 0;
	for (int guard = 0; got < n && guard < 100000; guard++) {
		const struct dt_batch *b = dt_pipeline_next(p);
		DT_CHECK(b != NULL);
		for (int j = 0; j < b->size && got < n; j++)
			out[got++] = example_index(b, j);
	}
	DT_CHECK_INT_EQ(got, n);
}

DT_TEST(data_pipeline, shards_cover_every_example_once_per_epoch)
{
	struct dt_dataset ds;
	make_indexed(&ds, 1003);
	uint8_t seen[1003] = { 0 };
	int64_t total = 0;
	for (int shard = 0; shard < 4; shard++) {
		struct dt_pipeline_config c = config(&ds, 1, 9);
		c.shard_index = shard;
		c.shard_count = 4;
		struct dt_pipeline *p = open_pipeline(&c);
		int64_t n = dt_pipeline_shard_size(p);
		DT_CHECK_INT_EQ(n, shard < 3 ? 251 : 250);
		total += n;
		/* One training epoch with batch 1 (nothing dropped). */
		for (int64_t k = 0; k < n; k++) {
			const struct dt_batch *b = dt_pipeline_next(p);
			DT_CHECK(b != NULL);
			DT_CHECK_INT_EQ(b->epoch, 0);
			uint32_t i = example_index(b, 0);
			DT_CHECK(i < 1003);
			DT_CHECK_INT_EQ(i % 4, shard);
			DT_CHECK_INT_EQ(seen[i], 0);
			DT_CHECK_INT_EQ(b->y[0], i % 10);
			seen[i] = 1;
		}
		int64_t epoch, offset;
		dt_pipeline_position(p, &epoch, &offset);
		DT_CHECK_INT_EQ(epoch, 1);
		DT_CHECK_INT_EQ(offset, 0);
		DT_CHECK_INT_EQ(dt_pipeline_next(p)->epoch, 1);
		dt_pipeline_free(p);
	}
	DT_CHECK_INT_EQ(total, 1003);
	for (int i = 0; i < 1003; i++)
		DT_CHECK_INT_EQ(seen[i], 1);
	dt_dataset_release(&ds);
}

DT_TEST(data_pipeline, every_epoch_is_a_permutation_and_the_tail_is_dropped)
{
	struct dt_dataset ds;
	make_indexed(&ds, 105);
	struct dt_pipeline_config c = config(&ds, 10, 3);
	struct dt_pipeline *p = open_pipeline(&c);
	for (int epoch = 0; epoch < 3; epoch++) {
		uint8_t seen[105] = { 0 };
		for (int k = 0; k < 10; k++) {
			int64_t e, off;
			dt_pipeline_position(p, &e, &off);
			DT_CHECK_INT_EQ(e, epoch);
			DT_CHECK_INT_EQ(off, 10 * k);
			const struct dt_batch *b = dt_pipeline_next(p);
			DT_CHECK(b != NULL);
			DT_CHECK_INT_EQ(b->size, 10);
			DT_CHECK_INT_EQ(b->epoch, epoch);
			for (int j = 0; j < 10; j++) {
				uint32_t i = example_index(b, j);
				DT_CHECK(i < 105);
				DT_CHECK_INT_EQ(seen[i], 0);
				seen[i] = 1;
			}
		}
		int n = 0;
		for (int i = 0; i < 105; i++)
			n += seen[i];
		DT_CHECK_INT_EQ(n, 100); /* 5 dropped, a different 5 each epoch */
	}
	dt_pipeline_free(p);
	dt_dataset_release(&ds);
}

DT_TEST(data_pipeline, order_depends_on_seed_and_epoch_only)
{
	struct dt_dataset ds;
	make_indexed(&ds, 500);
	struct dt_pipeline_config c = config(&ds, 50, 11);
	struct dt_pipeline *a = open_pipeline(&c), *b = open_pipeline(&c);
	c.seed = 12;
	struct dt_pipeline *other = open_pipeline(&c);
	static uint32_t ia[1500], ib[1500], io[1500];
	read_indices(a, ia, 1500);
	read_indices(b, ib, 1500);
	read_indices(other, io, 1500);
	DT_CHECK(memcmp(ia, ib, sizeof(ia)) == 0);
	DT_CHECK(memcmp(ia, io, sizeof(ia)) != 0);
	/* Epochs differ from each other and from the dataset order. */
	DT_CHECK(memcmp(ia, ia + 500, 500 * sizeof(uint32_t)) != 0);
	DT_CHECK(memcmp(ia + 500, ia + 1000, 500 * sizeof(uint32_t)) != 0);
	int in_place = 0;
	for (uint32_t i = 0; i < 500; i++)
		in_place += ia[i] == i;
	DT_CHECK(in_place < 50);
	dt_pipeline_free(a);
	dt_pipeline_free(b);
	dt_pipeline_free(other);
	dt_dataset_release(&ds);
}

/* Two pipelines give the same batches, bit for bit, and the same positions. */
static void check_same_stream(struct dt_pipeline *a, struct dt_pipeline *b, int batches, size_t elems)
{
	for (int k = 0; k < batches; k++) {
		const struct dt_batch *x = dt_pipeline_next(a), *y = dt_pipeline_next(b);
		if (!x || !y) {
			DT_CHECK(x == NULL && y == NULL);
			return;
		}
		DT_CHECK_INT_EQ(x->size, y->size);
		DT_CHECK_INT_EQ(x->epoch, y->epoch);
		DT_CHECK(memcmp(x->x, y->x, (size_t)x->size * elems * sizeof(float)) == 0);
		DT_CHECK(memcmp(x->y, y->y, (size_t)x->size) == 0);
		int64_t ea, oa, eb, ob;
		dt_pipeline_position(a, &ea, &oa);
		dt_pipeline_position(b, &eb, &ob);
		DT_CHECK_INT_EQ(ea, eb);
		DT_CHECK_INT_EQ(oa, ob);
	}
}

DT_TEST_TIMEOUT(data_pipeline, prefetch_gives_the_same_batches, 120)
{
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load("synthetic", NULL, NULL, DT_SPLIT_TEST, 5, &ds, &err), &err);
	for (int mode = 0; mode < 2; mode++) {
		struct dt_pipeline_config c = config(&ds, 64, 21);
		c.shard_index = 1;
		c.shard_count = 3;
		c.single_pass = mode;
		struct dt_pipeline *plain = open_pipeline(&c);
		c.prefetch = 1;
		struct dt_pipeline *fetched = open_pipeline(&c);
		/* Training: 4 epochs of 52 batches; single pass: to the end. */
		check_same_stream(plain, fetched, mode ? 100 : 4 * 52 + 3, 784);
		if (mode) {
			DT_CHECK(dt_pipeline_next(plain) == NULL);
			DT_CHECK(dt_pipeline_next(fetched) == NULL);
		} else {
			int64_t e, off;
			dt_pipeline_position(fetched, &e, &off);
			DT_CHECK_INT_EQ(e, 4);
			DT_CHECK_INT_EQ(off, 3 * 64);
		}
		dt_pipeline_free(plain);
		dt_pipeline_free(fetched);
	}
	dt_dataset_release(&ds);
}

DT_TEST(data_pipeline, resume_continues_the_same_sequence)
{
	struct dt_dataset ds;
	make_indexed(&ds, 230);
	struct dt_pipeline_config c = config(&ds, 16, 77);
	c.shard_index = 0;
	c.shard_count = 2; /* 115 examples, 7 batches an epoch */
	/* Stop after k batches, resume from the reported position, with and
	 * without prefetch on either side, across epoch boundaries. */
	const int stops[] = { 0, 1, 6, 7, 8, 13, 20 };
	for (size_t s = 0; s < sizeof(stops) / sizeof(stops[0]); s++) {
		for (int pf = 0; pf < 2; pf++) {
			c.start_epoch = 0;
			c.start_offset = 0;
			c.prefetch = pf;
			struct dt_pipeline *whole = open_pipeline(&c), *first = open_pipeline(&c);
			check_same_stream(whole, first, stops[s], 4);
			int64_t e, off;
			dt_pipeline_position(first, &e, &off);
			DT_CHECK_INT_EQ(e, stops[s] / 7);
			DT_CHECK_INT_EQ(off, 16 * (stops[s] % 7));
			dt_pipeline_free(first);
			c.start_epoch = e;
			c.start_offset = off;
			c.prefetch = !pf;
			struct dt_pipeline *resumed = open_pipeline(&c);
			check_same_stream(whole, resumed, 25, 4);
			dt_pipeline_free(resumed);
			dt_pipeline_free(whole);
		}
	}
	dt_dataset_release(&ds);
}

DT_TEST(data_pipeline, resume_at_any_offset_skips_exactly_that_many)
{
	struct dt_dataset ds;
	make_indexed(&ds, 100);
	struct dt_pipeline_config c = config(&ds, 1, 5);
	struct dt_pipeline *p = open_pipeline(&c);
	static uint32_t all[200];
	read_indices(p, all, 200);
	dt_pipeline_free(p);

	/* Batch size 8 from offset 37 of epoch 1 reads examples 37..92 of that
	 * epoch's order, then drops the 100 - 93 = 7 left over (fewer than 8). */
	c.batch_size = 8;
	c.start_epoch = 1;
	c.start_offset = 37;
	p = open_pipeline(&c);
	for (int k = 0; k < 7; k++) {
		const struct dt_batch *b = dt_pipeline_next(p);
		DT_CHECK_INT_EQ(b->epoch, 1);
		for (int j = 0; j < 8; j++)
			DT_CHECK_UINT_EQ(example_index(b, j), all[100 + 37 + 8 * k + j]);
	}
	int64_t e, off;
	dt_pipeline_position(p, &e, &off);
	DT_CHECK_INT_EQ(e, 2);
	DT_CHECK_INT_EQ(off, 0);
	dt_pipeline_free(p);

	/* An offset with less than a batch left starts the next epoch. */
	c.start_offset = 95;
	p = open_pipeline(&c);
	dt_pipeline_position(p, &e, &off);
	DT_CHECK_INT_EQ(e, 2);
	DT_CHECK_INT_EQ(off, 0);
	dt_pipeline_free(p);
	dt_dataset_release(&ds);
}

DT_TEST(data_pipeline, single_pass_reads_the_shard_in_order_once)
{
	struct dt_dataset ds;
	make_indexed(&ds, 1000);
	for (int pf = 0; pf < 2; pf++) {
		struct dt_pipeline_config c = config(&ds, 64, 1);
		c.single_pass = 1;
		c.shard_index = 2;
		c.shard_count = 3;
		c.prefetch = pf;
		struct dt_pipeline *p = open_pipeline(&c);
		DT_CHECK_INT_EQ(dt_pipeline_shard_size(p), 333);
		uint32_t next = 2;
		int batches = 0;
		const struct dt_batch *b;
		while ((b = dt_pipeline_next(p)) != NULL && batches < 100) {
			batches++;
			DT_CHECK_INT_EQ(b->size, batches < 6 ? 64 : 333 - 5 * 64);
			for (int j = 0; j < b->size; j++, next += 3)
				DT_CHECK_UINT_EQ(example_index(b, j), next);
		}
		DT_CHECK_INT_EQ(batches, 6);
		DT_CHECK_UINT_EQ(next, 1001);
		DT_CHECK(dt_pipeline_next(p) == NULL);
		int64_t e, off;
		dt_pipeline_position(p, &e, &off);
		DT_CHECK_INT_EQ(e, 0);
		DT_CHECK_INT_EQ(off, 333);
		dt_pipeline_free(p);
	}
	/* A shard with no examples ends at once. */
	struct dt_dataset tiny;
	make_indexed(&tiny, 2);
	struct dt_pipeline_config c = config(&tiny, 4, 1);
	c.single_pass = 1;
	c.shard_index = 2;
	c.shard_count = 3;
	struct dt_pipeline *p = open_pipeline(&c);
	DT_CHECK(dt_pipeline_next(p) == NULL);
	dt_pipeline_free(p);
	dt_dataset_release(&tiny);
	dt_dataset_release(&ds);
}

DT_TEST(data_pipeline, normalization_is_p_over_255_minus_mean_over_std)
{
	struct dt_dataset ds;
	make_indexed(&ds, 256);
	ds.mean = 0.2860f;
	ds.std = 0.3530f;
	struct dt_pipeline_config c = config(&ds, 256, 1);
	c.single_pass = 1;
	struct dt_pipeline *p = open_pipeline(&c);
	const struct dt_batch *b = dt_pipeline_next(p);
	DT_CHECK(b != NULL);
	DT_CHECK_INT_EQ(b->size, 256);
	for (int i = 0; i < 256; i++) {
		double want = ((double)i / 255.0 - 0.2860) / 0.3530;
		DT_CHECK_NEAR(b->x[4 * i], want, 1e-5);
		DT_CHECK_NEAR(b->x[4 * i + 2], ((255.0 - i) / 255.0 - 0.2860) / 0.3530, 1e-5);
		DT_CHECK_NEAR(b->x[4 * i + 3], -0.2860 / 0.3530, 1e-5);
	}
	DT_CHECK_NEAR(b->x[0], -0.81019830, 1e-6);
	DT_CHECK_NEAR(b->x[4 * 255], 2.02266289, 1e-6);
	dt_pipeline_free(p);
	dt_dataset_release(&ds);
}

DT_TEST_TIMEOUT(data_pipeline, free_mid_epoch_with_prefetch_joins_cleanly, 60)
{
	struct dt_dataset ds;
	make_indexed(&ds, 2000);
	/* Stop after 0, 1, 2 or 3 batches, many times: the thread may be
	 * waiting, filling a slot or done; free must join it every time. */
	for (int round = 0; round < 200; round++) {
		struct dt_pipeline_config c = config(&ds, 32, (uint64_t)round);
		c.prefetch = 1;
		c.single_pass = round % 5 == 4;
		struct dt_pipeline *p = open_pipeline(&c);
		for (int k = 0; k < round % 4; k++)
			DT_CHECK(dt_pipeline_next(p) != NULL);
		dt_pipeline_free(p);
	}
	/* A single pass read to the end, then freed. */
	struct dt_pipeline_config c = config(&ds, 500, 1);
	c.prefetch = 1;
	c.single_pass = 1;
	struct dt_pipeline *p = open_pipeline(&c);
	int n = 0;
	while (dt_pipeline_next(p) && n < 10)
		n++;
	DT_CHECK_INT_EQ(n, 4);
	dt_pipeline_free(p);
	dt_pipeline_free(NULL);
	dt_dataset_release(&ds);
#ifdef UNDER_ASAN
	/* The runner ends tests with _exit, which skips LeakSanitizer: ask now. */
	DT_CHECK_INT_EQ(__lsan_do_recoverable_leak_check(), 0);
#endif
}

DT_TEST(data_pipeline, bad_configurations_are_refused)
{
	struct dt_dataset ds;
	make_indexed(&ds, 100);
	struct dt_pipeline *p = (struct dt_pipeline *)1;
	struct dt_err err = DT_ERR_INIT;

	struct dt_pipeline_config c = config(&ds, 0, 1);
	DT_CHECK_INT_EQ(dt_pipeline_new(&c, &p, &err), DT_CONFIG);
	DT_CHECK(p == NULL);
	DT_CHECK_CONTAINS(err.msg, "batch_size 0 is out of range");

	c = config(&ds, 10, 1);
	c.shard_index = 3;
	c.shard_count = 3;
	DT_CHECK_INT_EQ(dt_pipeline_new(&c, &p, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "shard 3 of 3 is invalid");

	c = config(&ds, 30, 1);
	c.shard_count = 4; /* 25 examples a shard */
	DT_CHECK_INT_EQ(dt_pipeline_new(&c, &p, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "has 25 examples, fewer than batch_size 30");
	c.single_pass = 1; /* fine for evaluation: one short batch */
	DT_CHECK_OK(dt_pipeline_new(&c, &p, &err), &err);
	DT_CHECK_INT_EQ(dt_pipeline_next(p)->size, 25);
	dt_pipeline_free(p);

	c = config(&ds, 10, 1);
	c.start_offset = 101;
	DT_CHECK_INT_EQ(dt_pipeline_new(&c, &p, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "resume position (epoch 0, offset 101) is outside shard 0 of 1, which has 100 examples");
	DT_CHECK_CONTAINS(err.msg, "hint: ");

	ds.std = 0.0f;
	c = config(&ds, 10, 1);
	DT_CHECK_INT_EQ(dt_pipeline_new(&c, &p, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "std must be positive");
	dt_dataset_release(&ds);
}

/* Units (data/units.h): 2 trainers read some batches each (uneven, with
 * prefetch on one), their positions make the layout for 3, which read on to
 * the end of the epoch: every example of the epoch's 10 whole batches (103
 * examples, batch 10: 3 not read) exactly once, and without a base trainer j
 * of M reads what slice j of the global batches would. */
DT_TEST(data_pipeline, units_read_every_batch_of_the_epoch_once_across_a_change_of_trainers)
{
	struct dt_dataset ds;
	make_indexed(&ds, 103);
	struct dt_units_layout two;
	dt_units_init(&two, 2, 10);
	int seen[103] = { 0 };
	struct dt_units_pos pos[2];
	const int first_reads[2] = { 3, 1 };
	for (int j = 0; j < 2; j++) {
		struct dt_pipeline_config c = config(&ds, 10, 7);
		c.units = &two;
		c.unit_index = j;
		c.prefetch = j;
		struct dt_pipeline *p = open_pipeline(&c);
		for (int b = 0; b < first_reads[j]; b++) {
			const struct dt_batch *bt = dt_pipeline_next(p);
			DT_CHECK(bt && bt->size == 10 && bt->epoch == 0);
			for (int i = 0; i < 10; i++)
				seen[example_index(bt, i)]++;
		}
		dt_pipeline_position(p, &pos[j].epoch, &pos[j].taken);
		DT_CHECK(pos[j].epoch == 0 && pos[j].taken == first_reads[j]);
		dt_pipeline_free(p);
	}
	/* slice j of the global batches of 20 */
	struct dt_pipeline_config sc = config(&ds, 10, 7);
	sc.slice_index = 1;
	sc.slice_count = 2;
	struct dt_pipeline *sp = open_pipeline(&sc);
	uint32_t want[10], got[10];
	read_indices(sp, want, 10);
	dt_pipeline_free(sp);
	struct dt_pipeline_config c1 = config(&ds, 10, 7);
	c1.units = &two;
	c1.unit_index = 1;
	struct dt_pipeline *p1 = open_pipeline(&c1);
	read_indices(p1, got, 10);
	dt_pipeline_free(p1);
	DT_CHECK(memcmp(want, got, sizeof(want)) == 0);

	struct dt_units_layout three;
	dt_units_merge(&two, pos, 3, &three);
	for (int j = 0; j < 3; j++) {
		struct dt_pipeline_config c = config(&ds, 10, 7);
		c.units = &three;
		c.unit_index = j;
		struct dt_pipeline *p = open_pipeline(&c);
		for (int guard = 0; guard < 20; guard++) {
			int64_t e, t;
			dt_pipeline_position(p, &e, &t);
			if (e > 0)
				break;
			const struct dt_batch *bt = dt_pipeline_next(p);
			DT_CHECK(bt && bt->epoch == 0);
			for (int i = 0; i < 10; i++)
				seen[example_index(bt, i)]++;
		}
		dt_pipeline_free(p);
	}
	int once = 0;
	for (int i = 0; i < 103; i++) {
		DT_CHECK(seen[i] <= 1);
		once += seen[i];
	}
	DT_CHECK_INT_EQ(once, 100);
	/* more trainers than batches in an epoch, or another dataset's layout */
	struct dt_units_layout big;
	dt_units_init(&big, 11, 10);
	struct dt_pipeline_config bad = config(&ds, 10, 7);
	bad.units = &big;
	struct dt_pipeline *p = NULL;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK(dt_pipeline_new(&bad, &p, &err) == DT_CONFIG && p == NULL);
	bad.batch_size = 9;
	bad.units = &two;
	DT_CHECK(dt_pipeline_new(&bad, &p, &err) == DT_CONFIG && p == NULL);
	dt_units_release(&three);
	dt_units_release(&two);
	dt_units_release(&big);
	free(ds.images);
	free(ds.labels);
}
