#include "train/events_read.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/crc32c.h"
#include "net/bytes.h"

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };
enum { DTYPE_FLOAT = 1, DTYPE_DOUBLE = 2 };

void dt_ev_run_init(struct dt_ev_run *run)
{
	*run = (struct dt_ev_run){ 0 };
}

void dt_ev_run_release(struct dt_ev_run *run)
{
	if (!run)
		return;
	for (size_t i = 0; i < run->n_series; i++) {
		struct dt_ev_series *s = &run->series[i];
		free(s->tag);
		free(s->step);
		free(s->wall_time);
		free(s->value);
	}
	for (size_t i = 0; i < run->n_notes; i++)
		free(run->notes[i]);
	free(run->notes);
	free(run->series);
	free(run->dir);
	*run = (struct dt_ev_run){ 0 };
}

const struct dt_ev_series *dt_ev_find(const struct dt_ev_run *run, const char *tag)
{
	for (size_t i = 0; i < run->n_series; i++)
		if (strcmp(run->series[i].tag, tag) == 0)
			return &run->series[i];
	return NULL;
}

__attribute__((format(printf, 2, 3))) static void add_note(struct dt_ev_run *run, const char *fmt, ...)
{
	char buf[DT_ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	run->notes = dt_xrealloc(run->notes, (run->n_notes + 1) * sizeof(*run->notes));
	run->notes[run->n_notes++] = dt_xstrdup(buf);
}

/* The series of `prefix``tag` (tag: n bytes, not NUL-terminated), created when new. */
static struct dt_ev_series *series_of(struct dt_ev_run *run, const char *prefix, const uint8_t *tag, size_t n)
{
	size_t plen = strlen(prefix);
	for (size_t i = 0; i < run->n_series; i++) {
		const char *t = run->series[i].tag;
		if (strncmp(t, prefix, plen) == 0 && strlen(t + plen) == n && memcmp(t + plen, tag, n) == 0)
			return &run->series[i];
	}
	if (run->n_series == run->cap_series) {
		run->cap_series = run->cap_series ? 2 * run->cap_series : 8;
		run->series = dt_xrealloc(run->series, run->cap_series * sizeof(*run->series));
	}
	struct dt_ev_series *s = &run->series[run->n_series++];
	*s = (struct dt_ev_series){ 0 };
	s->tag = dt_xmalloc(plen + n + 1);
	memcpy(s->tag, prefix, plen);
	memcpy(s->tag + plen, tag, n);
	s->tag[plen + n] = '\0';
	s->prefix_len = plen;
	return s;
}

/* Appends a point, first dropping those at or after its step (the rewind rule). */
static void series_add(struct dt_ev_series *s, int64_t step, double wall, double value)
{
	while (s->n > 0 && s->step[s->n - 1] >= step)
		s->n--;
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 16;
		s->step = dt_xrealloc(s->step, s->cap * sizeof(*s->step));
		s->wall_time = dt_xrealloc(s->wall_time, s->cap * sizeof(*s->wall_time));
		s->value = dt_xrealloc(s->value, s->cap * sizeof(*s->value));
	}
	s->step[s->n] = step;
	s->wall_time[s->n] = wall;
	s->value[s->n] = value;
	s->n++;
}

/* ---- protobuf decoding over a bounded cursor ---- */

struct cur {
	const uint8_t *p, *end;
};

static int get_varint(struct cur *c, uint64_t *v)
{
	uint64_t r = 0;
	for (unsigned shift = 0; shift < 64; shift += 7) {
		if (c->p >= c->end)
			return 0;
		uint8_t b = *c->p++;
		r |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = r;
			return 1;
		}
	}
	return 0;
}

/* The next field's key; 0 at the end of the message or when malformed (*bad set). */
static int next_field(struct cur *c, unsigned *field, unsigned *wire, int *bad)
{
	if (c->p >= c->end)
		return 0;
	uint64_t key;
	if (!get_varint(c, &key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
		*bad = 1;
		return 0;
	}
	*field = (unsigned)(key >> 3);
	*wire = (unsigned)(key & 7);
	return 1;
}

/* Reads a length-delimited field's bytes into *sub. */
static int get_bytes(struct cur *c, struct cur *sub)
{
	uint64_t n;
	if (!get_varint(c, &n) || n > (uint64_t)(c->end - c->p))
		return 0;
	sub->p = c->p;
	sub->end = c->p + n;
	c->p += n;
	return 1;
}

static int get_fixed(struct cur *c, size_t n, uint64_t *v)
{
	if ((size_t)(c->end - c->p) < n)
		return 0;
	*v = n == 8 ? dt_get_u64le(c->p) : dt_get_u32le(c->p);
	c->p += n;
	return 1;
}

/* Skips a field's value of wire type `wire`; 0 when malformed (groups included). */
static int skip_value(struct cur *c, unsigned wire)
{
	uint64_t v;
	struct cur sub;
	switch (wire) {
	case WIRE_VARINT: return get_varint(c, &v);
	case WIRE_FIXED64: return get_fixed(c, 8, &v);
	case WIRE_FIXED32: return get_fixed(c, 4, &v);
	case WIRE_LEN: return get_bytes(c, &sub);
	default: return 0;
	}
}

static double f32_of(uint32_t bits)
{
	float f;
	memcpy(&f, &bits, sizeof(f));
	return (double)f;
}

static double f64_of(uint64_t bits)
{
	double d;
	memcpy(&d, &bits, sizeof(d));
	return d;
}

/* A rank-0 DT_FLOAT or DT_DOUBLE TensorProto's value (rule 2). Returns 1 with
 * *out set, 0 when it is some other tensor, -1 when malformed. */
static int tensor_scalar(struct cur t, double *out)
{
	uint64_t dtype = 0, v;
	int dims = 0, bad = 0, nvals = 0;
	struct cur content = { NULL, NULL }, sub;
	double val = 0;
	unsigned f, w;
	while (next_field(&t, &f, &w, &bad)) {
		if (f == 1 && w == WIRE_VARINT) {
			if (!get_varint(&t, &dtype))
				return -1;
		} else if (f == 2 && w == WIRE_LEN) { /* TensorShapeProto: any dim (field 2) means rank > 0 */
			if (!get_bytes(&t, &sub))
				return -1;
			unsigned sf, sw;
			while (next_field(&sub, &sf, &sw, &bad)) {
				dims += sf == 2;
				if (!skip_value(&sub, sw))
					return -1;
			}
		} else if (f == 4 && w == WIRE_LEN) {
			if (!get_bytes(&t, &content))
				return -1;
		} else if ((f == 5 || f == 6) && w == WIRE_LEN) { /* packed float_val / double_val */
			if (!get_bytes(&t, &sub))
				return -1;
			size_t width = f == 5 ? 4 : 8;
			size_t n = (size_t)(sub.end - sub.p);
			if (n % width)
				return -1;
			nvals += (int)(n / width);
			if (n == width)
				val = f == 5 ? f32_of(dt_get_u32le(sub.p)) : f64_of(dt_get_u64le(sub.p));
		} else if ((f == 5 && w == WIRE_FIXED32) || (f == 6 && w == WIRE_FIXED64)) { /* unpacked */
			if (!get_fixed(&t, f == 5 ? 4 : 8, &v))
				return -1;
			nvals++;
			val = f == 5 ? f32_of((uint32_t)v) : f64_of(v);
		} else if (!skip_value(&t, w)) {
			return -1;
		}
	}
	if (bad)
		return -1;
	if (dims != 0 || (dtype != DTYPE_FLOAT && dtype != DTYPE_DOUBLE))
		return 0;
	size_t width = dtype == DTYPE_FLOAT ? 4 : 8;
	size_t clen = content.p ? (size_t)(content.end - content.p) : 0;
	if (clen == width && nvals == 0) {
		*out = width == 4 ? f32_of(dt_get_u32le(content.p)) : f64_of(dt_get_u64le(content.p));
		return 1;
	}
	if (clen == 0 && nvals == 1) {
		*out = val;
		return 1;
	}
	return 0;
}

/* The plugin name of a SummaryMetadata (empty when none); 0 when malformed. */
static int plugin_name(struct cur m, struct cur *name)
{
	unsigned f, w;
	int bad = 0;
	*name = (struct cur){ NULL, NULL };
	while (next_field(&m, &f, &w, &bad)) {
		struct cur pd;
		if (f == 1 && w == WIRE_LEN) {
			if (!get_bytes(&m, &pd))
				return 0;
			unsigned pf, pw;
			while (next_field(&pd, &pf, &pw, &bad)) {
				if (pf == 1 && pw == WIRE_LEN) {
					if (!get_bytes(&pd, name))
						return 0;
				} else if (!skip_value(&pd, pw)) {
					return 0;
				}
			}
		} else if (!skip_value(&m, w)) {
			return 0;
		}
	}
	return !bad;
}

/* One Summary.Value: adds its point when it is a scalar (rules 1-3); 0 when malformed. */
static int read_value(struct dt_ev_run *run, const char *prefix, struct cur v, int64_t step, double wall)
{
	struct cur tag = { NULL, NULL }, tensor = { NULL, NULL }, meta = { NULL, NULL };
	int have_simple = 0, bad = 0;
	double simple = 0;
	unsigned f, w;
	uint64_t bits;
	while (next_field(&v, &f, &w, &bad)) {
		if (f == 1 && w == WIRE_LEN) {
			if (!get_bytes(&v, &tag))
				return 0;
		} else if (f == 2 && w == WIRE_FIXED32) {
			if (!get_fixed(&v, 4, &bits))
				return 0;
			simple = f32_of((uint32_t)bits);
			have_simple = 1;
		} else if (f == 8 && w == WIRE_LEN) {
			if (!get_bytes(&v, &tensor))
				return 0;
		} else if (f == 9 && w == WIRE_LEN) {
			if (!get_bytes(&v, &meta))
				return 0;
		} else if (!skip_value(&v, w)) {
			return 0;
		}
	}
	if (bad)
		return 0;
	if (!tag.p || tag.end == tag.p)
		return 1; /* TensorBoard ignores a value without a tag */
	if (meta.p) {
		struct cur name;
		if (!plugin_name(meta, &name))
			return 0;
		size_t n = name.p ? (size_t)(name.end - name.p) : 0;
		if (n != 0 && !(n == 7 && memcmp(name.p, "scalars", 7) == 0))
			return 1; /* another plugin's value (hparams, text, ...) */
	}
	double value;
	if (tensor.p) {
		int r = tensor_scalar(tensor, &value);
		if (r < 0)
			return 0;
		if (r == 0)
			return 1;
	} else if (have_simple) {
		value = simple;
	} else {
		return 1;
	}
	series_add(series_of(run, prefix, tag.p, (size_t)(tag.end - tag.p)), step, wall, value);
	return 1;
}

/* One Event; 0 when malformed. */
static int read_event(struct dt_ev_run *run, const char *prefix, struct cur e)
{
	double wall = 0;
	int64_t step = 0;
	struct cur summary = { NULL, NULL };
	unsigned f, w;
	int bad = 0;
	uint64_t v;
	while (next_field(&e, &f, &w, &bad)) {
		if (f == 1 && w == WIRE_FIXED64) {
			if (!get_fixed(&e, 8, &v))
				return 0;
			wall = f64_of(v);
		} else if (f == 2 && w == WIRE_VARINT) {
			if (!get_varint(&e, &v))
				return 0;
			step = (int64_t)v;
		} else if (f == 5 && w == WIRE_LEN) {
			if (!get_bytes(&e, &summary))
				return 0;
		} else if (!skip_value(&e, w)) {
			return 0;
		}
	}
	if (bad)
		return 0;
	if (!summary.p)
		return 1;
	while (next_field(&summary, &f, &w, &bad)) {
		struct cur value;
		if (f == 1 && w == WIRE_LEN) {
			if (!get_bytes(&summary, &value) || !read_value(run, prefix, value, step, wall))
				return 0;
		} else if (!skip_value(&summary, w)) {
			return 0;
		}
	}
	return !bad;
}

enum dt_status dt_ev_parse(struct dt_ev_run *run, const char *name, const uint8_t *buf, size_t len,
			   const char *prefix, struct dt_err *err)
{
	size_t off = 0;
	for (int64_t index = 0; off < len; index++) {
		size_t left = len - off;
		if (left < 12) {
			add_note(run, "'%s' ends inside record %lld (%zu of its 12 header bytes at offset %zu): read up to it "
				      "(is its writer still running?)", name, (long long)index, left, off);
			return DT_OK;
		}
		const uint8_t *p = buf + off;
		if (dt_crc32c_mask(dt_crc32c(p, 8)) != dt_get_u32le(p + 8))
			return dt_err_set(err, DT_DATA, "corrupt event file '%s': record %lld at offset %zu: length crc "
							"mismatch", name, (long long)index, off);
		uint64_t n = dt_get_u64le(p);
		if (n > left - 12 || left - 12 - n < 4) {
			add_note(run, "'%s' ends inside record %lld (offset %zu: %zu of its %llu bytes): read up to it "
				      "(is its writer still running?)", name, (long long)index, off, left,
				 (unsigned long long)n + 16);
			return DT_OK;
		}
		if (dt_crc32c_mask(dt_crc32c(p + 12, (size_t)n)) != dt_get_u32le(p + 12 + n))
			return dt_err_set(err, DT_DATA, "corrupt event file '%s': record %lld at offset %zu: data crc "
							"mismatch", name, (long long)index, off);
		struct cur e = { p + 12, p + 12 + n };
		if (!read_event(run, prefix, e))
			return dt_err_set(err, DT_DATA, "corrupt event file '%s': record %lld at offset %zu: its %llu bytes "
							"are not a valid Event protobuf", name, (long long)index, off,
					  (unsigned long long)n);
		run->records++;
		off += 16 + (size_t)n;
	}
	return DT_OK;
}

enum dt_status dt_ev_read_file(struct dt_ev_run *run, const char *path, const char *prefix, struct dt_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dt_err_set(err, DT_IO, "cannot open event file '%s': %s", path, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) != 0) {
		int e = errno;
		close(fd);
		return dt_err_set(err, DT_IO, "cannot stat event file '%s': %s", path, strerror(e));
	}
	if ((uint64_t)sb.st_size > DT_EV_FILE_MAX) {
		close(fd);
		return dt_err_set(err, DT_DATA, "event file '%s' is %lld bytes, above the %zu-byte limit of this reader",
				  path, (long long)sb.st_size, DT_EV_FILE_MAX);
	}
	/* The file may grow while we read (a writer still running): read what stat saw. */
	size_t want = (size_t)sb.st_size, got = 0;
	uint8_t *buf = dt_xmalloc(want ? want : 1);
	while (got < want) {
		ssize_t n = read(fd, buf + got, want - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			free(buf);
			close(fd);
			return dt_err_set(err, DT_IO, "cannot read event file '%s': %s", path, strerror(e));
		}
		if (n == 0)
			break; /* truncated under us: parse what is there */
		got += (size_t)n;
	}
	close(fd);
	enum dt_status st = dt_ev_parse(run, path, buf, got, prefix, err);
	free(buf);
	if (!st)
		run->files++;
	return st;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in `dir` that match `want` (event files, or subdirectories), sorted. */
static enum dt_status list_dir(const char *dir, int want_dirs, char ***out, size_t *count, struct dt_err *err)
{
	*out = NULL;
	*count = 0;
	DIR *d = opendir(dir);
	if (!d)
		return dt_err_set(err, DT_IO, "cannot read directory '%s': %s", dir, strerror(errno));
	size_t cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (!want_dirs && !strstr(e->d_name, "tfevents"))
			continue;
		char path[4096];
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path))
			continue;
		struct stat sb;
		if (stat(path, &sb) != 0 || (want_dirs ? !S_ISDIR(sb.st_mode) : !S_ISREG(sb.st_mode)))
			continue;
		if (*count == cap) {
			cap = cap ? 2 * cap : 8;
			*out = dt_xrealloc(*out, cap * sizeof(**out));
		}
		(*out)[(*count)++] = dt_xstrdup(e->d_name);
	}
	closedir(d);
	if (*count)
		qsort(*out, *count, sizeof(**out), cmp_str);
	return DT_OK;
}

static void free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* Reads the event files directly in `dir` with `prefix`; *found += how many. */
static enum dt_status read_files_of(struct dt_ev_run *run, const char *dir, const char *prefix, int *found,
				    struct dt_err *err)
{
	char **names;
	size_t n;
	enum dt_status st = list_dir(dir, 0, &names, &n, err);
	for (size_t i = 0; i < n && !st; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		st = dt_ev_read_file(run, path, prefix, err);
	}
	*found += (int)n;
	free_names(names, n);
	return st;
}

enum dt_status dt_ev_read_run(struct dt_ev_run *run, const char *dir, struct dt_err *err)
{
	struct stat sb;
	if (stat(dir, &sb) != 0)
		return dt_err_set(err, DT_IO, "cannot read run directory '%s': %s", dir, strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return dt_err_set(err, DT_IO, "'%s' is not a directory (give a training run's --output_dir)", dir);
	free(run->dir);
	run->dir = dt_xstrdup(dir);
	int found = 0;
	enum dt_status st = read_files_of(run, dir, "", &found, err);
	char **subs = NULL;
	size_t n = 0;
	if (!st)
		st = list_dir(dir, 1, &subs, &n, err);
	for (size_t i = 0; i < n && !st; i++) {
		char sub[4096], prefix[512];
		snprintf(sub, sizeof(sub), "%s/%s", dir, subs[i]);
		snprintf(prefix, sizeof(prefix), "%s/", subs[i]);
		st = read_files_of(run, sub, prefix, &found, err);
	}
	free_names(subs, n);
	if (!st && found == 0) {
		st = dt_err_set(err, DT_DATA, "no event file in '%s' nor in its subdirectories (no name containing "
					      "'tfevents')", dir);
		dt_err_hint(err, "give the --output_dir of a training run; the chief writes summaries every "
				 "--save_summary_steps steps (0 turns them off)");
	}
	return st;
}
