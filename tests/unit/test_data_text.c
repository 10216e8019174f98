/* Unit tests for t2t's text problems (data/text.h) and their token batches
 * (train/input_text.h): the generators against their definitions, seeds
 * and splits, text2text_tmpdir's files, the encoders, t2t's bucket
 * boundaries and batch sizes, and the stream's resume. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "data/text.h"
#include "nn/hparams.h"
#include "nn/model.h"
#include "train/input_text.h"

static void load(const char *problem, enum dt_split split, uint64_t seed, struct dt_dataset *d)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load(problem, NULL, NULL, split, seed, d, &err), &err);
	DT_CHECK(d->text != NULL);
}

/* Every sequence ends in its only EOS, and every id is a symbol below vocab. */
static void check_well_formed(const struct dt_text_set *t, int max_len)
{
	for (int64_t i = 0; i < t->count; i++) {
		const int li = dt_text_in_len(t, i), lt = dt_text_tg_len(t, i);
		DT_CHECK(li >= 2 && li <= max_len + 1);
		DT_CHECK(lt >= 2);
		const int32_t *in = t->in_tok + t->in_off[i], *tg = t->tg_tok + t->tg_off[i];
		DT_CHECK_INT_EQ(in[li - 1], DT_TEXT_EOS);
		DT_CHECK_INT_EQ(tg[lt - 1], DT_TEXT_EOS);
		for (int k = 0; k < li - 1; k++)
			DT_CHECK(in[k] >= DT_TEXT_RESERVED && in[k] < t->input_vocab);
		for (int k = 0; k < lt - 1; k++)
			DT_CHECK(tg[k] >= DT_TEXT_RESERVED && tg[k] < t->target_vocab);
	}
}

DT_TEST(data_text, reverse_and_identity_follow_t2t)
{
	struct dt_dataset d;
	load("algorithmic_reverse_binary40", DT_SPLIT_TRAIN, 7, &d);
	const struct dt_text_set *t = d.text;
	DT_CHECK_INT_EQ((int)t->count, 100000);
	DT_CHECK_INT_EQ(t->input_vocab, 4);
	DT_CHECK_INT_EQ(t->target_vocab, 4);
	DT_CHECK_INT_EQ(t->max_len, 41);
	check_well_formed(t, 40);
	int64_t len_hist[41] = { 0 };
	for (int64_t i = 0; i < t->count; i++) {
		const int n = dt_text_in_len(t, i) - 1;
		DT_CHECK_INT_EQ(dt_text_tg_len(t, i), n + 1);
		len_hist[n]++;
		for (int k = 0; k < n; k++)
			DT_CHECK_INT_EQ(t->tg_tok[t->tg_off[i] + k], t->in_tok[t->in_off[i] + n - 1 - k]);
	}
	/* Lengths uniform in [1, 40]: 2500 expected each. */
	for (int n = 1; n <= 40; n++)
		DT_CHECK(len_hist[n] > 2200 && len_hist[n] < 2800);
	dt_dataset_release(&d);

	load("algorithmic_identity_binary40", DT_SPLIT_TEST, 7, &d);
	DT_CHECK_INT_EQ((int)d.text->count, 10000);
	for (int64_t i = 0; i < d.text->count; i++)
		DT_CHECK(memcmp(d.text->in_tok + d.text->in_off[i], d.text->tg_tok + d.text->tg_off[i],
				(size_t)dt_text_in_len(d.text, i) * sizeof(int32_t)) == 0);
	dt_dataset_release(&d);
}

/* Lower-endian digits (ids) back into a number; 0 when it would not fit. */
static unsigned __int128 number(const int32_t *ids, int n, int base)
{
	unsigned __int128 v = 0;
	for (int k = n - 1; k >= 0; k--)
		v = v * (unsigned)base + (unsigned)(ids[k] - DT_TEXT_RESERVED);
	return v;
}

DT_TEST(data_text, addition_and_multiplication_are_right)
{
	for (int mul = 0; mul <= 1; mul++) {
		struct dt_dataset d;
		load(mul ? "algorithmic_multiplication_decimal40" : "algorithmic_addition_decimal40", DT_SPLIT_TEST, 3, &d);
		const struct dt_text_set *t = d.text;
		DT_CHECK_INT_EQ(t->input_vocab, 13); /* 10 digits, the separator, PAD, EOS */
		DT_CHECK_INT_EQ(t->target_vocab, 12);
		check_well_formed(t, 40);
		int checked = 0;
		for (int64_t i = 0; i < t->count; i++) {
			const int32_t *in = t->in_tok + t->in_off[i], *tg = t->tg_tok + t->tg_off[i];
			const int li = dt_text_in_len(t, i) - 1, lt = dt_text_tg_len(t, i) - 1;
			int sep = 0;
			while (sep < li && in[sep] != 10 + DT_TEXT_RESERVED)
				sep++;
			DT_CHECK(sep >= 1 && sep <= 20 && sep < li - 1);
			const int l2 = li - sep - 1;
			DT_CHECK(tg[lt - 1] != DT_TEXT_RESERVED || lt == 1); /* no leading zero */
			if (sep + l2 > 37)
				continue; /* past 128 bits */
			unsigned __int128 a = number(in, sep, 10), b = number(in + sep + 1, l2, 10);
			DT_CHECK(number(tg, lt, 10) == (mul ? a * b : a + b));
			checked++;
		}
		DT_CHECK(checked > 9000);
		dt_dataset_release(&d);
	}
}

DT_TEST(data_text, sort_seeds_splits_and_the_dev_length)
{
	struct dt_dataset a, b, c, dev;
	load("algorithmic_sort_problem", DT_SPLIT_TEST, 5, &a);
	load("algorithmic_sort_problem", DT_SPLIT_TEST, 5, &b);
	load("algorithmic_sort_problem", DT_SPLIT_TRAIN, 5, &c);
	load("algorithmic_sort_problem", DT_SPLIT_DEV, 5, &dev);
	DT_CHECK_INT_EQ(a.text->input_vocab, 22);
	check_well_formed(a.text, 10);
	check_well_formed(dev.text, 20);
	DT_CHECK_INT_EQ(dev.text->max_len, 21);
	DT_CHECK_INT_EQ(dev.text->dev_length, 20);
	/* The same seed and split give the same data; another split other data. */
	DT_CHECK(a.text->in_off[a.text->count] == b.text->in_off[b.text->count]);
	DT_CHECK(memcmp(a.text->in_tok, b.text->in_tok, (size_t)a.text->in_off[a.text->count] * 4) == 0);
	DT_CHECK(memcmp(a.text->in_tok, c.text->in_tok, 400) != 0);
	for (int64_t i = 0; i < a.text->count; i++) {
		const int32_t *tg = a.text->tg_tok + a.text->tg_off[i];
		for (int k = 1; k < dt_text_tg_len(a.text, i) - 1; k++)
			DT_CHECK(tg[k - 1] <= tg[k]);
	}
	dt_dataset_release(&a), dt_dataset_release(&b), dt_dataset_release(&c), dt_dataset_release(&dev);

	load("algorithmic_reverse_binary40", DT_SPLIT_DEV, 5, &dev);
	DT_CHECK_INT_EQ(dev.text->max_len, 401); /* t2t's dev length 400 */
	dt_dataset_release(&dev);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	DT_CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

DT_TEST(data_text, text2text_tmpdir_reads_line_pairs_as_bytes)
{
	char dir[512], p[600];
	snprintf(dir, sizeof(dir), "%s", dt_test_tmpdir());
	snprintf(p, sizeof(p), "%s/inputs.train.txt", dir);
	write_file(p, "hello\n  ab c \n");
	snprintf(p, sizeof(p), "%s/targets.train.txt", dir);
	write_file(p, "hola\nx\n");
	struct dt_dataset d;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load("text2text_tmpdir", dir, NULL, DT_SPLIT_TRAIN, 1, &d, &err), &err);
	const struct dt_text_set *t = d.text;
	DT_CHECK_INT_EQ((int)t->count, 2);
	DT_CHECK_INT_EQ(t->input_vocab, 258);
	DT_CHECK_INT_EQ(dt_text_in_len(t, 0), 6);
	DT_CHECK_INT_EQ(t->in_tok[0], 'h' + 2);
	DT_CHECK_INT_EQ(dt_text_in_len(t, 1), 5); /* "ab c" stripped, EOS */
	DT_CHECK_INT_EQ(t->tg_tok[t->tg_off[1]], 'x' + 2);
	char buf[64];
	dt_text_decode(t, t->in_tok + t->in_off[1], dt_text_in_len(t, 1), buf, sizeof(buf));
	DT_CHECK_STR_EQ(buf, "ab c");
	int32_t ids[16];
	int n;
	DT_CHECK_OK(dt_text_encode(t, 1, " hi\n", ids, 16, &n, &err), &err);
	DT_CHECK_INT_EQ(n, 3);
	DT_CHECK_INT_EQ(ids[2], DT_TEXT_EOS);
	dt_dataset_release(&d);

	/* The eval split is missing; then the line counts differ. */
	DT_CHECK_INT_EQ(dt_problem_load("text2text_tmpdir", dir, NULL, DT_SPLIT_TEST, 1, &d, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "inputs.eval.txt");
	snprintf(p, sizeof(p), "%s/inputs.eval.txt", dir);
	write_file(p, "a\nb\n");
	snprintf(p, sizeof(p), "%s/targets.eval.txt", dir);
	write_file(p, "a\n");
	DT_CHECK_INT_EQ(dt_problem_load("text2text_tmpdir", dir, NULL, DT_SPLIT_TEST, 1, &d, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "has 2 lines but");
}

DT_TEST(data_text, symbol_encoder_round_trips_and_refuses_strangers)
{
	struct dt_dataset d;
	load("algorithmic_addition_decimal40", DT_SPLIT_TEST, 1, &d);
	int32_t ids[8];
	int n;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_text_encode(d.text, 1, "3 10 4", ids, 8, &n, &err), &err);
	DT_CHECK_INT_EQ(n, 4);
	DT_CHECK_INT_EQ(ids[1], 12);
	char buf[32];
	dt_text_decode(d.text, ids, n, buf, sizeof(buf));
	DT_CHECK_STR_EQ(buf, "3 10 4");
	DT_CHECK_INT_EQ(dt_text_encode(d.text, 0, "3 10", ids, 8, &n, &err), DT_USAGE); /* targets have no separator */
	DT_CHECK_CONTAINS(err.msg, "symbol '10' is not one of 0 to 9");
	DT_CHECK_INT_EQ(dt_text_encode(d.text, 1, "x", ids, 8, &n, &err), DT_USAGE);
	dt_dataset_release(&d);
}

DT_TEST(data_text, bucket_boundaries_and_batch_sizes_are_t2ts)
{
	struct dt_token_batching s;
	dt_token_batching_init(&s, 4096, 256, 8, 1.1);
	/* t2t's _bucket_boundaries(256, 8, 1.1) and batching_scheme(4096, 256). */
	static const int bounds[] = { 8,  9,  10, 11, 12, 13, 14, 15, 16,  17,  18,  19,  20,  22,
				      24, 26, 28, 30, 33, 36, 39, 42, 46,  50,  55,  60,  66,  72,
				      79, 86, 94, 103, 113, 124, 136, 149, 163, 179, 196, 215, 236 };
	static const int sizes[] = { 420, 420, 315, 315, 315, 315, 252, 252, 252, 210, 210, 210, 180, 180,
				     140, 140, 140, 126, 105, 105, 105, 90,  84,  70,  70,  63,  60,  45,
				     45,  45,  42,  36,  36,  30,  30,  21,  21,  21,  20,  18,  15,  15 };
	DT_CHECK_INT_EQ(s.num_boundaries, (int)(sizeof(bounds) / sizeof(bounds[0])));
	for (int i = 0; i < s.num_boundaries; i++)
		DT_CHECK_INT_EQ(s.boundaries[i], bounds[i]);
	for (int i = 0; i <= s.num_boundaries; i++)
		DT_CHECK_INT_EQ(s.batch_sizes[i], sizes[i]);
	DT_CHECK_INT_EQ(s.window_size, 1260);
	DT_CHECK_INT_EQ(dt_token_batching_bucket(&s, 7), 0);
	DT_CHECK_INT_EQ(dt_token_batching_bucket(&s, 8), 1);
	DT_CHECK_INT_EQ(dt_token_batching_bucket(&s, 41), 21);
	DT_CHECK_INT_EQ(dt_token_batching_bucket(&s, 256), 41);
}

/* The batches of the stream: at most batch_size tokens, every row one
 * example of the bucket's lengths padded with 0, a resume continues it. */
DT_TEST(data_text, token_batches_fit_their_bucket_and_resume_exactly)
{
	struct dt_dataset d;
	load("algorithmic_reverse_binary40", DT_SPLIT_TEST, 9, &d);
	struct dt_hparams hp;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_hparams_from_set("transformer_tiny", &hp, &err), &err);
	hp.batch_size = 512;
	struct dt_input *in = dt_input_text_new(d.text, &hp, 3);
	DT_CHECK_OK(dt_input_start(in, 1, 2, 0, 0, &err), &err);
	DT_CHECK_INT_EQ((int)dt_input_shard_size(in), 5000);
	int64_t ep = 0, off = 0;
	int32_t saved[512];
	int saved_n = 0, saved_b = 0;
	for (int step = 0; step < 400; step++) {
		const struct dt_batch *b;
		DT_CHECK_OK(dt_input_next(in, &b, &err), &err);
		const struct dt_model_batch *mb = b->general;
		DT_CHECK(mb != NULL);
		DT_CHECK(mb->size * mb->length <= 512);
		DT_CHECK_INT_EQ(mb->num_inputs, 2);
		const int32_t *tg = mb->targets.data;
		for (int r = 0; r < mb->size; r++) {
			int n = 0;
			while (n < mb->length && tg[r * mb->length + n])
				n++;
			DT_CHECK(n >= 2 && tg[r * mb->length + n - 1] == DT_TEXT_EOS);
		}
		if (step == 300)
			dt_input_position(in, &ep, &off);
		if (step == 301) {
			saved_n = mb->size * mb->length;
			saved_b = mb->size;
			memcpy(saved, tg, (size_t)saved_n * sizeof(int32_t));
		}
	}
	DT_CHECK(ep >= 1); /* 300 batches cross an epoch of 5000 examples */
	DT_CHECK_OK(dt_input_start(in, 1, 2, ep, off, &err), &err);
	const struct dt_batch *b;
	DT_CHECK_OK(dt_input_next(in, &b, &err), &err);
	DT_CHECK_INT_EQ(b->general->size, saved_b);
	DT_CHECK(memcmp(b->general->targets.data, saved, (size_t)saved_n * sizeof(int32_t)) == 0);
	/* The synchronous strategies' position: batch 301 after 301 batches. */
	DT_CHECK_OK(dt_input_start_at_batch(in, 1, 2, hp.batch_size, 301, &err), &err);
	DT_CHECK_OK(dt_input_next(in, &b, &err), &err);
	DT_CHECK(memcmp(b->general->targets.data, saved, (size_t)saved_n * sizeof(int32_t)) == 0);
	dt_input_free(in);
	dt_dataset_release(&d);
}
