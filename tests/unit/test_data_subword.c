/* Unit tests for t2t's SubwordTextEncoder (data/subword.h) against files
 * t2t's own code wrote (tests/fixtures/subword/README.md): the vocabulary
 * built from the same corpus is the same file byte for byte at two target
 * sizes; t2t's vocabulary file loads and encodes every string to t2t's ids;
 * decode(encode(s)) == s for random UTF-8 over every plane (characters
 * outside the alphabet, escapes, spaces, underscores); invalid UTF-8 and bad
 * files. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/atomic_file.h"
#include "base/rng.h"
#include "data/subword.h"
#include "data/text.h"

#define FIXTURES "tests/fixtures/subword/"

/* The corpus's lines (the caller frees lines[0] and lines). */
static char **corpus(size_t *n)
{
	char *text;
	size_t len;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_read_file(FIXTURES "corpus.txt", 1 << 20, &text, &len, &err), &err);
	char **lines = malloc((len + 1) * sizeof(*lines));
	*n = 0;
	for (char *p = text, *nl; (nl = strchr(p, '\n')); p = nl + 1) {
		*nl = '\0';
		lines[(*n)++] = p;
	}
	DT_CHECK_INT_EQ((int)*n, 400);
	return lines;
}

static void check_build(int target, const char *want_path)
{
	size_t n;
	char **lines = corpus(&n);
	struct dt_subword *v = dt_subword_build((const char *const *)lines, n, target);
	char path[4096];
	snprintf(path, sizeof(path), "%s/vocab.subwords", dt_test_tmpdir());
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_subword_save(v, path, &err), &err);
	char *got, *want;
	size_t gl, wl;
	DT_CHECK_OK(dt_read_file(path, 1 << 20, &got, &gl, &err), &err);
	DT_CHECK_OK(dt_read_file(want_path, 1 << 20, &want, &wl, &err), &err);
	fprintf(stderr, "target %d: %d ids (t2t's file: %zu bytes, ours %zu)\n", target, dt_subword_size(v), wl, gl);
	DT_CHECK_INT_EQ((int)gl, (int)wl);
	DT_CHECK(gl == wl && memcmp(got, want, gl) == 0);
	free(got);
	free(want);
	dt_subword_free(v);
	free(lines[0]);
	free(lines);
}

DT_TEST(data_subword, build_gives_t2ts_vocabulary_at_100)
{
	check_build(100, FIXTURES "vocab.corpus.100.subwords");
}

DT_TEST(data_subword, build_gives_t2ts_vocabulary_at_1000)
{
	check_build(1000, FIXTURES "vocab.corpus.1000.subwords");
}

DT_TEST(data_subword, t2ts_file_loads_and_encodes_to_t2ts_ids)
{
	struct dt_subword *v;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_subword_load(FIXTURES "vocab.corpus.1000.subwords", &v, &err), &err);
	DT_CHECK_INT_EQ(dt_subword_size(v), 392);
	char tok[64];
	dt_subword_token(v, 0, tok, sizeof(tok));
	DT_CHECK_STR_EQ(tok, "<pad>_");
	dt_subword_token(v, 1, tok, sizeof(tok));
	DT_CHECK_STR_EQ(tok, "<EOS>_");
	json_error_t je;
	json_t *inputs = json_load_file(FIXTURES "encoded_inputs.json", 0, &je);
	DT_CHECK(inputs && json_is_array(inputs));
	char *ids_text;
	size_t len;
	DT_CHECK_OK(dt_read_file(FIXTURES "encoded.txt", 1 << 20, &ids_text, &len, &err), &err);
	char *line = ids_text;
	for (size_t i = 0; i < json_array_size(inputs); i++) {
		const char *s = json_string_value(json_array_get(inputs, i));
		char *nl = strchr(line, '\n');
		DT_CHECK(s && nl);
		*nl = '\0';
		int32_t want[512], got[512];
		size_t nw = 0;
		for (char *p = line, *end; *p; p = end) {
			want[nw++] = (int32_t)strtol(p, &end, 10);
			if (end == p)
				break;
		}
		const size_t ng = dt_subword_encode(v, s, got, 512);
		if (ng != nw || memcmp(got, want, nw * sizeof(int32_t)) != 0)
			fprintf(stderr, "string %zu '%s': %zu ids, t2t %zu\n", i, s, ng, nw);
		DT_CHECK_INT_EQ((int)ng, (int)nw);
		DT_CHECK(memcmp(got, want, nw * sizeof(int32_t)) == 0);
		char back[4096];
		const size_t need = dt_subword_decode(v, got, ng, back, sizeof(back));
		DT_CHECK_INT_EQ((int)need, (int)strlen(s));
		DT_CHECK_STR_EQ(back, s);
		line = nl + 1;
	}
	json_decref(inputs);
	free(ids_text);
	dt_subword_free(v);
}

/* Appends code point c as UTF-8. */
static size_t put(char *p, uint32_t c)
{
	if (c < 0x80) {
		p[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		p[0] = (char)(0xc0 | c >> 6);
		p[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		p[0] = (char)(0xe0 | c >> 12);
		p[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		p[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	p[0] = (char)(0xf0 | c >> 18);
	p[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	p[2] = (char)(0x80 | ((c >> 6) & 0x3f));
	p[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

DT_TEST(data_subword, any_utf8_round_trips)
{
	struct dt_subword *v;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_subword_load(FIXTURES "vocab.corpus.100.subwords", &v, &err), &err);
	struct dt_rng r;
	dt_rng_seed(&r, 15);
	/* characters the escaping and the tokenizer care about, and every plane */
	const uint32_t special[] = { ' ', ' ', '_', '\\', ';', 'u', '0', '9', '\n', '\t', 'a', 'Z', 0x3013, 0xfffd, 0x10ffff,
				     0xd7ff, 0xe000, 0x80, 0x7f, 0x1 };
	char s[1024], back[8192];
	int32_t ids[2048];
	for (int iter = 0; iter < 3000; iter++) {
		size_t len = 0;
		const int n = (int)dt_rng_below(&r, 40);
		for (int k = 0; k < n; k++) {
			uint32_t c;
			const uint64_t kind = dt_rng_below(&r, 4);
			if (kind == 0)
				c = special[dt_rng_below(&r, sizeof(special) / sizeof(special[0]))];
			else if (kind == 1)
				c = 0x20 + (uint32_t)dt_rng_below(&r, 0x5f);
			else
				do
					c = 1 + (uint32_t)dt_rng_below(&r, kind == 2 ? 0x3000 : 0x10ffff);
				while (c >= 0xd800 && c < 0xe000);
			len += put(s + len, c);
		}
		s[len] = '\0';
		const size_t ni = dt_subword_encode(v, s, ids, 2048);
		DT_CHECK(ni <= 2048);
		for (size_t k = 0; k < ni; k++)
			DT_CHECK(ids[k] >= 2 && ids[k] < dt_subword_size(v));
		const size_t need = dt_subword_decode(v, ids, ni, back, sizeof(back));
		if (strcmp(back, s) != 0)
			fprintf(stderr, "iteration %d: '%s' came back as '%s'\n", iter, s, back);
		DT_CHECK_INT_EQ((int)need, (int)len);
		DT_CHECK_STR_EQ(back, s);
	}
	/* a short buffer gets a terminated prefix and the length it needs */
	const size_t ni = dt_subword_encode(v, "hello world", ids, 2048);
	char small[4];
	DT_CHECK_INT_EQ((int)dt_subword_decode(v, ids, ni, small, sizeof(small)), 11);
	DT_CHECK_STR_EQ(small, "hel");
	/* encode reports the ids it needs when cap is short */
	DT_CHECK_INT_EQ((int)dt_subword_encode(v, "hello world", ids, 1), (int)ni);
	/* invalid UTF-8: each bad byte is U+FFFD */
	const size_t nb = dt_subword_encode(v, "a\xff" "b\xc3", ids, 2048);
	DT_CHECK_INT_EQ((int)dt_subword_decode(v, ids, nb, back, sizeof(back)), 8);
	DT_CHECK_STR_EQ(back, "a\xef\xbf\xbd" "b\xef\xbf\xbd");
	dt_subword_free(v);
}

DT_TEST(data_subword, bad_files_are_named)
{
	struct dt_subword *v;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_subword_parse("v", "'<pad>_'\n", 9, &v, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "vocabulary 'v' has 1 line(s)");
	DT_CHECK(v == NULL);
	err = (struct dt_err)DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_subword_parse("v", "'<pad>_'\n'<EOS>_'\n'\xc3('\n", 21, &v, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "vocabulary 'v' line 3 is not UTF-8");
	err = (struct dt_err)DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_subword_load("/nonexistent/vocab.x.8.subwords", &v, &err), DT_IO);
	/* a character without its own subtoken */
	err = (struct dt_err)DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_subword_parse("v", "'<pad>_'\n'<EOS>_'\n", 18, &v, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "vocabulary 'v' has no subtoken '0' (U+0030)");
	/* unquoted, double-quoted and trailing-space lines load as t2t loads them */
	char text[512] = "<pad>_\n\"<EOS>_\"  \n'ab'\n'\n";
	for (const char *c = "<pad>_EOSb\\u;0123456789"; *c; c++) {
		const size_t l = strlen(text);
		snprintf(text + l, sizeof(text) - l, "'%c'\n", *c);
	}
	DT_CHECK_OK(dt_subword_parse("v", text, strlen(text), &v, &err), &err);
	DT_CHECK_INT_EQ(dt_subword_size(v), 4 + 23);
	char tok[16];
	dt_subword_token(v, 1, tok, sizeof(tok));
	DT_CHECK_STR_EQ(tok, "<EOS>_");
	dt_subword_token(v, 3, tok, sizeof(tok));
	DT_CHECK_STR_EQ(tok, "");
	int32_t ids[8];
	DT_CHECK_INT_EQ((int)dt_subword_encode(v, "ab", ids, 8), 2); /* "ab", then the final '_' */
	DT_CHECK_INT_EQ(ids[0], 2);
	DT_CHECK_INT_EQ(ids[1], 9);
	dt_subword_free(v);
}

static void write_text(const char *dir, const char *name, const char *text)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_write_file_atomic(path, text, strlen(text), &err), &err);
}

DT_TEST(data_subword, text2text_tmpdir_uses_the_vocabulary_file_in_its_data_dir)
{
	const char *dir = dt_test_tmpdir();
	write_text(dir, "inputs.train.txt", "  the LORD said\nel señor dijo\n");
	write_text(dir, "targets.train.txt", "el señor dijo\nthe LORD said  \n");
	char *vocab;
	size_t len;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_read_file(FIXTURES "vocab.corpus.1000.subwords", 1 << 20, &vocab, &len, &err), &err);
	char path[4096];
	dt_text_vocab_path("text2text_tmpdir", dir, path, sizeof(path));
	DT_CHECK_CONTAINS(path, "/vocab.text2text_tmpdir.32768.subwords");
	DT_CHECK_OK(dt_write_file_atomic(path, vocab, len, &err), &err);
	free(vocab);
	struct dt_dataset d;
	DT_CHECK_OK(dt_problem_load("text2text_tmpdir", dir, NULL, DT_SPLIT_TRAIN, 1, &d, &err), &err);
	const struct dt_text_set *t = d.text;
	DT_CHECK_INT_EQ(t->encoder, DT_TEXT_SUBWORD);
	DT_CHECK_INT_EQ(t->input_vocab, 392);
	DT_CHECK_INT_EQ((int)t->count, 2);
	/* the stored ids are the subword encoding of the stripped line, then EOS */
	int32_t ids[64];
	const size_t n = dt_subword_encode(t->subword, "the LORD said", ids, 64);
	DT_CHECK_INT_EQ(dt_text_in_len(t, 0), (int)n + 1);
	DT_CHECK(memcmp(t->in_tok, ids, n * sizeof(int32_t)) == 0);
	DT_CHECK_INT_EQ(t->in_tok[n], DT_TEXT_EOS);
	DT_CHECK(memcmp(t->tg_tok + t->tg_off[1], ids, n * sizeof(int32_t)) == 0);
	/* dt_text_encode / dt_text_decode (what dtrain decode uses) */
	int k;
	DT_CHECK_OK(dt_text_encode(t, 1, " naïve café ☃ x_y\n", ids, 64, &k, &err), &err);
	DT_CHECK_INT_EQ(ids[k - 1], DT_TEXT_EOS);
	char back[256];
	dt_text_decode(t, ids, k, back, sizeof(back));
	DT_CHECK_STR_EQ(back, "naïve café ☃ x_y");
	dt_dataset_release(&d);
}
