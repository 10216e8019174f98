#include "data/units.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static size_t bitmap_bytes(int64_t nu) { return (size_t)(nu + 7) / 8; }
static int bit(const uint8_t *b, int64_t u) { return b[u / 8] >> (u % 8) & 1; }

void dt_units_init(struct dt_units_layout *l, int trainers, int64_t nu)
{
	memset(l, 0, sizeof(*l));
	l->trainers = trainers;
	l->nu = nu;
}

void dt_units_release(struct dt_units_layout *l)
{
	for (int i = 0; i < l->n; i++)
		free(l->base[i].bits);
	free(l->base);
	memset(l, 0, sizeof(*l));
}

void dt_units_copy(struct dt_units_layout *dst, const struct dt_units_layout *src)
{
	*dst = *src;
	dst->base = src->n ? dt_xcalloc((size_t)src->n, sizeof(*dst->base)) : NULL;
	for (int i = 0; i < src->n; i++) {
		dst->base[i] = src->base[i];
		dst->base[i].bits = dt_xmalloc(bitmap_bytes(src->nu));
		memcpy(dst->base[i].bits, src->base[i].bits, bitmap_bytes(src->nu));
	}
}

static const struct dt_units_epoch *base_of(const struct dt_units_layout *l, int64_t epoch)
{
	for (int i = 0; i < l->n; i++)
		if (l->base[i].epoch == epoch)
			return &l->base[i];
	return NULL;
}

int64_t dt_units_share(const struct dt_units_layout *l, int j, int64_t epoch)
{
	const struct dt_units_epoch *b = base_of(l, epoch);
	const int64_t unread = b ? b->unread : l->nu;
	return unread > j ? (unread - j + l->trainers - 1) / l->trainers : 0;
}

void dt_units_normalize(const struct dt_units_layout *l, int j, struct dt_units_pos *p)
{
	if (p->epoch < l->first) /* unknown, or from before this layout */
		*p = (struct dt_units_pos){ l->first, 0 };
	/* Bounded: past the last base every epoch has nu >= trainers units
	 * (dt_units_parse and the pipeline check it), so every share is >= 1. */
	while (p->taken >= dt_units_share(l, j, p->epoch)) {
		p->epoch++;
		p->taken = 0;
	}
}

int dt_units_unread_list(const struct dt_units_layout *l, int64_t epoch, int64_t *out)
{
	const struct dt_units_epoch *b = base_of(l, epoch);
	if (!b)
		return 0;
	int64_t k = 0;
	for (int64_t u = 0; u < l->nu; u++)
		if (!bit(b->bits, u))
			out[k++] = u;
	return 1;
}

int64_t dt_units_at(const struct dt_units_layout *l, int j, int64_t taken, const int64_t *list)
{
	const int64_t i = (int64_t)j + taken * l->trainers;
	return list ? list[i] : i;
}

void dt_units_merge(const struct dt_units_layout *l, const struct dt_units_pos *pos, int trainers,
		    struct dt_units_layout *out)
{
	const int m = l->trainers;
	struct dt_units_pos *p = dt_xcalloc((size_t)m, sizeof(*p));
	int64_t lo = INT64_MAX, hi = INT64_MIN;
	for (int j = 0; j < m; j++) {
		p[j] = pos[j];
		dt_units_normalize(l, j, &p[j]);
		lo = p[j].epoch < lo ? p[j].epoch : lo;
		hi = p[j].epoch > hi ? p[j].epoch : hi;
	}
	/* A base past every trainer (read under a layout before l) still holds. */
	if (l->n && l->base[l->n - 1].epoch > hi)
		hi = l->base[l->n - 1].epoch;
	dt_units_init(out, trainers, l->nu);
	out->first = lo;
	int64_t *list = dt_xmallocarray((size_t)l->nu, sizeof(int64_t));
	for (int64_t e = lo; e <= hi && out->n < DT_UNITS_MAX_EPOCHS; e++) {
		const struct dt_units_epoch *b = base_of(l, e);
		uint8_t *bits = dt_xcalloc(bitmap_bytes(l->nu), 1);
		if (b)
			memcpy(bits, b->bits, bitmap_bytes(l->nu));
		const int has = dt_units_unread_list(l, e, list);
		for (int j = 0; j < m; j++) {
			const int64_t n = p[j].epoch > e ? dt_units_share(l, j, e) : p[j].epoch == e ? p[j].taken : 0;
			for (int64_t t = 0; t < n; t++) {
				const int64_t u = dt_units_at(l, j, t, has ? list : NULL);
				bits[u / 8] |= (uint8_t)(1u << (u % 8));
			}
		}
		int64_t unread = 0;
		for (int64_t u = 0; u < l->nu; u++)
			unread += !bit(bits, u);
		if (unread == l->nu) { /* nothing read there: no base */
			free(bits);
			continue;
		}
		out->base = dt_xrealloc(out->base, ((size_t)out->n + 1) * sizeof(*out->base));
		out->base[out->n++] = (struct dt_units_epoch){ e, unread, bits };
	}
	free(list);
	free(p);
}

/* ---- the checkpoint's text ---- */

void dt_units_format(const struct dt_units_layout *l, const struct dt_units_pos *pos, char **layout, char **base,
		     char **at)
{
	*layout = dt_xmalloc(80);
	snprintf(*layout, 80, "%d:%" PRId64 ":%" PRId64, l->trainers, l->nu, l->first);
	const size_t hex = bitmap_bytes(l->nu) * 2;
	char *b = dt_xmalloc((size_t)l->n * (hex + 24) + 1), *w = b;
	*w = 0;
	for (int i = 0; i < l->n; i++) {
		w += sprintf(w, "%s%" PRId64 ":", i ? ";" : "", l->base[i].epoch);
		for (size_t k = 0; k < bitmap_bytes(l->nu); k++)
			w += sprintf(w, "%02x", l->base[i].bits[k]);
	}
	*base = b;
	char *a = dt_xmalloc((size_t)l->trainers * 44 + 1);
	w = a;
	*w = 0;
	for (int j = 0; j < l->trainers; j++)
		w += sprintf(w, "%s%" PRId64 ":%" PRId64, j ? "," : "", pos[j].epoch < 0 ? (int64_t)-1 : pos[j].epoch,
			     pos[j].epoch < 0 ? (int64_t)0 : pos[j].taken);
	*at = a;
}

/* A decimal integer in [lo, hi] at *s, which moves past it: only as
 * dt_units_format writes one (no '+', no leading zeros, no "-0"), so that a
 * text read back is the text written. */
static int parse_i64(const char **s, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	const char *d = *s + (**s == '-');
	if (!(*d >= '0' && *d <= '9') || (d[0] == '0' && ((d[1] >= '0' && d[1] <= '9') || d != *s)))
		return 0;
	long long v = strtoll(*s, &end, 10);
	if (end == *s || v < lo || v > hi)
		return 0;
	*s = end;
	*out = v;
	return 1;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

enum dt_status dt_units_parse(const char *layout, const char *base, const char *at, struct dt_units_layout *out,
			      struct dt_units_pos **pos, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	*pos = NULL;
	int64_t m, nu, first;
	const char *s = layout;
	if (!s || !parse_i64(&s, 1, DT_UNITS_MAX_TRAINERS, &m) || *s++ != ':' || !parse_i64(&s, m, INT32_MAX, &nu) ||
	    *s++ != ':' || !parse_i64(&s, 0, INT64_MAX / 2, &first) || *s)
		return dt_err_set(err, DT_CKPT, "pipeline_units '%.40s' is not TRAINERS:UNITS:FIRST_EPOCH with "
				  "1 <= TRAINERS <= UNITS", layout ? layout : "(absent)");
	dt_units_init(out, (int)m, nu);
	out->first = first;
	const size_t bytes = bitmap_bytes(nu);
	for (s = base ? base : ""; *s;) {
		int64_t e;
		if (out->n == DT_UNITS_MAX_EPOCHS || !parse_i64(&s, out->n ? out->base[out->n - 1].epoch + 1 : first,
								 INT64_MAX / 2, &e) || *s++ != ':')
			goto bad_base;
		uint8_t *bits = dt_xcalloc(bytes, 1);
		out->base = dt_xrealloc(out->base, ((size_t)out->n + 1) * sizeof(*out->base));
		out->base[out->n++] = (struct dt_units_epoch){ e, 0, bits };
		for (size_t k = 0; k < bytes; k++) {
			const int h = hexval(s[0]), l = h < 0 ? -1 : hexval(s[1]);
			if (l < 0)
				goto bad_base;
			bits[k] = (uint8_t)(h << 4 | l);
			s += 2;
		}
		if (nu % 8 && bits[bytes - 1] >> (nu % 8)) /* bits past the last unit */
			goto bad_base;
		for (int64_t u = 0; u < nu; u++)
			out->base[out->n - 1].unread += !bit(bits, u);
		if (*s == ';' && s[1]) /* a separator, never a trailing one */
			s++;
		else if (*s)
			goto bad_base;
	}
	*pos = dt_xcalloc((size_t)m, sizeof(**pos));
	s = at ? at : "";
	for (int j = 0; j < m; j++) {
		struct dt_units_pos *p = &(*pos)[j];
		if ((j && *s++ != ',') || !parse_i64(&s, -1, INT64_MAX / 2, &p->epoch) || *s++ != ':' ||
		    !parse_i64(&s, 0, nu, &p->taken))
			goto bad_at;
	}
	if (*s)
		goto bad_at;
	return DT_OK;
bad_base:
	dt_units_release(out);
	return dt_err_set(err, DT_CKPT, "pipeline_units_base is not EPOCH:HEX;... with increasing epochs from %" PRId64
			  " and %zu bytes of hex each", first, bytes);
bad_at:
	dt_units_release(out);
	free(*pos);
	*pos = NULL;
	return dt_err_set(err, DT_CKPT, "pipeline_units_at is not %" PRId64 " positions EPOCH:TAKEN separated by commas",
			  m);
}
