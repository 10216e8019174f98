/*
 * checkpoint_st.c — the safetensors format itself: dtype table, header
 * builder (the writer's primitive) and the reader that enforces every rule
 * of the reference implementation (checkpoint.h's layout, items 1–3).
 */
#include "train/checkpoint_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/crc32c.h"

static const struct {
	const char *name;
	int bits;
} dtypes[DT_ST_DTYPE_COUNT] = {
	[DT_ST_BOOL] = { "BOOL", 8 },           [DT_ST_U8] = { "U8", 8 },
	[DT_ST_I8] = { "I8", 8 },               [DT_ST_I16] = { "I16", 16 },
	[DT_ST_U16] = { "U16", 16 },            [DT_ST_F16] = { "F16", 16 },
	[DT_ST_BF16] = { "BF16", 16 },          [DT_ST_I32] = { "I32", 32 },
	[DT_ST_U32] = { "U32", 32 },            [DT_ST_F32] = { "F32", 32 },
	[DT_ST_F64] = { "F64", 64 },            [DT_ST_I64] = { "I64", 64 },
	[DT_ST_U64] = { "U64", 64 },            [DT_ST_C64] = { "C64", 64 },
	[DT_ST_F8_E5M2] = { "F8_E5M2", 8 },     [DT_ST_F8_E4M3] = { "F8_E4M3", 8 },
	[DT_ST_F8_E8M0] = { "F8_E8M0", 8 },     [DT_ST_F8_E4M3FNUZ] = { "F8_E4M3FNUZ", 8 },
	[DT_ST_F8_E5M2FNUZ] = { "F8_E5M2FNUZ", 8 }, [DT_ST_F4] = { "F4", 4 },
	[DT_ST_F6_E2M3] = { "F6_E2M3", 6 },     [DT_ST_F6_E3M2] = { "F6_E3M2", 6 },
};

const char *dt_st_dtype_name(enum dt_st_dtype t)
{
	return (unsigned)t < DT_ST_DTYPE_COUNT ? dtypes[t].name : "?";
}

int dt_st_dtype_bits(enum dt_st_dtype t)
{
	return (unsigned)t < DT_ST_DTYPE_COUNT ? dtypes[t].bits : 0;
}

static int dtype_from_name(const char *s, enum dt_st_dtype *out)
{
	for (int i = 0; i < DT_ST_DTYPE_COUNT; i++)
		if (strcmp(dtypes[i].name, s) == 0) {
			*out = (enum dt_st_dtype)i;
			return 1;
		}
	return 0;
}

static void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* ---- writer --------------------------------------------------------------------- */

enum dt_status dt_st_build_header(const struct dt_st_tensor_desc *t, int n, const struct dt_ckpt_kv *meta,
				  int num_meta, char **out, size_t *out_len, struct dt_err *err)
{
	*out = NULL;
	*out_len = 0;
	json_t *root = json_object();
	if (num_meta > 0) {
		json_t *m = json_object();
		for (int i = 0; i < num_meta; i++)
			json_object_set_new(m, meta[i].key, json_string(meta[i].value));
		json_object_set_new(root, "__metadata__", m);
	}
	uint64_t at = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(t[i].name, "__metadata__") == 0 || json_object_get(root, t[i].name)) {
			json_decref(root);
			return dt_err_set(err, DT_INTERNAL, "tensor name '%s' is reserved or used twice", t[i].name);
		}
		json_t *shape = json_array();
		for (int d = 0; d < t[i].ndim; d++)
			json_array_append_new(shape, json_integer((json_int_t)t[i].shape[d]));
		json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype", dt_st_dtype_name(t[i].dtype), "shape", shape,
				      "data_offsets", (json_int_t)at, (json_int_t)(at + t[i].nbytes));
		json_object_set_new(root, t[i].name, e);
		at += t[i].nbytes;
	}
	char *text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	if (!text)
		return dt_err_set(err, DT_INTERNAL, "cannot encode the safetensors header (a name is not UTF-8?)");
	size_t len = strlen(text);
	size_t padded = (len + 7) / 8 * 8;
	char *buf = dt_xmalloc(8 + padded);
	put_le64((unsigned char *)buf, padded);
	memcpy(buf + 8, text, len);
	memset(buf + 8 + len, ' ', padded - len);
	free(text);
	*out = buf;
	*out_len = 8 + padded;
	return DT_OK;
}

/* ---- header checksum ------------------------------------------------------------ */

/* Why a search of the raw bytes finds the one entry: inside a JSON string a
 * '"' is always escaped, so the 17 bytes "header_crc32c":" with bare quotes
 * can only be a key followed by a string value. Only __metadata__ holds
 * string values under arbitrary keys (a tensor entry with such a field is
 * refused by the parser), and duplicate keys are refused too. A damaged
 * header that shows the text twice is reported as "not found", which a v2
 * file fails. */
void dt_st_header_crc(const void *head, size_t len, int *found, size_t *at, uint32_t *crc)
{
	static const char key[] = "\"header_crc32c\":\"";
	const size_t klen = sizeof(key) - 1, vlen = sizeof(DT_CKPT_HEADER_CRC_PLACEHOLDER) - 1;
	const char *p = head;
	*found = 0;
	*at = 0;
	*crc = 0;
	size_t hit = 0;
	int hits = 0;
	for (size_t i = 8; i + klen + vlen + 1 <= len; i++) {
		if (p[i] == '"' && memcmp(p + i, key, klen) == 0 && p[i + klen + vlen] == '"') {
			hit = i + klen;
			hits++;
		}
	}
	if (hits != 1)
		return;
	uint32_t c = dt_crc32c_extend(0, p, hit);
	c = dt_crc32c_extend(c, DT_CKPT_HEADER_CRC_PLACEHOLDER, vlen);
	c = dt_crc32c_extend(c, p + hit + vlen, len - hit - vlen);
	*found = 1;
	*at = hit;
	*crc = c;
}

/* Fills f's header_crc_* fields from the raw bytes [0, 8+N). */
static void note_header_crc(struct dt_st_file *f, const char *head, size_t len)
{
	size_t at;
	dt_st_header_crc(head, len, &f->header_crc_found, &at, &f->header_crc_computed);
	if (!f->header_crc_found)
		return;
	uint32_t v = 0;
	int ok = 1;
	for (size_t i = 0; i < 8; i++) {
		char ch = head[at + i];
		int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
		ok &= d >= 0;
		v = v << 4 | (uint32_t)(d >= 0 ? d : 0);
	}
	f->header_crc_stored_ok = ok;
	f->header_crc_stored = v;
}

/* ---- reader --------------------------------------------------------------------- */

void dt_st_free(struct dt_st_file *f)
{
	if (!f)
		return;
	for (int i = 0; i < f->num_tensors; i++)
		free(f->tensors[i].name);
	for (int i = 0; i < f->num_meta; i++) {
		free(f->meta_keys[i]);
		free(f->meta_values[i]);
	}
	free(f->tensors);
	free(f->meta_keys);
	free(f->meta_values);
	free(f->path);
	free(f);
}

const char *dt_st_meta(const struct dt_st_file *f, const char *key)
{
	for (int i = 0; i < f->num_meta; i++)
		if (strcmp(f->meta_keys[i], key) == 0)
			return f->meta_values[i];
	return NULL;
}

const struct dt_st_tensor_info *dt_st_find(const struct dt_st_file *f, const char *name)
{
	for (int i = 0; i < f->num_tensors; i++)
		if (strcmp(f->tensors[i].name, name) == 0)
			return &f->tensors[i];
	return NULL;
}

static int by_offsets(const void *a, const void *b)
{
	const struct dt_st_tensor_info *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* A non-negative JSON integer, or -1. */
static int64_t json_uint(const json_t *v)
{
	if (!json_is_integer(v))
		return -1;
	json_int_t x = json_integer_value(v);
	return x < 0 ? -1 : (int64_t)x;
}

/* One tensor entry: {"dtype": S, "shape": [...], "data_offsets": [B, E]}, no other keys. */
static enum dt_status parse_tensor(const char *what, const char *name, json_t *e, struct dt_st_tensor_info *t,
				   struct dt_err *err)
{
	if (!json_is_object(e))
		return dt_err_set(err, DT_CKPT, "%s: tensor '%s' is not a JSON object", what, name);
	const char *key;
	json_t *v;
	json_object_foreach(e, key, v) {
		if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 && strcmp(key, "data_offsets") != 0)
			return dt_err_set(err, DT_CKPT, "%s: tensor '%s' has an unknown field '%s'", what, name, key);
	}
	json_t *dt = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape"),
	       *offs = json_object_get(e, "data_offsets");
	if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
		return dt_err_set(err, DT_CKPT, "%s: tensor '%s' needs a string \"dtype\", an array \"shape\" and "
					       "an array \"data_offsets\"", what, name);
	if (!dtype_from_name(json_string_value(dt), &t->dtype))
		return dt_err_set(err, DT_CKPT, "%s: tensor '%s' has unknown dtype '%s'", what, name,
				  json_string_value(dt));
	size_t nd = json_array_size(shape);
	if (nd > DT_ST_MAX_DIMS)
		return dt_err_set(err, DT_CKPT, "%s: tensor '%s' has %zu dimensions, more than %d", what, name, nd,
				  DT_ST_MAX_DIMS);
	t->ndim = (int)nd;
	for (size_t d = 0; d < nd; d++) {
		int64_t x = json_uint(json_array_get(shape, d));
		if (x < 0)
			return dt_err_set(err, DT_CKPT, "%s: tensor '%s': shape[%zu] is not a non-negative integer", what,
					  name, d);
		t->shape[d] = x;
	}
	int64_t b = json_array_size(offs) == 2 ? json_uint(json_array_get(offs, 0)) : -1;
	int64_t en = json_array_size(offs) == 2 ? json_uint(json_array_get(offs, 1)) : -1;
	if (b < 0 || en < 0)
		return dt_err_set(err, DT_CKPT, "%s: tensor '%s': data_offsets must be two non-negative integers", what,
				  name);
	t->begin = (uint64_t)b;
	t->end = (uint64_t)en;
	return DT_OK;
}

/* The offset and size rules, on tensors sorted by offsets. */
static enum dt_status check_offsets(const char *what, struct dt_st_file *f, struct dt_err *err)
{
	uint64_t prev_end = 0;
	for (int i = 0; i < f->num_tensors; i++) {
		const struct dt_st_tensor_info *t = &f->tensors[i];
		if (t->begin != prev_end || t->end < t->begin)
			return dt_err_set(err, DT_CKPT, "%s: invalid offset for tensor '%s': [%llu, %llu) where %llu was "
						       "expected to begin (tensors must tile the buffer without holes)",
					  what, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
					  (unsigned long long)prev_end);
		uint64_t bits = (uint64_t)dt_st_dtype_bits(t->dtype), elems = 1;
		for (int d = 0; d < t->ndim; d++) {
			uint64_t x = (uint64_t)t->shape[d];
			if (x != 0 && elems > UINT64_MAX / x)
				return dt_err_set(err, DT_CKPT, "%s: tensor '%s': the shape's element count overflows",
						  what, t->name);
			elems *= x;
		}
		if (elems != 0 && bits > UINT64_MAX / elems)
			return dt_err_set(err, DT_CKPT, "%s: tensor '%s': the shape's bit size overflows", what, t->name);
		if (bits % 8 != 0)
			return dt_err_set(err, DT_CKPT, "%s: tensor '%s': dtype %s has %llu bits, not a whole number of "
						       "bytes (sub-byte dtypes are not supported)",
					  what, t->name, dt_st_dtype_name(t->dtype), (unsigned long long)bits);
		uint64_t bytes = elems * (bits / 8);
		if (t->end - t->begin != bytes)
			return dt_err_set(err, DT_CKPT, "%s: invalid shape, data type, or offset for tensor '%s': %llu "
						       "bytes at [%llu, %llu) but %s of %llu elements is %llu bytes",
					  what, t->name, (unsigned long long)(t->end - t->begin),
					  (unsigned long long)t->begin, (unsigned long long)t->end,
					  dt_st_dtype_name(t->dtype), (unsigned long long)elems, (unsigned long long)bytes);
		prev_end = t->end;
	}
	uint64_t buffer = f->file_size - f->data_start;
	if (prev_end != buffer)
		return dt_err_set(err, DT_CKPT, "%s: the tensors cover %llu bytes but the data buffer has %llu "
					       "(a truncated file, or bytes not indexed by any tensor)",
				  what, (unsigned long long)prev_end, (unsigned long long)buffer);
	return DT_OK;
}

/* Parses header text `h` (N bytes) of a file of `file_size` bytes into f. */
static enum dt_status parse_header(const char *what, const char *h, uint64_t n, struct dt_st_file *f,
				   struct dt_err *err)
{
	json_error_t je;
	json_t *root = json_loadb(h, (size_t)n, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return dt_err_set(err, DT_CKPT, "%s: header is not valid JSON: %s at byte %d", what, je.text,
				  je.position);
	enum dt_status st = DT_OK;
	if (!json_is_object(root)) {
		st = dt_err_set(err, DT_CKPT, "%s: header is not a JSON object", what);
		goto out;
	}
	size_t total = json_object_size(root);
	json_t *meta = json_object_get(root, "__metadata__");
	size_t nt = total - (meta ? 1 : 0);
	f->tensors = dt_xcalloc(nt ? nt : 1, sizeof(*f->tensors));
	if (meta) {
		if (!json_is_object(meta)) {
			st = dt_err_set(err, DT_CKPT, "%s: __metadata__ is not a JSON object", what);
			goto out;
		}
		size_t nm = json_object_size(meta);
		f->meta_keys = dt_xcalloc(nm ? nm : 1, sizeof(char *));
		f->meta_values = dt_xcalloc(nm ? nm : 1, sizeof(char *));
		const char *k;
		json_t *v;
		json_object_foreach(meta, k, v) {
			if (!json_is_string(v)) {
				st = dt_err_set(err, DT_CKPT, "%s: __metadata__ value of '%s' is not a string", what, k);
				goto out;
			}
			f->meta_keys[f->num_meta] = dt_xstrdup(k);
			f->meta_values[f->num_meta] = dt_xstrdup(json_string_value(v));
			f->num_meta++;
		}
	}
	const char *k;
	json_t *v;
	json_object_foreach(root, k, v) {
		if (v == meta)
			continue;
		struct dt_st_tensor_info *t = &f->tensors[f->num_tensors];
		if ((st = parse_tensor(what, k, v, t, err)))
			goto out;
		t->name = dt_xstrdup(k);
		f->num_tensors++;
	}
	qsort(f->tensors, (size_t)f->num_tensors, sizeof(*f->tensors), by_offsets);
	st = check_offsets(what, f, err);
out:
	json_decref(root);
	return st;
}

/* Checks N against the limits and the file size; the first three rules. */
static enum dt_status check_length(const char *what, uint64_t n, uint64_t file_size, struct dt_err *err)
{
	if (n > DT_SAFETENSORS_MAX_HEADER)
		return dt_err_set(err, DT_CKPT, "%s: header length %llu is larger than the %llu allowed", what,
				  (unsigned long long)n, (unsigned long long)DT_SAFETENSORS_MAX_HEADER);
	if (n > file_size - 8)
		return dt_err_set(err, DT_CKPT, "%s: header length %llu runs past the end of the %llu-byte file", what,
				  (unsigned long long)n, (unsigned long long)file_size);
	return DT_OK;
}

enum dt_status dt_st_parse(const void *bytes, size_t len, struct dt_st_file **out, struct dt_err *err)
{
	*out = NULL;
	const char *what = "<memory>";
	if (len < 8)
		return dt_err_set(err, DT_CKPT, "%s: %zu bytes is too small for a safetensors header", what, len);
	uint64_t n = get_le64(bytes);
	enum dt_status st = check_length(what, n, len, err);
	if (st)
		return st;
	struct dt_st_file *f = dt_xcalloc(1, sizeof(*f));
	f->path = dt_xstrdup(what);
	f->file_size = len;
	f->header_len = n;
	f->data_start = 8 + n;
	if ((st = parse_header(what, (const char *)bytes + 8, n, f, err))) {
		dt_st_free(f);
		return st;
	}
	note_header_crc(f, bytes, (size_t)(8 + n));
	*out = f;
	return DT_OK;
}

static enum dt_status read_exact(int fd, const char *path, void *buf, size_t len, uint64_t at, struct dt_err *err)
{
	char *p = buf;
	size_t got = 0;
	while (got < len) {
		ssize_t r = pread(fd, p + got, len - got, (off_t)(at + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return dt_err_set(err, DT_IO, "cannot read '%s' at byte %llu: %s", path,
					  (unsigned long long)(at + got), strerror(errno));
		if (r == 0)
			return dt_err_set(err, DT_CKPT, "'%s' ends at byte %llu, %zu bytes short (truncated while "
							"reading?)", path, (unsigned long long)(at + got), len - got);
		got += (size_t)r;
	}
	return DT_OK;
}

enum dt_status dt__st_read_at(int fd, const char *path, void *buf, size_t len, uint64_t at, struct dt_err *err)
{
	return read_exact(fd, path, buf, len, at, err);
}

enum dt_status dt__st_open_fd(const char *path, struct dt_st_file **out, int *fd_out, struct dt_err *err)
{
	*out = NULL;
	*fd_out = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dt_err_set(err, DT_IO, "cannot open '%s': %s", path, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) != 0) {
		enum dt_status st = dt_err_set(err, DT_IO, "cannot stat '%s': %s", path, strerror(errno));
		close(fd);
		return st;
	}
	uint64_t size = (uint64_t)sb.st_size;
	unsigned char len8[8];
	enum dt_status st;
	if (size < 8) {
		st = dt_err_set(err, DT_CKPT, "%s: %llu bytes is too small for a safetensors header", path,
				(unsigned long long)size);
		close(fd);
		return st;
	}
	if ((st = read_exact(fd, path, len8, 8, 0, err))) {
		close(fd);
		return st;
	}
	uint64_t n = get_le64(len8);
	if ((st = check_length(path, n, size, err))) {
		close(fd);
		return st;
	}
	/* The whole head, length included: the header checksum covers it all. */
	char *h = NULL;
	if ((st = dt_try_malloc((void **)&h, (size_t)n + 9, err)) ||
	    (st = read_exact(fd, path, h + 8, (size_t)n, 8, err))) {
		free(h);
		close(fd);
		return st;
	}
	memcpy(h, len8, 8);
	struct dt_st_file *f = dt_xcalloc(1, sizeof(*f));
	f->path = dt_xstrdup(path);
	f->file_size = size;
	f->header_len = n;
	f->data_start = 8 + n;
	st = parse_header(path, h + 8, n, f, err);
	if (!st)
		note_header_crc(f, h, (size_t)(8 + n));
	free(h);
	if (st) {
		dt_st_free(f);
		close(fd);
		return st;
	}
	*out = f;
	*fd_out = fd;
	return DT_OK;
}

enum dt_status dt_st_open(const char *path, struct dt_st_file **out, struct dt_err *err)
{
	int fd;
	enum dt_status st = dt__st_open_fd(path, out, &fd, err);
	if (!st)
		close(fd);
	return st;
}
