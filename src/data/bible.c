/*
 * bible.c — translate_enes_bible8k's parallel text (data/text.h): the English
 * King James Version and the Spanish Reina-Valera 1909 that Debian ships as
 * SWORD modules (sword-text-kjv: engKJV2006eb; sword-text-sparv:
 * spaRV1909eb), read through diatheke and aligned by verse.
 *
 * `diatheke -b MODULE -f plain -k "Gen 1:1-Rev 22:21"` prints one line per
 * verse, "Book C:V: text" (SWORD renders the OSIS markup to plain text and
 * leaves notes out), with other lines between them: the KJV module's psalm
 * titles and blank lines, and a last "(MODULE)" line. A verse line is one
 * that starts with a book name (letters and spaces, "I Samuel"), a space,
 * digits ':' digits and ": ". Both modules declare the KJV versification,
 * so the same reference names the same verse: the pairs are the
 * references both modules print, in the order of the first, with a verse
 * empty in either (the RV 1909 joins a few verses to the one before) left
 * out. The check: both modules must print the same references in the same
 * order (31,102 in the KJV versification), or the problem refuses to build.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/alloc.h"
#include "base/log.h"
#include "data/internal.h"

struct verses {
	char **ref, **text;
	size_t n, cap;
};

static void verses_free(struct verses *v)
{
	for (size_t i = 0; i < v->n; i++) {
		free(v->ref[i]);
		free(v->text[i]);
	}
	free(v->ref);
	free(v->text);
	memset(v, 0, sizeof(*v));
}

/* The length of "Book C:V" at the start of s when s is a verse line, else 0. */
static size_t verse_ref(const char *s)
{
	size_t i = 0;
	if (!isupper((unsigned char)s[0]))
		return 0;
	while (isalpha((unsigned char)s[i]) || s[i] == ' ')
		i++;
	if (i < 2 || s[i - 1] != ' ' || !isdigit((unsigned char)s[i]))
		return 0;
	while (isdigit((unsigned char)s[i]))
		i++;
	if (s[i] != ':' || !isdigit((unsigned char)s[i + 1]))
		return 0;
	i++;
	while (isdigit((unsigned char)s[i]))
		i++;
	return s[i] == ':' && (s[i + 1] == ' ' || s[i + 1] == '\0' || s[i + 1] == '\n') ? i : 0;
}

/* Length of a Strong's number tag at s ("<H0559>", "<G2316>"), 0 if none.
 * diatheke's plain rendering of spaRV1909eb leaves them in 3,609 verses
 * whatever the Strong's option filter says; they are not words of the text. */
static size_t strongs_tag(const char *s)
{
	size_t i = 1;
	if (s[0] != '<' || (s[1] != 'H' && s[1] != 'G'))
		return 0;
	while (isdigit((unsigned char)s[++i]))
		;
	return i > 2 && s[i] == '>' ? i + 1 : 0;
}

/* Copies the verse's text: the KJV's paragraph marks (¶) and Strong's
 * number tags (with the space before each) out, white space trimmed. */
static char *clean_text(const char *s)
{
	char *out = dt_xmalloc(strlen(s) + 1);
	size_t n = 0;
	for (; *s; s++) {
		if ((unsigned char)s[0] == 0xc2 && (unsigned char)s[1] == 0xb6) { /* U+00B6 */
			s++;
			continue;
		}
		size_t tag = strongs_tag(s);
		if (tag) {
			if (n > 0 && out[n - 1] == ' ')
				n--;
			s += tag - 1;
			continue;
		}
		out[n++] = *s;
	}
	out[n] = '\0';
	char *b = out;
	while (isspace((unsigned char)*b))
		b++;
	while (n > 0 && isspace((unsigned char)out[n - 1]))
		out[--n] = '\0';
	memmove(out, b, strlen(b) + 1);
	return out;
}

static enum dt_status read_module(const char *module, struct verses *v, struct dt_err *err)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "diatheke -b %s -f plain -k 'Gen 1:1-Rev 22:21' 2>&1", module);
	FILE *p = popen(cmd, "r");
	if (!p)
		return dt_err_set(err, DT_IO, "cannot run diatheke: %s", strerror(errno));
	char *line = NULL;
	size_t lcap = 0;
	while (getline(&line, &lcap, p) >= 0) {
		const char *s = line;
		while (*s == ' ' || *s == '\t')
			s++;
		const size_t r = verse_ref(s);
		if (!r)
			continue;
		if (v->n == v->cap) {
			v->cap = v->cap ? 2 * v->cap : 32768;
			v->ref = dt_xrealloc(v->ref, v->cap * sizeof(*v->ref));
			v->text = dt_xrealloc(v->text, v->cap * sizeof(*v->text));
		}
		v->ref[v->n] = dt_xmalloc(r + 1);
		memcpy(v->ref[v->n], s, r);
		v->ref[v->n][r] = '\0';
		v->text[v->n] = clean_text(s + r + 1);
		v->n++;
	}
	free(line);
	const int rc = pclose(p);
	if (rc != 0 || v->n == 0) {
		enum dt_status st = dt_err_set(err, DT_DATA, "diatheke printed %zu verses of module '%s' (exit status %d)",
					       v->n, module, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
		dt_err_hint(err, "install diatheke, sword-text-kjv and sword-text-sparv (apt-get install diatheke "
			    "sword-text-kjv sword-text-sparv)");
		return st;
	}
	return DT_OK;
}

enum dt_status dt__bible_pairs(char ***en, char ***es, size_t *n, struct dt_err *err)
{
	struct verses a = { 0 }, b = { 0 };
	*en = *es = NULL;
	*n = 0;
	enum dt_status st = read_module("engKJV2006eb", &a, err);
	if (!st)
		st = read_module("spaRV1909eb", &b, err);
	if (!st && a.n != b.n)
		st = dt_err_set(err, DT_DATA, "the KJV has %zu verses and the RV 1909 %zu: the modules do not share a "
				"versification", a.n, b.n);
	for (size_t i = 0; !st && i < a.n; i++)
		if (strcmp(a.ref[i], b.ref[i]) != 0)
			st = dt_err_set(err, DT_DATA, "verse %zu is '%s' in the KJV and '%s' in the RV 1909: not aligned",
					i, a.ref[i], b.ref[i]);
	size_t empty = 0;
	if (!st) {
		*en = dt_xmallocarray(a.n + 1, sizeof(char *));
		*es = dt_xmallocarray(a.n + 1, sizeof(char *));
		for (size_t i = 0; i < a.n; i++) {
			if (!*a.text[i] || !*b.text[i]) {
				empty++;
				continue;
			}
			(*en)[*n] = a.text[i];
			(*es)[*n] = b.text[i];
			a.text[i] = b.text[i] = NULL;
			(*n)++;
		}
		dt_info("bible: %zu verses in both modules by reference, %zu pairs (%zu with a verse empty in one left out)",
			a.n, *n, empty);
	}
	verses_free(&a);
	verses_free(&b);
	return st;
}
