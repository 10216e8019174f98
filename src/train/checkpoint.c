/*
 * checkpoint.c — saving and loading one checkpoint (checkpoint.h).
 *
 * The save writes tensors straight from the caller's flat buffers (no copy):
 * the header goes first (with a placeholder CRC of the same length), then
 * each tensor's bytes in file order, the CRC-32C computed chunk by chunk just
 * before each chunk is written; then the real header over the placeholder,
 * before the fsync and rename.
 * The load reads each tensor straight into its place in the caller's
 * buffers, extending the CRC as it goes, and checks it at the end.
 */
#include "train/checkpoint.h"
#include "train/checkpoint_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/crc32c.h"
#include "base/log.h"

/* Tensors are written as the host holds them; safetensors is little-endian. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoint tensors need byte swapping on this host");

static const char *const reserved_keys[] = {
	"format", "global_step", "crc32c", "header_crc32c", "model_signature", "optimizer", "num_slots",
	"dropout_rng", "pipeline_epoch", "pipeline_offset", "pipeline_position", "hparams", "non_trainable",
};

/* ---- names ------------------------------------------------------------------------ */

static const char *optimizer_name(enum dt_optimizer_kind k)
{
	switch (k) {
	case DT_OPTIM_SGD: return "sgd";
	case DT_OPTIM_MOMENTUM: return "momentum";
	case DT_OPTIM_ADAM: return "adam";
	case DT_OPTIM_ADAGRAD: return "adagrad";
	}
	return "?";
}

/* Slots of an optimizer kind and their TensorFlow suffixes. */
static int slot_count(enum dt_optimizer_kind k)
{
	return k == DT_OPTIM_ADAM ? 2 : k == DT_OPTIM_SGD ? 0 : 1;
}

static const char *slot_suffix(enum dt_optimizer_kind k, int slot)
{
	switch (k) {
	case DT_OPTIM_ADAM: return slot == 0 ? "Adam" : "Adam_1";
	case DT_OPTIM_MOMENTUM: return "Momentum";
	case DT_OPTIM_ADAGRAD: return "Adagrad";
	case DT_OPTIM_SGD: break;
	}
	return "?";
}

size_t dt__ckpt_slot_base(const char *name)
{
	static const char *const suffixes[] = { "Adam", "Adam_1", "Momentum", "Adagrad" };
	const char *slash = strrchr(name, '/');
	if (!slash)
		return 0;
	for (size_t i = 0; i < DT_ARRAY_LEN(suffixes); i++)
		if (strcmp(slash + 1, suffixes[i]) == 0)
			return (size_t)(slash - name);
	return 0;
}

/* True when `name` is "<var>/<any optimizer's slot suffix>" for a variable of vars. */
static int is_slot_of_any(const char *name, const struct dt_variable *vars, int n)
{
	const size_t base = dt__ckpt_slot_base(name);
	if (!base)
		return 0;
	for (int i = 0; i < n; i++)
		if (strlen(vars[i].name) == base && strncmp(vars[i].name, name, base) == 0)
			return 1;
	return 0;
}

void dt_ckpt_file_name(int64_t step, char *buf, size_t cap)
{
	snprintf(buf, cap, "model.ckpt-%" PRId64 ".safetensors", step);
}

int64_t dt_ckpt_step_of(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	static const char prefix[] = "model.ckpt-", suffix[] = ".safetensors";
	if (strncmp(base, prefix, sizeof(prefix) - 1) != 0)
		return -1;
	const char *p = base + sizeof(prefix) - 1;
	int64_t step = 0;
	int digits = 0;
	while (*p >= '0' && *p <= '9') {
		if (step > (INT64_MAX - 9) / 10)
			return -1;
		step = step * 10 + (*p++ - '0');
		digits++;
	}
	if (digits == 0 || strcmp(p, suffix) != 0)
		return -1;
	return step;
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t cap)
{
	size_t at = (size_t)snprintf(buf, cap, "[");
	for (int d = 0; d < ndim && at < cap; d++)
		at += (size_t)snprintf(buf + at, cap - at, "%s%" PRId64, d ? ", " : "", shape[d]);
	if (at < cap)
		snprintf(buf + at, cap - at, "]");
}

/* ---- contents ---------------------------------------------------------------------- */

void dt_ckpt_contents_for_model(struct dt_ckpt_contents *c, struct dt_model *m)
{
	memset(c, 0, sizeof(*c));
	c->vars = dt_model_variable(m, 0);
	c->num_vars = dt_model_num_variables(m);
	c->params = dt_model_params(m);
	c->num_params = dt_model_num_params(m);
}

void dt_ckpt_contents_set_optimizer(struct dt_ckpt_contents *c, struct dt_optimizer *opt)
{
	DT_ASSERT(opt->count == c->num_params);
	c->optimizer = opt->kind;
	c->num_slots = opt->num_slots;
	c->slots = opt->num_slots > 0 ? opt->slots : NULL;
}

char *dt_ckpt_hparams_json(const struct dt_hparams *hp)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	DT_ASSERT(f);
	dt_hparams_write_json(hp, f);
	fclose(f);
	/* Compact it (numbers keep hparams.json's spelling): drop whitespace outside strings. */
	size_t n = 0;
	int in_string = 0;
	for (size_t i = 0; i < len; i++) {
		char c = text[i];
		if (in_string) {
			if (c == '\\' && i + 1 < len) {
				text[n++] = c;
				c = text[++i];
			} else if (c == '"') {
				in_string = 0;
			}
		} else if (c == '"') {
			in_string = 1;
		} else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
			continue;
		}
		text[n++] = c;
	}
	text[n] = '\0';
	return text;
}

/* Checks the description itself (our callers' bugs are usage errors here,
 * since the ps chief builds it from pulled shards). */
static enum dt_status check_contents(const struct dt_ckpt_contents *c, int for_load, struct dt_err *err)
{
	if (c->num_vars <= 0 || !c->vars || !c->params)
		return dt_err_set(err, DT_USAGE, "checkpoint contents have no variables");
	for (int i = 0; i < c->num_vars; i++) {
		const struct dt_variable *v = &c->vars[i];
		if (v->offset > c->num_params || v->count > c->num_params - v->offset)
			return dt_err_set(err, DT_USAGE, "variable '%s' ([%zu, %zu)) lies outside the %zu parameters",
					  v->name, v->offset, v->offset + v->count, c->num_params);
	}
	if (c->slots && c->num_slots != slot_count(c->optimizer))
		return dt_err_set(err, DT_USAGE, "optimizer %s has %d slot(s), not %d", optimizer_name(c->optimizer),
				  slot_count(c->optimizer), c->num_slots);
	if (!for_load && c->global_step < 0)
		return dt_err_set(err, DT_USAGE, "global step %" PRId64 " is negative", c->global_step);
	return DT_OK;
}

/* ---- save -------------------------------------------------------------------------- */

/* One tensor to write: a description plus where its bytes are. */
struct out_tensor {
	char name[DT_VAR_NAME_MAX + 16];
	enum dt_st_dtype dtype;
	int ndim;
	int64_t shape[DT_MAX_DIMS];
	const void *data;
	uint64_t nbytes;
};

static int cmp_out(const void *a, const void *b)
{
	const struct out_tensor *x = a, *y = b;
	int ax = dt_st_dtype_bits(x->dtype), ay = dt_st_dtype_bits(y->dtype);
	if (ax != ay)
		return ax > ay ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int is_reserved(const char *key)
{
	for (size_t i = 0; i < DT_ARRAY_LEN(reserved_keys); i++)
		if (strcmp(reserved_keys[i], key) == 0)
			return 1;
	return 0;
}

/* The non-trainable variables and their kinds as one compact JSON object,
 * {"bn/moving_mean":"moving_average","conv/kernel":"frozen"}, malloc'd; NULL
 * when every variable is trainable. */
static char *non_trainable_json(const struct dt_variable *vars, int n)
{
	json_t *o = json_object();
	for (int i = 0; i < n; i++)
		if (vars[i].kind != DT_VAR_TRAINABLE)
			json_object_set_new(o, vars[i].name, json_string(dt_var_kind_name(vars[i].kind)));
	char *text = json_object_size(o) ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return text;
}

/* Builds the tensor list (file order) and header of `c`, with `crc` as the
 * CRC-32C of the tensor bytes. The header's length does not depend on the
 * CRC (always 8 hex digits), so a writer can build it with a placeholder,
 * stream the tensors while computing the CRC, then rewrite the header. */
static enum dt_status build_file(const struct dt_ckpt_contents *c, const int64_t *step_value, uint32_t crc,
				 struct out_tensor **tensors_out, int *n_out, char **header, size_t *header_len,
				 struct dt_err *err)
{
	int nslots = c->slots ? c->num_slots : 0;
	int n = 1 + c->num_vars;
	for (int i = 0; i < c->num_vars; i++)
		if (c->vars[i].kind == DT_VAR_TRAINABLE) /* the others have no optimizer slots */
			n += nslots;
	struct out_tensor *t = dt_xcalloc((size_t)n, sizeof(*t));
	snprintf(t[0].name, sizeof(t[0].name), "global_step");
	t[0].dtype = DT_ST_I64;
	t[0].data = step_value;
	t[0].nbytes = 8;
	int k = 1;
	for (int i = 0; i < c->num_vars; i++) {
		const struct dt_variable *v = &c->vars[i];
		for (int s = -1; s < (v->kind == DT_VAR_TRAINABLE ? nslots : 0); s++) {
			struct out_tensor *o = &t[k++];
			if (s < 0) {
				snprintf(o->name, sizeof(o->name), "%s", v->name);
				o->data = c->params + v->offset;
			} else {
				snprintf(o->name, sizeof(o->name), "%s/%s", v->name, slot_suffix(c->optimizer, s));
				o->data = c->slots + (size_t)s * c->num_params + v->offset;
			}
			o->dtype = DT_ST_F32;
			o->ndim = v->ndim;
			memcpy(o->shape, v->shape, sizeof(o->shape));
			o->nbytes = (uint64_t)v->count * sizeof(float);
		}
	}
	DT_ASSERT(k == n);
	qsort(t, (size_t)n, sizeof(*t), cmp_out);
	char *kinds = non_trainable_json(c->vars, c->num_vars);

	char step_s[24], crc_s[16], sig[24], nslots_s[16], rng_s[80] = "", epoch_s[24], offset_s[24];
	snprintf(step_s, sizeof(step_s), "%" PRId64, c->global_step);
	snprintf(crc_s, sizeof(crc_s), "%08" PRIx32, crc); /* always 8 digits: the header's length is fixed */
	dt_ckpt_model_signature(c->vars, c->num_vars, sig, sizeof(sig));
	snprintf(nslots_s, sizeof(nslots_s), "%d", nslots);
	if (c->has_rng)
		snprintf(rng_s, sizeof(rng_s), "%016" PRIx64 ":%016" PRIx64 ":%016" PRIx64 ":%016" PRIx64,
			 c->dropout_rng.s[0], c->dropout_rng.s[1], c->dropout_rng.s[2], c->dropout_rng.s[3]);
	snprintf(epoch_s, sizeof(epoch_s), "%" PRId64, c->pipeline_epoch);
	snprintf(offset_s, sizeof(offset_s), "%" PRId64, c->pipeline_offset);

	int nmeta = 0;
	struct dt_ckpt_kv *meta = dt_xcalloc(DT_ARRAY_LEN(reserved_keys) + (size_t)c->num_extra, sizeof(*meta));
	meta[nmeta++] = (struct dt_ckpt_kv){ "format", DT_CKPT_FORMAT };
	meta[nmeta++] = (struct dt_ckpt_kv){ "global_step", step_s };
	meta[nmeta++] = (struct dt_ckpt_kv){ "crc32c", crc_s };
	meta[nmeta++] = (struct dt_ckpt_kv){ "header_crc32c", DT_CKPT_HEADER_CRC_PLACEHOLDER };
	meta[nmeta++] = (struct dt_ckpt_kv){ "model_signature", sig };
	meta[nmeta++] = (struct dt_ckpt_kv){ "optimizer", optimizer_name(c->optimizer) };
	meta[nmeta++] = (struct dt_ckpt_kv){ "num_slots", nslots_s };
	if (c->has_rng)
		meta[nmeta++] = (struct dt_ckpt_kv){ "dropout_rng", rng_s };
	meta[nmeta++] = (struct dt_ckpt_kv){ "pipeline_epoch", epoch_s };
	meta[nmeta++] = (struct dt_ckpt_kv){ "pipeline_offset", offset_s };
	if (c->pipeline_global)
		meta[nmeta++] = (struct dt_ckpt_kv){ "pipeline_position", "global" };
	if (c->hparams)
		meta[nmeta++] = (struct dt_ckpt_kv){ "hparams", c->hparams };
	if (kinds)
		meta[nmeta++] = (struct dt_ckpt_kv){ "non_trainable", kinds };
	enum dt_status st = DT_OK;
	for (int i = 0; i < c->num_extra && !st; i++) {
		if (is_reserved(c->extra[i].key) || strcmp(c->extra[i].key, "__metadata__") == 0)
			st = dt_err_set(err, DT_USAGE, "metadata key '%s' is reserved for dtrain's own use",
					c->extra[i].key);
		meta[nmeta++] = c->extra[i];
	}
	if (!st) {
		struct dt_st_tensor_desc *desc = dt_xcalloc((size_t)n, sizeof(*desc));
		for (int i = 0; i < n; i++)
			desc[i] = (struct dt_st_tensor_desc){ t[i].name, t[i].dtype, t[i].ndim, t[i].shape, t[i].nbytes };
		st = dt_st_build_header(desc, n, meta, nmeta, header, header_len, err);
		free(desc);
	}
	free(meta);
	free(kinds);
	if (st) {
		free(t);
		return st;
	}
	*tensors_out = t;
	*n_out = n;
	return DT_OK;
}

/* Writes `len` bytes at `data` to f at file offset *off, extending *crc over
 * them chunk by chunk just before each chunk is written, while it is still in
 * cache: one pass over memory instead of a CRC pass and a write pass. Every
 * few chunks it asks the kernel to start writing them back
 * (sync_file_range), so the disk works while we go on and the final fsync
 * has little left to wait for. That call is only a hint: its failure is
 * ignored, because the fsync of the commit reports any write-back error. */
static enum dt_status write_with_crc(struct dt_atomic_file *f, const void *data, size_t len, uint64_t *off,
				     uint32_t *crc, struct dt_err *err)
{
	enum { CHUNK = 1 << 20, WRITEBACK = 8 << 20 };
	const char *p = data;
	for (size_t done = 0; done < len;) {
		size_t n = len - done < CHUNK ? len - done : CHUNK;
		*crc = dt_crc32c_extend(*crc, p + done, n);
		enum dt_status st = dt_atomic_file_write(f, p + done, n, err);
		if (st)
			return st;
		done += n;
		uint64_t before = *off;
		*off += n;
		if (*off / WRITEBACK != before / WRITEBACK) {
			uint64_t start = (*off / WRITEBACK - 1) * (uint64_t)WRITEBACK;
			(void)sync_file_range(f->fd, (off_t)start, WRITEBACK, SYNC_FILE_RANGE_WRITE);
		}
	}
	return DT_OK;
}

/* Writes the checkpoint file at `path` durably; returns its size in *bytes.
 * Order: the header with a placeholder CRC, the tensors (CRC computed as
 * they go), the header again with the real CRC at offset 0, then fsync and
 * rename (dt_atomic_file_commit): the final name never shows a placeholder. */
static enum dt_status write_checkpoint(const char *path, const struct dt_ckpt_contents *c, uint64_t *bytes,
				       struct dt_err *err)
{
	int64_t step_value = c->global_step;
	struct out_tensor *t;
	int n;
	char *header;
	size_t header_len;
	enum dt_status st = build_file(c, &step_value, 0, &t, &n, &header, &header_len, err);
	if (st)
		return st;
	struct dt_atomic_file f;
	if ((st = dt_atomic_file_open(&f, path, err))) {
		free(header);
		free(t);
		return st;
	}
	*bytes = header_len;
	uint32_t crc = 0;
	uint64_t off = header_len;
	st = dt_atomic_file_write(&f, header, header_len, err);
	for (int i = 0; i < n && !st; i++) {
		st = write_with_crc(&f, t[i].data, (size_t)t[i].nbytes, &off, &crc, err);
		*bytes += t[i].nbytes;
	}
	free(header);
	free(t);
	if (!st && !(st = build_file(c, &step_value, crc, &t, &n, &header, &header_len, err))) {
		/* Seal the header: its checksum over every byte, placeholder in place. */
		int found;
		size_t at;
		uint32_t hcrc;
		dt_st_header_crc(header, header_len, &found, &at, &hcrc);
		DT_ASSERT(found);
		char digits[9];
		snprintf(digits, sizeof(digits), "%08" PRIx32, hcrc);
		memcpy(header + at, digits, 8);
		ssize_t w = pwrite(f.fd, header, header_len, 0);
		if (w != (ssize_t)header_len)
			st = dt_err_set(err, DT_IO, "cannot write the header of '%s': %s", f.tmp_path,
					w < 0 ? strerror(errno) : "short write");
		free(header);
		free(t);
	}
	if (st) {
		dt_atomic_file_abort(&f);
		return st;
	}
	return dt_atomic_file_commit(&f, err);
}

enum dt_status dt__ckpt_make_dirs(const char *dir, struct dt_err *err)
{
	char *p = dt_xstrdup(dir);
	enum dt_status st = DT_OK;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, 0755) != 0 && errno != EEXIST) {
			st = dt_err_set(err, DT_IO, "cannot create directory '%s': %s", p, strerror(errno));
			break;
		}
		*s = c;
		if (c == '\0')
			break;
	}
	free(p);
	if (!st) {
		struct stat sb;
		if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
			st = dt_err_set(err, DT_IO, "'%s' is not a directory", dir);
	}
	return st;
}

static int file_exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0;
}

static void state_remove(struct dt_ckpt_state *s, int i)
{
	free(s->paths[i]);
	memmove(&s->paths[i], &s->paths[i + 1], (size_t)(s->count - i - 1) * sizeof(char *));
	memmove(&s->timestamps[i], &s->timestamps[i + 1], (size_t)(s->count - i - 1) * sizeof(double));
	s->count--;
}

enum dt_status dt_ckpt_save(const char *dir, const struct dt_ckpt_contents *c, int keep_max,
			    struct dt_ckpt_saved *out, struct dt_err *err)
{
	int64_t t0 = dt_now_ns();
	struct dt_ckpt_saved local;
	if (!out)
		out = &local;
	memset(out, 0, sizeof(*out));
	if (!dir || !*dir)
		return dt_err_set(err, DT_USAGE, "no checkpoint directory given");
	if (keep_max < 0)
		return dt_err_set(err, DT_USAGE, "keep_checkpoint_max must not be negative, got %d", keep_max);
	enum dt_status st = check_contents(c, 0, err);
	if (st || (st = dt__ckpt_make_dirs(dir, err)))
		return st;

	/* Read the state first: a bad one stops us before anything is written. */
	struct dt_ckpt_state s;
	int exists;
	if ((st = dt_ckpt_state_read(dir, &s, &exists, err)))
		return st;
	char name[64];
	dt_ckpt_file_name(c->global_step, name, sizeof(name));
	int plen = snprintf(out->path, sizeof(out->path), "%s/%s", dir, name);
	if (plen < 0 || (size_t)plen >= sizeof(out->path)) {
		dt_ckpt_state_release(&s);
		return dt_err_set(err, DT_USAGE, "checkpoint directory '%s' is too long a path", dir);
	}
	if ((st = write_checkpoint(out->path, c, &out->bytes, err))) {
		dt_ckpt_state_release(&s);
		return dt_err_prefix(err, "cannot save checkpoint for step %" PRId64, c->global_step);
	}

	/* Record it: drop entries of the same file or whose file is gone, append. */
	for (int i = s.count - 1; i >= 0; i--) {
		char full[DT_CKPT_PATH_MAX];
		dt_ckpt_state_resolve(dir, s.paths[i], full, sizeof(full));
		if (dt_ckpt_step_of(s.paths[i]) == c->global_step || !file_exists(full))
			state_remove(&s, i);
	}
	s.paths = dt_xrealloc(s.paths, (size_t)(s.count + 1) * sizeof(char *));
	s.timestamps = dt_xrealloc(s.timestamps, (size_t)(s.count + 1) * sizeof(double));
	s.paths[s.count] = dt_xstrdup(name);
	s.timestamps[s.count] = dt_wall_seconds();
	s.count++;
	if (!exists)
		s.last_preserved_timestamp = dt_wall_seconds();
	if ((st = dt_ckpt_state_write(dir, &s, err)))
		goto out;

	/* Sweep beyond keep_max, oldest first, then record the state again. */
	while (keep_max > 0 && s.count > keep_max) {
		char full[DT_CKPT_PATH_MAX];
		dt_ckpt_state_resolve(dir, s.paths[0], full, sizeof(full));
		if (unlink(full) != 0 && errno != ENOENT) {
			st = dt_err_set(err, DT_IO, "cannot delete old checkpoint '%s': %s", full, strerror(errno));
			goto out;
		}
		state_remove(&s, 0);
		out->deleted++;
	}
	/* (The state file's rename is followed by a directory fsync, which makes
	 * the deletions durable too.) */
	if (out->deleted > 0)
		st = dt_ckpt_state_write(dir, &s, err);
out:
	dt_ckpt_state_release(&s);
	out->seconds = (double)(dt_now_ns() - t0) / 1e9;
	return st;
}

/* ---- load -------------------------------------------------------------------------- */

static enum dt_status meta_i64(const struct dt_st_file *f, const char *key, int64_t min, int64_t *out,
			       struct dt_err *err)
{
	const char *v = dt_st_meta(f, key);
	if (!v)
		return dt_err_set(err, DT_CKPT, "%s: no '%s' in __metadata__", f->path, key);
	char *end;
	errno = 0;
	long long x = strtoll(v, &end, 10);
	if (errno || end == v || *end || x < min)
		return dt_err_set(err, DT_CKPT, "%s: __metadata__ '%s' is \"%s\", not an integer >= %" PRId64, f->path,
				  key, v, min);
	*out = x;
	return DT_OK;
}

static enum dt_status meta_crc(const struct dt_st_file *f, uint32_t *out, struct dt_err *err)
{
	const char *v = dt_st_meta(f, "crc32c");
	if (!v)
		return dt_err_set(err, DT_CKPT, "%s: no 'crc32c' in __metadata__", f->path);
	char *end;
	unsigned long x = strtoul(v, &end, 16);
	if (strlen(v) != 8 || *end || end == v)
		return dt_err_set(err, DT_CKPT, "%s: __metadata__ 'crc32c' is \"%s\", not 8 hex digits", f->path, v);
	*out = (uint32_t)x;
	return DT_OK;
}

/* The dtrain-specific rules beyond the safetensors layout. */
static enum dt_status check_dtrain_meta(const struct dt_st_file *f, uint32_t *crc, int64_t *step,
					struct dt_err *err)
{
	enum dt_status st = dt_ckpt_check_header(f, err);
	if (st || (st = meta_crc(f, crc, err)) || (st = meta_i64(f, "global_step", 0, step, err)))
		return st;
	return DT_OK;
}

/* Reads [at, at+len) of the file into dst (or a scratch buffer when dst is
 * NULL), extending *crc. */
static enum dt_status read_crc(int fd, const struct dt_st_file *f, void *dst, uint64_t at, uint64_t len,
			       uint32_t *crc, struct dt_err *err)
{
	const uint64_t chunk = 8u << 20;
	char *scratch = dst ? NULL : dt_xmalloc((size_t)(len < chunk ? (len ? len : 1) : chunk));
	enum dt_status st = DT_OK;
	for (uint64_t done = 0; done < len && !st;) {
		uint64_t n = len - done < chunk ? len - done : chunk;
		char *p = dst ? (char *)dst + done : scratch;
		if (!(st = dt__st_read_at(fd, f->path, p, (size_t)n, f->data_start + at + done, err)))
			*crc = dt_crc32c_extend(*crc, p, (size_t)n);
		done += n;
	}
	free(scratch);
	return st;
}

enum dt_status dt_ckpt_verify(const struct dt_st_file *f, const void *bytes, struct dt_err *err)
{
	uint32_t want, got = 0;
	int64_t step;
	enum dt_status st = check_dtrain_meta(f, &want, &step, err);
	if (st)
		return st;
	char sig[24];
	dt__ckpt_file_signature(f, sig, sizeof(sig));
	if ((st = dt__ckpt_check_signature(f, sig, "the file's own variables", err)))
		return st;
	uint64_t len = f->file_size - f->data_start;
	if (bytes) {
		got = dt_crc32c((const char *)bytes + f->data_start, (size_t)len);
	} else {
		int fd;
		struct dt_st_file *again;
		if ((st = dt__st_open_fd(f->path, &again, &fd, err)))
			return st;
		if (again->file_size != f->file_size)
			st = dt_err_set(err, DT_CKPT, "%s changed size while being verified", f->path);
		else
			st = read_crc(fd, again, NULL, 0, len, &got, err);
		close(fd);
		dt_st_free(again);
		if (st)
			return st;
	}
	if (got != want)
		return dt_err_set(err, DT_CKPT, "%s: crc mismatch: the tensor bytes have CRC-32C %08" PRIx32
						", __metadata__ says %08" PRIx32 " (the file is corrupt)",
				  f->path, got, want);
	return DT_OK;
}

/* Where tensor `t` goes in `into`; *dst = NULL for bytes only checksummed. */
struct placement {
	void *dst;
	int known;   /* a variable, a wanted slot, or global_step */
};

/* Checks that the file holds exactly this model; fills where each tensor goes. */
static enum dt_status match_model_names(const struct dt_st_file *f, const struct dt_ckpt_contents *into,
					struct placement *place, int64_t *step_dst, struct dt_err *err)
{
	char a[96], b[96];
	for (int i = 0; i < into->num_vars; i++) {
		const struct dt_variable *v = &into->vars[i];
		int64_t dims[DT_MAX_DIMS];
		memcpy(dims, v->shape, sizeof(dims));
		shape_str(v->ndim, dims, b, sizeof(b));
		const struct dt_st_tensor_info *t = dt_st_find(f, v->name);
		if (!t)
			return dt_err_set(err, DT_CKPT, "checkpoint '%s' is of a different model: it has no variable '%s' (shape %s "
							"in this model)", f->path, v->name, b);
		shape_str(t->ndim, t->shape, a, sizeof(a));
		int same = t->ndim == v->ndim && t->dtype == DT_ST_F32;
		for (int d = 0; same && d < v->ndim; d++)
			same = t->shape[d] == v->shape[d];
		if (!same)
			return dt_err_set(err, DT_CKPT, "checkpoint '%s' is of a different model: variable '%s' has shape %s %s in "
							"the checkpoint but %s F32 in this model", f->path, v->name, a,
					  dt_st_dtype_name(t->dtype), b);
		place[t - f->tensors] = (struct placement){ into->params + v->offset, 1 };
		/* a non-trainable variable has no slots (an older checkpoint's, zero, are skipped below) */
		int nslots = into->slots && v->kind == DT_VAR_TRAINABLE ? into->num_slots : 0;
		for (int s = 0; s < nslots; s++) {
			char name[DT_VAR_NAME_MAX + 16];
			snprintf(name, sizeof(name), "%s/%s", v->name, slot_suffix(into->optimizer, s));
			const struct dt_st_tensor_info *ts = dt_st_find(f, name);
			const char *saved = dt_st_meta(f, "optimizer");
			if (!ts)
				return dt_err_set(err, DT_CKPT, "%s has no optimizer slot '%s' (it was saved with optimizer "
								"%s, this run uses %s)", f->path, name, saved ? saved : "?",
						  optimizer_name(into->optimizer));
			int ok = ts->ndim == v->ndim && ts->dtype == DT_ST_F32;
			for (int d = 0; ok && d < v->ndim; d++)
				ok = ts->shape[d] == v->shape[d];
			if (!ok) {
				shape_str(ts->ndim, ts->shape, a, sizeof(a));
				return dt_err_set(err, DT_CKPT, "%s: slot '%s' has shape %s %s, its variable %s F32",
						  f->path, name, a, dt_st_dtype_name(ts->dtype), b);
			}
			place[ts - f->tensors] =
				(struct placement){ into->slots + (size_t)s * into->num_params + v->offset, 1 };
		}
	}
	for (int i = 0; i < f->num_tensors; i++) {
		const struct dt_st_tensor_info *t = &f->tensors[i];
		if (strcmp(t->name, "global_step") == 0) {
			place[i] = (struct placement){ step_dst, 1 };
			continue;
		}
		if (place[i].known || is_slot_of_any(t->name, into->vars, into->num_vars))
			continue;
		shape_str(t->ndim, t->shape, a, sizeof(a));
		return dt_err_set(err, DT_CKPT, "checkpoint '%s' is of a different model: it has variable '%s' (shape %s) that this "
						"model lacks", f->path, t->name, a);
	}
	return DT_OK;
}

static enum dt_status match_model(const struct dt_st_file *f, const struct dt_ckpt_contents *into,
				  struct placement *place, int64_t *step_dst, int *mismatch, struct dt_err *err)
{
	enum dt_status st = match_model_names(f, into, place, step_dst, err);
	*mismatch = st != DT_OK;
	if (st)
		dt_err_hint(err, "train a different model in a new --output_dir, or pass the --hparams the checkpoint "
				 "was saved with (dtrain ckpt inspect shows them)");
	return st;
}

static enum dt_status parse_rng(const struct dt_st_file *f, struct dt_rng *rng, struct dt_err *err)
{
	const char *v = dt_st_meta(f, "dropout_rng");
	const char *p = v;
	for (int i = 0; i < 4; i++) {
		char *end;
		errno = 0;
		unsigned long long x = strtoull(p, &end, 16);
		if (errno || end - p != 16 || (i < 3 ? *end != ':' : *end != '\0'))
			return dt_err_set(err, DT_CKPT, "%s: __metadata__ 'dropout_rng' is \"%s\", not four 16-digit "
							"hex words joined by ':'", f->path, v);
		rng->s[i] = x;
		p = end + 1;
	}
	return DT_OK;
}

enum dt_status dt_ckpt_load(const char *path, struct dt_ckpt_contents *into, struct dt_err *err)
{
	int mismatch;
	return dt__ckpt_load(path, into, &mismatch, err);
}

enum dt_status dt__ckpt_load(const char *path, struct dt_ckpt_contents *into, int *mismatch, struct dt_err *err)
{
	*mismatch = 0;
	enum dt_status st = check_contents(into, 1, err);
	if (st)
		return st;
	struct dt_st_file *f;
	int fd;
	if ((st = dt__st_open_fd(path, &f, &fd, err)))
		return st;
	uint32_t want, crc = 0;
	int64_t meta_step, tensor_step = -1, epoch, offset;
	struct placement *place = dt_xcalloc(f->num_tensors ? (size_t)f->num_tensors : 1, sizeof(*place));
	if ((st = check_dtrain_meta(f, &want, &meta_step, err)) ||
	    (st = meta_i64(f, "pipeline_epoch", 0, &epoch, err)) ||
	    (st = meta_i64(f, "pipeline_offset", 0, &offset, err)) ||
	    (st = match_model(f, into, place, &tensor_step, mismatch, err)))
		goto out;
	/* Names and shapes match the model, so a different signature can only be
	 * a damaged value: corruption (fall back), not a different model. */
	char sig[24];
	dt_ckpt_model_signature(into->vars, into->num_vars, sig, sizeof(sig));
	if ((st = dt__ckpt_check_signature(f, sig, "this model's variables", err)))
		goto out;
	if (!dt_st_meta(f, "header_crc32c"))
		dt_info("checkpoint '%s' is of format " DT_CKPT_FORMAT_V1 ", written before header checksums: its "
			"header is checked against the model and its model_signature, its data against its CRC",
			path);
	for (int i = 0; i < f->num_tensors && !st; i++) {
		const struct dt_st_tensor_info *t = &f->tensors[i];
		st = read_crc(fd, f, place[i].dst, t->begin, t->end - t->begin, &crc, err);
	}
	if (st)
		goto out;
	if (crc != want) {
		st = dt_err_set(err, DT_CKPT, "%s: crc mismatch: the tensor bytes have CRC-32C %08" PRIx32
					      ", __metadata__ says %08" PRIx32 " (the file is corrupt)",
				path, crc, want);
		goto out;
	}
	if (tensor_step != meta_step) {
		st = dt_err_set(err, DT_CKPT, "%s: tensor global_step is %" PRId64 " but __metadata__ says %" PRId64,
				path, tensor_step, meta_step);
		goto out;
	}
	into->has_rng = dt_st_meta(f, "dropout_rng") != NULL;
	if (into->has_rng && (st = parse_rng(f, &into->dropout_rng, err)))
		goto out;
	into->global_step = meta_step;
	into->pipeline_epoch = epoch;
	into->pipeline_offset = offset;
	const char *pos = dt_st_meta(f, "pipeline_position");
	into->pipeline_global = pos && strcmp(pos, "global") == 0;
out:
	free(place);
	close(fd);
	dt_st_free(f);
	return st;
}
