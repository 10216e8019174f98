/*
 * checkpoint_state.c — the `checkpoint` state file, finding checkpoints in
 * a directory (for restore and for pollers), stale temporary files, and
 * the saver's cadence (checkpoint.h).
 */
#include "train/checkpoint.h"
#include "train/checkpoint_internal.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/trace.h"

/* A state file is a few lines per checkpoint; anything this big is not one. */
#define STATE_MAX_BYTES (16u << 20)

void dt_ckpt_state_init(struct dt_ckpt_state *s)
{
	memset(s, 0, sizeof(*s));
}

void dt_ckpt_state_release(struct dt_ckpt_state *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->count; i++)
		free(s->paths[i]);
	free(s->paths);
	free(s->timestamps);
	dt_ckpt_state_init(s);
}

static void state_append(struct dt_ckpt_state *s, char *path, double ts)
{
	s->paths = dt_xrealloc(s->paths, (size_t)(s->count + 1) * sizeof(char *));
	s->timestamps = dt_xrealloc(s->timestamps, (size_t)(s->count + 1) * sizeof(double));
	s->paths[s->count] = path;
	s->timestamps[s->count] = ts;
	s->count++;
}

/* ---- text format ---------------------------------------------------------------- */

/* Parses a quoted protobuf text string at *p (either quote); heap result. */
static char *parse_quoted(const char **p)
{
	char q = **p;
	if (q != '"' && q != '\'')
		return NULL;
	const char *s = *p + 1;
	size_t cap = strlen(s) + 1, n = 0;
	char *out = dt_xmalloc(cap);
	while (*s && *s != q && *s != '\n') {
		char c = *s++;
		if (c == '\\') {
			c = *s++;
			switch (c) {
			case 'n': c = '\n'; break;
			case 't': c = '\t'; break;
			case 'r': c = '\r'; break;
			case '\\': case '"': case '\'': break;
			default:
				if (c >= '0' && c <= '7') {
					int v = c - '0';
					for (int k = 0; k < 2 && *s >= '0' && *s <= '7'; k++)
						v = v * 8 + (*s++ - '0');
					c = (char)v;
				} else {
					free(out);
					return NULL;
				}
			}
		}
		out[n++] = c;
	}
	if (*s != q) {
		free(out);
		return NULL;
	}
	out[n] = '\0';
	*p = s + 1;
	return out;
}

enum dt_status dt_ckpt_state_parse(const char *text, size_t len, const char *what, struct dt_ckpt_state *s,
				   struct dt_err *err)
{
	dt_ckpt_state_init(s);
	if (memchr(text, '\0', len))
		return dt_err_set(err, DT_CKPT, "%s: not a text file (it holds NUL bytes)", what);
	char *model_path = NULL;
	double *ts = NULL;
	int nts = 0, line_no = 0;
	enum dt_status st = DT_OK;
	for (const char *line = text; line < text + len && !st;) {
		const char *nl = memchr(line, '\n', (size_t)(text + len - line));
		const char *end = nl ? nl : text + len;
		line_no++;
		const char *p = line;
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
			p++;
		if (p == end || *p == '#') {
			line = end + 1;
			continue;
		}
		const char *colon = memchr(p, ':', (size_t)(end - p));
		if (!colon) {
			st = dt_err_set(err, DT_CKPT, "%s:%d: expected 'field: value'", what, line_no);
			break;
		}
		size_t klen = (size_t)(colon - p);
		while (klen > 0 && (p[klen - 1] == ' ' || p[klen - 1] == '\t'))
			klen--;
		const char *v = colon + 1;
		while (v < end && (*v == ' ' || *v == '\t'))
			v++;
		char key[48];
		snprintf(key, sizeof(key), "%.*s", (int)(klen < sizeof(key) - 1 ? klen : sizeof(key) - 1), p);
		int is_path = strcmp(key, "model_checkpoint_path") == 0 || strcmp(key, "all_model_checkpoint_paths") == 0;
		int is_ts = strcmp(key, "all_model_checkpoint_timestamps") == 0 ||
			    strcmp(key, "last_preserved_timestamp") == 0;
		const char *after = v;
		if (is_path) {
			char *val = parse_quoted(&after);
			if (!val) {
				st = dt_err_set(err, DT_CKPT, "%s:%d: %s needs a quoted string", what, line_no, key);
				break;
			}
			if (key[0] == 'm') {
				free(model_path);
				model_path = val;
			} else {
				state_append(s, val, 0);
			}
		} else if (is_ts) {
			char *e;
			errno = 0;
			double x = strtod(v, &e);
			if (e == v || errno) {
				st = dt_err_set(err, DT_CKPT, "%s:%d: %s needs a number", what, line_no, key);
				break;
			}
			after = e;
			if (key[0] == 'l') {
				s->last_preserved_timestamp = x;
			} else {
				ts = dt_xrealloc(ts, (size_t)(nts + 1) * sizeof(double));
				ts[nts++] = x;
			}
		} else {
			st = dt_err_set(err, DT_CKPT, "%s:%d: unknown field '%s'", what, line_no, key);
			break;
		}
		while (after < end && (*after == ' ' || *after == '\t' || *after == '\r'))
			after++;
		if (after != end && *after != '#')
			st = dt_err_set(err, DT_CKPT, "%s:%d: unexpected text after the value of %s", what, line_no, key);
		line = end + 1;
	}
	if (!st && (!model_path || !*model_path))
		st = dt_err_set(err, DT_CKPT, "%s: no model_checkpoint_path (or an empty one)", what);
	if (!st) {
		for (int i = 0; i < s->count && i < nts; i++)
			s->timestamps[i] = ts[i];
		/* TensorFlow's rule: the newest path is the last of the list. */
		if (s->count == 0 || strcmp(s->paths[s->count - 1], model_path) != 0) {
			state_append(s, model_path, 0);
			model_path = NULL;
		}
	}
	free(model_path);
	free(ts);
	if (st)
		dt_ckpt_state_release(s);
	return st;
}

static void write_quoted(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\%03o", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

enum dt_status dt_ckpt_state_write(const char *dir, const struct dt_ckpt_state *s, struct dt_err *err)
{
	DT_ASSERT(s->count > 0);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	DT_ASSERT(f);
	fputs("model_checkpoint_path: ", f);
	write_quoted(f, s->paths[s->count - 1]);
	fputc('\n', f);
	for (int i = 0; i < s->count; i++) {
		fputs("all_model_checkpoint_paths: ", f);
		write_quoted(f, s->paths[i]);
		fputc('\n', f);
	}
	for (int i = 0; i < s->count; i++)
		fprintf(f, "all_model_checkpoint_timestamps: %.6f\n", s->timestamps[i]);
	fprintf(f, "last_preserved_timestamp: %.6f\n", s->last_preserved_timestamp);
	fclose(f);
	char path[DT_CKPT_PATH_MAX];
	snprintf(path, sizeof(path), "%s/" DT_CKPT_STATE_FILE, dir);
	enum dt_status st = dt_write_file_atomic(path, text, len, err);
	free(text);
	return st ? dt_err_prefix(err, "cannot write the checkpoint state file") : DT_OK;
}

enum dt_status dt_ckpt_state_read(const char *dir, struct dt_ckpt_state *s, int *exists, struct dt_err *err)
{
	dt_ckpt_state_init(s);
	*exists = 0;
	char path[DT_CKPT_PATH_MAX];
	snprintf(path, sizeof(path), "%s/" DT_CKPT_STATE_FILE, dir);
	struct stat sb;
	if (stat(path, &sb) != 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return DT_OK;
		return dt_err_set(err, DT_CKPT, "cannot read the checkpoint state file '%s': %s", path, strerror(errno));
	}
	*exists = 1;
	char *text;
	size_t len;
	struct dt_err e2 = DT_ERR_INIT;
	if (dt_read_file(path, STATE_MAX_BYTES, &text, &len, &e2)) {
		dt_err_set(err, DT_CKPT, "cannot read the checkpoint state file: %s", e2.msg);
		dt_err_hint(err, "fix or remove '%s' (removing it makes restore scan the directory)", path);
		return DT_CKPT;
	}
	enum dt_status st = dt_ckpt_state_parse(text, len, path, s, err);
	free(text);
	if (st) {
		dt_err_prefix(err, "cannot parse the checkpoint state file");
		dt_err_hint(err, "fix or remove '%s' (removing it makes restore scan the directory)", path);
	}
	return st;
}

void dt_ckpt_state_resolve(const char *dir, const char *path, char *buf, size_t cap)
{
	if (path[0] == '/')
		snprintf(buf, cap, "%s", path);
	else
		snprintf(buf, cap, "%s/%s", dir, path);
}

/* ---- directory scans -------------------------------------------------------------- */

static int cmp_step_paths(const void *a, const void *b)
{
	int64_t x = dt_ckpt_step_of(*(char *const *)a), y = dt_ckpt_step_of(*(char *const *)b);
	return x < y ? -1 : x > y;
}

/* model.ckpt-<step>.safetensors files of dir, oldest step first, as file names. */
static void scan_dir(const char *dir, struct dt_ckpt_state *s)
{
	dt_ckpt_state_init(s);
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (dt_ckpt_step_of(e->d_name) >= 0)
			state_append(s, dt_xstrdup(e->d_name), 0);
	closedir(d);
	if (s->count > 1) {
		qsort(s->paths, (size_t)s->count, sizeof(char *), cmp_step_paths);
	}
}

int dt_ckpt_remove_stale_temps(const char *dir, double older_than)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int removed = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		const char *n = e->d_name;
		int ours = (strncmp(n, "model.ckpt-", 11) == 0 && strstr(n, ".safetensors.tmp")) ||
			   strncmp(n, DT_CKPT_STATE_FILE ".tmp", sizeof(DT_CKPT_STATE_FILE ".tmp") - 1) == 0;
		if (!ours)
			continue;
		char path[DT_CKPT_PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", dir, n);
		struct stat sb;
		if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
			continue;
		double mtime = (double)sb.st_mtim.tv_sec + (double)sb.st_mtim.tv_nsec / 1e9;
		if (mtime < older_than && unlink(path) == 0) {
			dt_info("removed '%s', left behind by a save that did not finish", path);
			removed++;
		}
	}
	closedir(d);
	return removed;
}

enum dt_status dt_ckpt_list(const char *dir, struct dt_ckpt_state *out, struct dt_err *err)
{
	int exists;
	enum dt_status st = dt_ckpt_state_read(dir, out, &exists, err);
	if (st)
		return st;
	if (!exists)
		scan_dir(dir, out);
	for (int i = 0; i < out->count; i++) {
		char full[DT_CKPT_PATH_MAX];
		dt_ckpt_state_resolve(dir, out->paths[i], full, sizeof(full));
		free(out->paths[i]);
		out->paths[i] = dt_xstrdup(full);
	}
	return DT_OK;
}

enum dt_status dt_ckpt_latest_path(const char *dir, char *path, size_t cap, int64_t *step,
				   enum dt_ckpt_poll *result, struct dt_err *err)
{
	*result = DT_CKPT_POLL_NONE;
	struct dt_ckpt_state s;
	enum dt_status st = dt_ckpt_list(dir, &s, err);
	if (st)
		return st;
	if (s.count > 0) {
		snprintf(path, cap, "%s", s.paths[s.count - 1]);
		*step = dt_ckpt_step_of(path);
		struct stat sb;
		*result = stat(path, &sb) == 0 ? DT_CKPT_POLL_FOUND : DT_CKPT_POLL_RETRY;
	}
	dt_ckpt_state_release(&s);
	return DT_OK;
}

/* ---- restore ----------------------------------------------------------------------- */

enum dt_status dt_ckpt_restore_latest(const char *dir, struct dt_ckpt_contents *into, int *found,
				      char *path_out, size_t path_cap, struct dt_err *err)
{
	*found = 0;
	double age = dt_process_age_seconds();
	double start = dt_wall_seconds() - (age > 0 ? age : 0);
	dt_ckpt_remove_stale_temps(dir, start);

	int exists;
	struct dt_ckpt_state s;
	enum dt_status st = dt_ckpt_state_read(dir, &s, &exists, err);
	if (st)
		return st;
	if (!exists)
		scan_dir(dir, &s);
	if (s.count == 0) {
		dt_ckpt_state_release(&s);
		return DT_OK;
	}
	struct dt_err first = DT_ERR_INIT;
	for (int i = s.count - 1; i >= 0; i--) {
		char full[DT_CKPT_PATH_MAX];
		dt_ckpt_state_resolve(dir, s.paths[i], full, sizeof(full));
		struct dt_err e = DT_ERR_INIT;
		int mismatch;
		st = dt__ckpt_load(full, into, &mismatch, &e);
		if (!st) {
			*found = 1;
			if (path_out)
				snprintf(path_out, path_cap, "%s", full);
			dt_ckpt_state_release(&s);
			return DT_OK;
		}
		if (mismatch) {
			/* An older checkpoint of the same run is of the same model: stop here. */
			if (err)
				*err = e; /* the message names the file already */
			dt_ckpt_state_release(&s);
			return DT_CKPT;
		}
		if (first.status == DT_OK)
			first = e;
		dt_warn("cannot restore checkpoint '%s': %s%s", full, e.msg,
			i > 0 ? "; falling back to the previous one" : "");
	}
	dt_err_set(err, DT_CKPT, "none of the %d checkpoint(s) %s '%s' can be restored; the newest: %s", s.count,
		   exists ? "listed in the state file of" : "in", dir, first.msg);
	dt_err_hint(err, "move the bad files away to start afresh, or restore them from a backup");
	dt_ckpt_state_release(&s);
	return DT_CKPT;
}

/* ---- saver --------------------------------------------------------------------------- */

enum dt_status dt_saver_init(struct dt_saver *s, const char *dir, int64_t every_steps, double every_secs,
			     int keep_max, struct dt_err *err)
{
	memset(s, 0, sizeof(*s));
	if (!dir || !*dir)
		return dt_err_set(err, DT_USAGE, "the saver needs an output directory");
	if (every_steps < 0 || !(every_secs >= 0))
		return dt_err_set(err, DT_USAGE, "--save_checkpoints_%s must not be negative",
				  every_steps < 0 ? "steps" : "secs");
	if (every_steps > 0 && every_secs > 0) {
		dt_err_set(err, DT_USAGE, "--save_checkpoints_steps and --save_checkpoints_secs are mutually exclusive");
		dt_err_hint(err, "set only one of them (neither: every 600 seconds)");
		return DT_USAGE;
	}
	if (keep_max < 0)
		return dt_err_set(err, DT_USAGE, "--keep_checkpoint_max must not be negative (0 keeps all), got %d",
				  keep_max);
	/* Fail now rather than after the first cadence's worth of training. */
	enum dt_status st = dt__ckpt_make_dirs(dir, err);
	if (st)
		return dt_err_prefix(err, "cannot use output dir '%s'", dir);
	if (access(dir, W_OK) != 0)
		return dt_err_set(err, DT_IO, "cannot write checkpoints into '%s': %s", dir, strerror(errno));
	s->dir = dt_xstrdup(dir);
	s->every_steps = every_steps;
	s->every_secs = every_steps == 0 && every_secs == 0 ? 600 : every_secs;
	s->keep_max = keep_max;
	s->last_step = 0;
	s->last_ns = dt_now_ns();
	return DT_OK;
}

void dt_saver_release(struct dt_saver *s)
{
	if (!s)
		return;
	free(s->dir);
	s->dir = NULL;
}

void dt_saver_mark(struct dt_saver *s, int64_t step)
{
	s->last_step = step;
	s->last_ns = dt_now_ns();
}

int dt_saver_due(const struct dt_saver *s, int64_t step)
{
	if (step <= s->last_step)
		return 0;
	if (s->every_steps > 0)
		return step % s->every_steps == 0;
	return (double)(dt_now_ns() - s->last_ns) >= s->every_secs * 1e9;
}

enum dt_status dt_saver_save(struct dt_saver *s, const struct dt_ckpt_contents *c, struct dt_err *err)
{
	struct dt_ckpt_saved out;
	const int64_t t0 = dt_trace_begin();
	enum dt_status st = dt_ckpt_save(s->dir, c, s->keep_max, &out, err);
	if (st)
		return st;
	dt_trace_end(t0, "checkpoint", "save", c->global_step, (int64_t)out.bytes);
	dt_info("saved checkpoint for step %" PRId64 " to %s (%.1f MiB, %.0f ms)", c->global_step, out.path,
		(double)out.bytes / (1024.0 * 1024.0), out.seconds * 1e3);
	dt_saver_mark(s, c->global_step);
	return DT_OK;
}
