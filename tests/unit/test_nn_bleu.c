/* t2t's compute_bleu (nn/bleu.h) and approx_bleu_score, and t2t-bleu's
 * tokenizer and file scoring (data/bleu_text.h). Expected values are worked
 * by hand, and the "t2t" ones were printed by bleu_hook.py's own
 * compute_bleu and bleu_tokenize (run without TensorFlow) on the same input. */
#include <math.h>
#include <string.h>

#include "data/bleu_text.h"
#include "dt_test.h"
#include "nn/bleu.h"

static double bleu_of(const int32_t *ref, int rn, const int32_t *hyp, int hn)
{
	struct dt_bleu_counts c = { 0 };
	dt_bleu_add(&c, ref, rn, hyp, hn);
	return dt_bleu_score(&c, NULL);
}

DT_TEST(nn_bleu, identical_is_one_and_empty_is_zero)
{
	const int32_t a[] = { 5, 9, 2, 7, 7, 3 };
	DT_CHECK_NEAR(bleu_of(a, 6, a, 6), 1.0, 1e-7);
	DT_CHECK_NEAR(bleu_of(a, 6, a, 0), 0.0, 0);
	const int32_t b[] = { 11, 12, 13, 14, 15, 16 }; /* nothing shared: every order smoothed */
	struct dt_bleu_counts c = { 0 };
	dt_bleu_add(&c, a, 6, b, 6);
	double p[4];
	/* 1 / (2 * 6), 1 / (4 * 5), 1 / (8 * 4), 1 / (16 * 3) */
	DT_CHECK_NEAR(dt_bleu_score(&c, p), pow(1.0 / (12.0 * 20.0 * 32.0 * 48.0), 0.25), 1e-7);
	DT_CHECK_NEAR(p[0], 1.0 / 12, 1e-12);
	DT_CHECK_NEAR(p[3], 1.0 / 48, 1e-12);
}

DT_TEST(nn_bleu, ngram_precisions_clipping_and_smoothing)
{
	/* one token wrong at the end: (5/6 * 4/5 * 3/4 * 2/3)^(1/4) = (1/3)^(1/4) */
	const int32_t r1[] = { 1, 2, 3, 4, 5, 6 }, h1[] = { 1, 2, 3, 4, 5, 7 };
	DT_CHECK_NEAR(bleu_of(r1, 6, h1, 6), pow(1.0 / 3.0, 0.25), 1e-7);
	DT_CHECK_NEAR(bleu_of(r1, 6, h1, 6), 0.7598356604576111, 1e-7); /* t2t */
	/* clipped: four 1s against one; no bigram matches, so orders 2-4 are
	 * smoothed 1/(2*3), 1/(4*2), 1/(8*1); hyp longer than ref: bp 1 */
	const int32_t r2[] = { 1, 2 }, h2[] = { 1, 1, 1, 1 };
	struct dt_bleu_counts c = { 0 };
	dt_bleu_add(&c, r2, 2, h2, 4);
	DT_CHECK_INT_EQ(c.matches[0], 1);
	DT_CHECK_INT_EQ(c.possible[0], 4);
	DT_CHECK_NEAR(dt_bleu_score(&c, NULL), pow(1.0 / (4.0 * 6.0 * 8.0 * 8.0), 0.25), 1e-7);
	DT_CHECK_NEAR(dt_bleu_score(&c, NULL), 0.159735769033432, 1e-7); /* t2t */
}

DT_TEST(nn_bleu, brevity_penalty_and_missing_orders)
{
	/* every n-gram right, half the length: exp(1 - 2) */
	const int32_t r[] = { 1, 2, 3, 4, 5, 6, 7, 8 }, h[] = { 1, 2, 3, 4 };
	DT_CHECK_NEAR(bleu_of(r, 8, h, 4), exp(-1.0), 1e-7);
	/* t2t: an order with no n-gram (trigrams, 4-grams of two tokens) is a
	 * precision of 0, left out of the log sum: geo mean 1, bp exp(1 - 3/2) */
	const int32_t r3[] = { 1, 2, 3 }, h3[] = { 1, 2 };
	DT_CHECK_NEAR(bleu_of(r3, 3, h3, 2), exp(-0.5), 1e-7);
	DT_CHECK_NEAR(bleu_of(r3, 3, h3, 2), 0.6065306663513184, 1e-7); /* t2t */
	DT_CHECK_NEAR(bleu_of(r3, 3, r3, 3), 1.0, 1e-7);
}

DT_TEST(nn_bleu, corpus_level_sums_before_the_precisions)
{
	const int32_t r1[] = { 1, 2, 3, 4, 5, 6 }, h1[] = { 1, 2, 3, 4, 5, 7 };
	const int32_t r2[] = { 1, 2 }, h2[] = { 1, 1, 1, 1 };
	const int32_t r3[] = { 5, 6, 7, 8, 9, 5, 6, 7 }, h3[] = { 5, 6, 7, 9, 8, 5, 6 };
	struct dt_bleu_counts a = { 0 }, b = { 0 };
	dt_bleu_add(&a, r1, 6, h1, 6);
	dt_bleu_add(&a, r2, 2, h2, 4);
	dt_bleu_add(&b, r3, 8, h3, 7);
	dt_bleu_merge(&a, &b);
	DT_CHECK_NEAR(dt_bleu_score(&a, NULL), 0.43178537487983704, 1e-7); /* t2t */
	/* not the mean of the three sentence scores */
	DT_CHECK(fabs(dt_bleu_score(&a, NULL) - (0.7598 + 0.1597 + bleu_of(r3, 8, h3, 7)) / 3) > 0.01);
}

DT_TEST(nn_bleu, approx_bleu_is_the_argmax_against_the_whole_padded_rows)
{
	/* labels and the argmax of logits (V 10), padding included as t2t's
	 * bleu_score passes the rows; t2t gives 0.5946035385131836 */
	enum { B = 2, L = 8, V = 10 };
	const int32_t labels[B * L] = { 7, 3, 9, 3, 9, 1, 0, 0, 4, 4, 4, 2, 1, 0, 0, 0 };
	const int32_t pred[B * L] = { 7, 3, 9, 9, 3, 1, 1, 0, 4, 4, 2, 1, 0, 0, 0, 0 };
	float logits[B * L * V];
	for (int r = 0; r < B * L; r++)
		for (int j = 0; j < V; j++)
			logits[r * V + j] = j == pred[r] ? 2.0f : -1.0f - 0.1f * (float)j;
	DT_CHECK_NEAR(dt_approx_bleu(logits, labels, B, L, V), 0.5946035385131836, 1e-7);
	/* a tie between ids 0 and 7 at row 0: tf.argmax takes the first, 0 */
	logits[0] = 2.0f;
	const double with_tie = dt_approx_bleu(logits, labels, B, L, V);
	DT_CHECK(with_tie < 0.5946);
}

static void check_tok(const char *line, int lower, const char *want)
{
	char out[512];
	const size_t n = dt_bleu_text_tokenize(line, strlen(line), lower, out, sizeof(out));
	DT_CHECK_INT_EQ((long long)n, (long long)strlen(want));
	DT_CHECK_STR_EQ(out, want);
}

DT_TEST(nn_bleu, tokenize_is_t2ts_bleu_tokenize)
{
	/* each want is bleu_hook.bleu_tokenize's, joined by spaces */
	check_tok("And God said, Let there be light: and there was light.", 0,
		  "And God said , Let there be light : and there was light .");
	check_tok("¿Qué dijo? «Ven», dijo él—y fue.", 0, "¿ Qué dijo ? « Ven » , dijo él — y fue .");
	check_tok("Price: $5+3=8, 1,000.5 or 3.14.", 0, "Price : $ 5 + 3 = 8 , 1,000.5 or 3.14.");
	check_tok("  tab\there \xe2\x80\x83 end.", 0, "tab here end .");
	check_tok("ÀÉÎ Ñandú ÇA Ώ Ⅻ Ａ.", 1, "àéî ñandú ça ώ ⅻ ａ ."); /* str.lower() */
	char out[8];
	DT_CHECK((long long)dt_bleu_text_tokenize("a\xff", 2, 0, out, sizeof(out)) == -1);
	DT_CHECK_INT_EQ((long long)dt_bleu_text_tokenize("a, b, c, d", 10, 0, out, sizeof(out)), 13); /* cut, sized */
	DT_CHECK_STR_EQ(out, "a , b ,");
}

DT_TEST(nn_bleu, files_score_as_t2t_bleu)
{
	char ref[4096], hyp[4096];
	dt_test_path(ref, sizeof(ref), "ref.txt");
	dt_test_path(hyp, sizeof(hyp), "hyp.txt");
	const char r[] = "The cat sat on the mat.\nHello, world: 1,000 and 3.5!\n";
	const char h[] = "the cat sat on a mat.\nHello world: 1,000 and 3.5!\n";
	dt_test_write_file(ref, r, strlen(r));
	dt_test_write_file(hyp, h, strlen(h));
	struct dt_err err = DT_ERR_INIT;
	struct dt_bleu_counts c;
	DT_CHECK_OK(dt_bleu_text_files(ref, hyp, 0, &c, &err), &err);
	DT_CHECK_NEAR(100 * dt_bleu_score(&c, NULL), 58.55, 0.005); /* t2t-bleu: BLEU_uncased =  58.55 */
	DT_CHECK_OK(dt_bleu_text_files(ref, hyp, 1, &c, &err), &err);
	DT_CHECK_NEAR(100 * dt_bleu_score(&c, NULL), 48.39, 0.005); /* BLEU_cased =  48.39 */
	dt_test_write_file(hyp, h, strlen(h) - 1); /* one line fewer */
	DT_CHECK_INT_EQ(dt_bleu_text_files(ref, hyp, 0, &c, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "has 3 lines");
	dt_test_write_file(hyp, "x\n\xc3(\n", 5);
	DT_CHECK_INT_EQ(dt_bleu_text_files(ref, hyp, 0, &c, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "line 2: not UTF-8");
}
