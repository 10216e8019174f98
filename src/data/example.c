/*
 * example.c — tf.train.Example's protobuf wire format (data/example.h).
 */
#include "data/example.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* A cursor over a message's bytes; `base` is the record's start, for offsets in messages. */
struct cur {
	const uint8_t *p, *end, *base;
};

static enum dt_status bad(const struct cur *c, struct dt_err *err, const char *what)
{
	return dt_err_set(err, DT_DATA, "not a tf.train.Example: %s at byte %zu", what, (size_t)(c->p - c->base));
}

static enum dt_status varint(struct cur *c, uint64_t *v, struct dt_err *err)
{
	uint64_t x = 0;
	for (int i = 0; i < 10; i++) {
		if (c->p == c->end)
			return bad(c, err, "a varint cut short");
		const uint8_t b = *c->p++;
		if (i == 9 && b > 1)
			return bad(c, err, "a varint longer than 64 bits");
		x |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*v = x;
			return DT_OK;
		}
	}
	return bad(c, err, "a varint longer than 10 bytes");
}

/* A field's key; for wire type 2 also the sub-cursor over its bytes (and c moves past them). */
static enum dt_status key(struct cur *c, uint32_t *field, int *wt, struct cur *sub, struct dt_err *err)
{
	uint64_t k, n;
	enum dt_status st = varint(c, &k, err);
	if (st)
		return st;
	*wt = (int)(k & 7);
	if ((k >> 3) == 0 || (k >> 3) > 0x1fffffff)
		return bad(c, err, "field number 0 or above 2^29");
	*field = (uint32_t)(k >> 3);
	if (*wt == 2) {
		if ((st = varint(c, &n, err)))
			return st;
		if (n > (uint64_t)(c->end - c->p))
			return bad(c, err, "a length past the end");
		*sub = (struct cur){ c->p, c->p + n, c->base };
		c->p += n;
	}
	return DT_OK;
}

/* Skips a value of wire type 0, 1, 5 (2 was consumed by key()). */
static enum dt_status skip(struct cur *c, int wt, struct dt_err *err)
{
	uint64_t v;
	switch (wt) {
	case 0: return varint(c, &v, err);
	case 1:
	case 5: {
		const size_t n = wt == 1 ? 8 : 4;
		if ((size_t)(c->end - c->p) < n)
			return bad(c, err, "a fixed-width value cut short");
		c->p += n;
		return DT_OK;
	}
	case 2: return DT_OK;
	default: return bad(c, err, wt == 3 || wt == 4 ? "a group (wire type 3 or 4)" : "wire type 6 or 7");
	}
}

static void reset_values(struct dt_feature *f, enum dt_feature_kind kind)
{
	if (f->kind == kind)
		return;
	free(f->i64);
	free(f->f32);
	free(f->bytes);
	free(f->bytes_len);
	f->i64 = NULL;
	f->f32 = NULL;
	f->bytes = NULL;
	f->bytes_len = NULL;
	f->count = 0;
	f->kind = kind;
}

static void push_i64(struct dt_feature *f, int64_t *cap, int64_t v)
{
	if (f->count == *cap) {
		*cap = *cap ? 2 * *cap : 16;
		f->i64 = dt_xrealloc(f->i64, (size_t)*cap * sizeof(*f->i64));
	}
	f->i64[f->count++] = v;
}

static void push_bytes(struct dt_feature *f, int64_t *cap, const struct cur *value)
{
	if (f->count == *cap) {
		*cap = *cap ? 2 * *cap : 4;
		f->bytes = dt_xrealloc(f->bytes, (size_t)*cap * sizeof(*f->bytes));
		f->bytes_len = dt_xrealloc(f->bytes_len, (size_t)*cap * sizeof(*f->bytes_len));
	}
	f->bytes[f->count] = value->p;
	f->bytes_len[f->count++] = (size_t)(value->end - value->p);
}

static void push_f32(struct dt_feature *f, int64_t *cap, const uint8_t *p)
{
	if (f->count == *cap) {
		*cap = *cap ? 2 * *cap : 16;
		f->f32 = dt_xrealloc(f->f32, (size_t)*cap * sizeof(*f->f32));
	}
	uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	memcpy(&f->f32[f->count++], &u, 4);
}

/* The body of a BytesList, FloatList or Int64List, appended to f. */
static enum dt_status parse_list(struct cur c, struct dt_feature *f, struct dt_err *err)
{
	int64_t cap = f->count;
	while (c.p < c.end) {
		uint32_t field;
		int wt;
		struct cur sub;
		enum dt_status st = key(&c, &field, &wt, &sub, err);
		if (st)
			return st;
		if (field != 1) {
			if ((st = skip(&c, wt, err)))
				return st;
			continue;
		}
		if (f->kind == DT_FEATURE_BYTES) {
			if (wt != 2)
				return bad(&c, err, "a BytesList value that is not bytes");
			push_bytes(f, &cap, &sub);
		} else if (f->kind == DT_FEATURE_INT64 && wt == 0) {
			uint64_t v;
			if ((st = varint(&c, &v, err)))
				return st;
			push_i64(f, &cap, (int64_t)v);
		} else if (f->kind == DT_FEATURE_INT64 && wt == 2) {
			while (sub.p < sub.end) {
				uint64_t v;
				if ((st = varint(&sub, &v, err)))
					return st;
				push_i64(f, &cap, (int64_t)v);
			}
		} else if (f->kind == DT_FEATURE_FLOAT && wt == 5) {
			if (c.end - c.p < 4)
				return bad(&c, err, "a float cut short");
			push_f32(f, &cap, c.p);
			c.p += 4;
		} else if (f->kind == DT_FEATURE_FLOAT && wt == 2) {
			if ((sub.end - sub.p) % 4)
				return bad(&sub, err, "a packed float list whose length is not a multiple of 4");
			for (; sub.p < sub.end; sub.p += 4)
				push_f32(f, &cap, sub.p);
		} else {
			return bad(&c, err, f->kind == DT_FEATURE_INT64 ? "an Int64List value of the wrong wire type"
								       : "a FloatList value of the wrong wire type");
		}
	}
	return DT_OK;
}

static enum dt_status parse_feature(struct cur c, struct dt_feature *f, struct dt_err *err)
{
	while (c.p < c.end) {
		uint32_t field;
		int wt;
		struct cur sub;
		enum dt_status st = key(&c, &field, &wt, &sub, err);
		if (st)
			return st;
		if (field >= 1 && field <= 3) {
			if (wt != 2)
				return bad(&c, err, "a Feature list that is not a message");
			reset_values(f, field == 1 ? DT_FEATURE_BYTES : field == 2 ? DT_FEATURE_FLOAT : DT_FEATURE_INT64);
			if ((st = parse_list(sub, f, err)))
				return st;
		} else if ((st = skip(&c, wt, err))) {
			return st;
		}
	}
	return DT_OK;
}

static void feature_clear(struct dt_feature *f)
{
	free(f->i64);
	free(f->f32);
	free(f->bytes);
	free(f->bytes_len);
	memset(f, 0, sizeof(*f));
}

/* One map entry { key = 1; value = 2; } into ex (replacing an entry of the same key). */
static enum dt_status parse_entry(struct cur c, struct dt_example *ex, struct dt_err *err)
{
	struct dt_feature f = { .name = "", .name_len = 0 };
	struct cur value = { NULL, NULL, c.base };
	int has_value = 0;
	while (c.p < c.end) {
		uint32_t field;
		int wt;
		struct cur sub;
		enum dt_status st = key(&c, &field, &wt, &sub, err);
		if (st)
			return st;
		if ((field == 1 || field == 2) && wt != 2)
			return bad(&c, err, field == 1 ? "a feature name that is not a string" : "a Feature that is not a message");
		if (field == 1) {
			f.name = (const char *)sub.p;
			f.name_len = (size_t)(sub.end - sub.p);
		} else if (field == 2) {
			value = sub; /* the last value wins, as in a map entry */
			has_value = 1;
		} else if ((st = skip(&c, wt, err))) {
			return st;
		}
	}
	if (has_value) {
		enum dt_status st = parse_feature(value, &f, err);
		if (st) {
			feature_clear(&f);
			return st;
		}
	}
	for (int i = 0; i < ex->count; i++)
		if (ex->f[i].name_len == f.name_len && memcmp(ex->f[i].name, f.name, f.name_len) == 0) {
			feature_clear(&ex->f[i]);
			ex->f[i] = f;
			return DT_OK;
		}
	if (ex->count == ex->cap) {
		ex->cap = ex->cap ? 2 * ex->cap : 4;
		ex->f = dt_xrealloc(ex->f, (size_t)ex->cap * sizeof(*ex->f));
	}
	ex->f[ex->count++] = f;
	return DT_OK;
}

enum dt_status dt_example_parse(const uint8_t *data, size_t len, struct dt_example *ex, struct dt_err *err)
{
	memset(ex, 0, sizeof(*ex));
	struct cur c = { data, data + len, data };
	enum dt_status st = DT_OK;
	while (!st && c.p < c.end) {
		uint32_t field;
		int wt;
		struct cur sub;
		if ((st = key(&c, &field, &wt, &sub, err)))
			break;
		if (field != 1) {
			st = skip(&c, wt, err);
			continue;
		}
		if (wt != 2) {
			st = bad(&c, err, "Example.features that is not a message");
			break;
		}
		/* Features: its field 1 entries; anything else skipped */
		while (!st && sub.p < sub.end) {
			uint32_t ff;
			int fwt;
			struct cur entry;
			if ((st = key(&sub, &ff, &fwt, &entry, err)))
				break;
			if (ff == 1 && fwt != 2)
				st = bad(&sub, err, "a Features entry that is not a message");
			else if (ff == 1)
				st = parse_entry(entry, ex, err);
			else
				st = skip(&sub, fwt, err);
		}
	}
	if (st)
		dt_example_free(ex);
	return st;
}

void dt_example_free(struct dt_example *ex)
{
	for (int i = 0; i < ex->count; i++)
		feature_clear(&ex->f[i]);
	free(ex->f);
	memset(ex, 0, sizeof(*ex));
}

const struct dt_feature *dt_example_find(const struct dt_example *ex, const char *name)
{
	const size_t n = strlen(name);
	for (int i = 0; i < ex->count; i++)
		if (ex->f[i].name_len == n && memcmp(ex->f[i].name, name, n) == 0)
			return &ex->f[i];
	return NULL;
}

/* ---- encoding ------------------------------------------------------------------ */

static size_t varint_len(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

uint8_t *dt_example_encode_int64(int n, const char *const *names, const int64_t *const *vals, const int64_t *counts,
				 size_t *len)
{
	/* sizes inside out: packed values, Int64List, Feature, entry, Features */
	size_t features = 0;
	size_t *packed = dt_xmallocarray((size_t)n + 1, 4 * sizeof(size_t));
	for (int i = 0; i < n; i++) {
		size_t pk = 0;
		for (int64_t j = 0; j < counts[i]; j++)
			pk += varint_len((uint64_t)vals[i][j]);
		const size_t list = counts[i] ? 1 + varint_len(pk) + pk : 0;
		const size_t feature = 1 + varint_len(list) + list;
		const size_t nl = strlen(names[i]);
		const size_t entry = 1 + varint_len(nl) + nl + 1 + varint_len(feature) + feature;
		packed[4 * i] = pk;
		packed[4 * i + 1] = list;
		packed[4 * i + 2] = feature;
		packed[4 * i + 3] = entry;
		features += 1 + varint_len(entry) + entry;
	}
	const size_t total = 1 + varint_len(features) + features;
	uint8_t *buf = dt_xmalloc(total), *p = buf;
	*p++ = 0x0a; /* Example.features */
	p = put_varint(p, features);
	for (int i = 0; i < n; i++) {
		const size_t nl = strlen(names[i]);
		*p++ = 0x0a; /* Features.feature entry */
		p = put_varint(p, packed[4 * i + 3]);
		*p++ = 0x0a; /* key */
		p = put_varint(p, nl);
		memcpy(p, names[i], nl);
		p += nl;
		*p++ = 0x12; /* value: Feature */
		p = put_varint(p, packed[4 * i + 2]);
		*p++ = 0x1a; /* Feature.int64_list */
		p = put_varint(p, packed[4 * i + 1]);
		if (counts[i]) {
			*p++ = 0x0a; /* Int64List.value, packed */
			p = put_varint(p, packed[4 * i]);
			for (int64_t j = 0; j < counts[i]; j++)
				p = put_varint(p, (uint64_t)vals[i][j]);
		}
	}
	DT_ASSERT((size_t)(p - buf) == total);
	free(packed);
	*len = total;
	return buf;
}
