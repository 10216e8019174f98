/*
 * checkpoint.h — checkpoints as safetensors files, TensorFlow's `checkpoint`
 * state file beside them, restore with fallback, and the saver's cadence.
 *
 * A checkpoint is one file `<dir>/model.ckpt-<step>.safetensors` that any
 * safetensors reader opens. It holds every model variable, the optimizer
 * slots under TensorFlow's names, the global step, and in `__metadata__`
 * (strings only, as the format requires) the dropout RNG, the input
 * pipeline's position, the hparams, the model signature and a CRC-32C of
 * the tensor bytes, so a resumed run continues exactly where the saved one
 * was (same data order, same dropout masks, same optimizer state).
 *
 * File layout (little-endian; safetensors as huggingface/safetensors defines it):
 *   1. bytes [0, 8): N, the header length, uint64 little-endian.
 *   2. bytes [8, 8+N): the header, UTF-8 JSON, compact, beginning with '{'
 *      and right-padded with spaces (0x20) so 8+N is a multiple of 8:
 *        {"__metadata__":{...},"global_step":{...},"conv_1/bias":{...},...}
 *      `__metadata__` comes first; then the tensors in file order. Each tensor
 *      entry is {"dtype":"F32","shape":[d0,...],"data_offsets":[BEGIN,END]},
 *      offsets relative to byte 8+N, END one past the last byte.
 *   3. bytes [8+N, file end): the tensors' bytes, back to back with no holes
 *      and nothing after the last one, each row-major little-endian. Order
 *      (the reference writer's): by dtype alignment descending, then by name;
 *      so first `global_step` (I64, shape [], 8 bytes), then every F32 tensor
 *      by name: variables (`dense_1/kernel`, shape as in nn/model.h) and
 *      slots (`dense_1/kernel/Adam`, `dense_1/kernel/Adam_1`,
 *      `<var>/Momentum`, `<var>/Adagrad`) of the trainable variables, each
 *      slot with its variable's shape.
 *   4. `__metadata__` keys (all values strings):
 *        format           "dtrain.ckpt.v2" (v1: the same without header_crc32c)
 *        global_step      decimal, equal to the `global_step` tensor
 *        crc32c           8 lowercase hex digits: CRC-32C (base/crc32c.h, not
 *                         masked) of all of item 3's bytes
 *        header_crc32c    8 lowercase hex digits: CRC-32C of bytes [0, 8+N)
 *                         (the length, the JSON, its padding) as they are
 *                         with this value replaced by "00000000"
 *                         (DT_CKPT_HEADER_CRC_PLACEHOLDER), so every header
 *                         byte, this entry's own key included, is covered
 *        model_signature  16 hex digits: FNV-1a 64 of the variables' lines
 *                         "name F32 [d0,d1]\n" sorted by name
 *        optimizer        "sgd", "momentum", "adam" or "adagrad"
 *        num_slots        decimal, slots per variable saved (0 when none)
 *        dropout_rng      four 16-hex-digit words joined by ':' (base/rng.h)
 *        pipeline_epoch, pipeline_offset   decimal (data/pipeline.h's position)
 *        hparams          the hparams as one JSON object (nn/hparams.h)
 *        non_trainable    (only when some variable is not trainable) one JSON
 *                         object of those variables' kinds (nn/model.h's
 *                         dt_var_kind_name): {"bn/moving_mean":"moving_average"};
 *                         they have no optimizer slots
 *        plus the caller's extra keys (struct dt_ckpt_kv), which must not
 *        reuse these names.
 *
 * State file `<dir>/checkpoint` (TensorFlow's text CheckpointState), paths
 * relative to the directory, oldest first, newest last and repeated on top:
 *     model_checkpoint_path: "model.ckpt-300.safetensors"
 *     all_model_checkpoint_paths: "model.ckpt-200.safetensors"
 *     all_model_checkpoint_paths: "model.ckpt-300.safetensors"
 *     all_model_checkpoint_timestamps: 1784015298.994252
 *     all_model_checkpoint_timestamps: 1784015299.260717
 *     last_preserved_timestamp: 1784015297.175224
 *
 * Save order (crash-safe at every instruction): write the checkpoint to
 * "<name>.tmp.<pid>", fsync, rename, fsync the directory; rewrite the state
 * file the same way; delete checkpoints beyond keep_max (oldest first);
 * rewrite the state file again. So the state file only ever names complete
 * files, and a crash leaves at worst an orphan "*.tmp.*" file, which the next
 * restore removes.
 *
 * Restore: the newest entry of the state file whose file verifies (layout,
 * header CRC, data CRC, model, model_signature), falling back to older entries with a warning saying why; no
 * state file → the model.ckpt-*.safetensors files by step, newest first; a
 * state file that exists but cannot be read or parsed → DT_CKPT (exit 4),
 * never a silent fresh start.
 *
 * Errors: DT_CKPT for a file that breaks a rule (the message names the file,
 * the tensor and the rule), DT_IO for system calls (named with the step:
 * "cannot fsync ..."), DT_USAGE for bad arguments.
 */
#ifndef DT_TRAIN_CHECKPOINT_H
#define DT_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"
#include "base/rng.h"
#include "nn/model.h"
#include "nn/optimizer.h"

#define DT_CKPT_FORMAT "dtrain.ckpt.v2"
/* Files written before the header checksum: accepted without one (the data
 * CRC and the model signature are still checked), with a logged note. */
#define DT_CKPT_FORMAT_V1 "dtrain.ckpt.v1"
/* What the header_crc32c value reads as while the header's CRC is computed. */
#define DT_CKPT_HEADER_CRC_PLACEHOLDER "00000000"
#define DT_CKPT_STATE_FILE "checkpoint"
#define DT_CKPT_PATH_MAX 4096
/* The reference reader's cap on the header length (MAX_HEADER_SIZE). */
#define DT_SAFETENSORS_MAX_HEADER 100000000ull
#define DT_CKPT_MAX_SLOTS 2

/* One free-form metadata entry (strings are borrowed). */
struct dt_ckpt_kv {
	const char *key, *value;
};

/*
 * What goes into a checkpoint, and what a load fills. All pointers are
 * borrowed: the caller owns the buffers, which must outlive the call.
 *
 * Save reads every field. Load reads the model description (vars,
 * num_vars, params, num_params) and the slot request (optimizer, num_slots,
 * slots), checks the file against them, and writes params, slots (if
 * slots != NULL), global_step, dropout_rng, has_rng, pipeline_epoch and
 * pipeline_offset. On a failed load the buffers hold unspecified values.
 */
struct dt_ckpt_contents {
	/* The model: variables as (offset, count) views into params. */
	const struct dt_variable *vars;    /* (num_vars) */
	int num_vars;
	float *params;                     /* (num_params) */
	size_t num_params;

	/* Optimizer slots, slot-major as nn/optimizer.h lays them out: slot k of
	 * element i is slots[k * num_params + i]. Names: adam → <var>/Adam (m)
	 * and <var>/Adam_1 (v); momentum → <var>/Momentum; adagrad → <var>/Adagrad.
	 * slots == NULL (or num_slots == 0): none saved / none wanted on load. */
	enum dt_optimizer_kind optimizer;
	int num_slots;                     /* 0..DT_CKPT_MAX_SLOTS, must match the kind */
	float *slots;                      /* (num_slots, num_params) or NULL */

	int64_t global_step;               /* also saved as the rank-0 I64 tensor "global_step" */
	int has_rng;                       /* dropout_rng is meaningful */
	struct dt_rng dropout_rng;
	int64_t pipeline_epoch;            /* data/pipeline.h's resume position */
	int64_t pipeline_offset;
	/* The position is the global batch's, in the whole dataset's order
	 * (data/pipeline.h's slices): the same at any worker count. Saved as
	 * pipeline_position = "global"; 0 (absent in older files): one data
	 * shard's position, valid at the worker count that wrote it. */
	int pipeline_global;

	const char *hparams;               /* save: JSON text of the hparams, or NULL */
	const struct dt_ckpt_kv *extra;    /* save: more metadata, (num_extra) */
	int num_extra;
};

/* Sets up `c` for a model: vars, params, sizes from `m`; no slots, step 0. */
void dt_ckpt_contents_for_model(struct dt_ckpt_contents *c, struct dt_model *m);
/* Adds the optimizer's slots (kind, num_slots, slots) to `c`. */
void dt_ckpt_contents_set_optimizer(struct dt_ckpt_contents *c, struct dt_optimizer *opt);
/* The hparams as compact JSON (heap string, caller frees), for c->hparams. */
char *dt_ckpt_hparams_json(const struct dt_hparams *hp);

/* Writes the 16-hex-digit model signature of `vars` (see item 4) into buf (>= 17 bytes). */
void dt_ckpt_model_signature(const struct dt_variable *vars, int num_vars, char *buf, size_t cap);
/* "model.ckpt-<step>.safetensors" */
void dt_ckpt_file_name(int64_t step, char *buf, size_t cap);
/* The step of a name "model.ckpt-<step>.safetensors" (any directory prefix);
 * -1 when the name does not have that form. */
int64_t dt_ckpt_step_of(const char *path);

/* ---- saving ---- */

struct dt_ckpt_saved {
	char path[DT_CKPT_PATH_MAX];       /* the checkpoint written */
	uint64_t bytes;                    /* its size */
	double seconds;                    /* the whole save, state file and sweep included */
	int deleted;                       /* old checkpoints removed by keep_max */
};

/* Saves `c` as <dir>/model.ckpt-<c->global_step>.safetensors (creating dir),
 * records it in the state file (replacing an entry of the same step), deletes
 * the oldest beyond keep_max (0 keeps all) and rewrites the state file.
 * A state file that exists but cannot be parsed is DT_CKPT (nothing is
 * written over it). `out` may be NULL. */
enum dt_status dt_ckpt_save(const char *dir, const struct dt_ckpt_contents *c, int keep_max,
			    struct dt_ckpt_saved *out, struct dt_err *err) DT_MUST_CHECK;

/* ---- loading ---- */

/* Opens and fully verifies checkpoint `path` (layout rules, CRC-32C, format)
 * and loads it into `into` (see struct dt_ckpt_contents). A different model
 * is DT_CKPT naming the first differing variable with both shapes, or the
 * first missing or extra variable; a missing slot tensor when slots were
 * asked for is DT_CKPT naming it. A file that vanished is DT_IO (ENOENT).
 * The hparams and the caller's extra metadata are not returned here: read
 * them with dt_st_open() + dt_st_meta(). */
enum dt_status dt_ckpt_load(const char *path, struct dt_ckpt_contents *into, struct dt_err *err) DT_MUST_CHECK;

/* Restores the newest checkpoint of `dir` that loads (see the restore rules
 * above), logging a warning for each one skipped and why. *found = 0 and
 * DT_OK when the directory has no checkpoint at all (or does not exist);
 * DT_CKPT when checkpoints exist but none loads, or the state file is bad.
 * Also removes stale "*.tmp.*" files of dead writers (older than this
 * process). `path_out` (may be NULL) gets the file restored. */
enum dt_status dt_ckpt_restore_latest(const char *dir, struct dt_ckpt_contents *into, int *found,
				      char *path_out, size_t path_cap, struct dt_err *err) DT_MUST_CHECK;

/* Removes "model.ckpt-*.safetensors.tmp.*" and "checkpoint.tmp.*" files in dir
 * last modified before `older_than` (Unix seconds); returns how many. */
int dt_ckpt_remove_stale_temps(const char *dir, double older_than);

/* ---- the state file, for savers and pollers ---- */

struct dt_ckpt_state {
	int count;                         /* entries, oldest first; the last is the newest */
	char **paths;                      /* (count) as written: relative to dir, or absolute; owned */
	double *timestamps;                /* (count) Unix seconds; 0 where the file has none */
	double last_preserved_timestamp;
};

void dt_ckpt_state_init(struct dt_ckpt_state *s);
void dt_ckpt_state_release(struct dt_ckpt_state *s);
/* Parses the text of a state file; DT_CKPT naming `what` and the line on error. */
enum dt_status dt_ckpt_state_parse(const char *text, size_t len, const char *what, struct dt_ckpt_state *s,
				   struct dt_err *err) DT_MUST_CHECK;
/* Reads <dir>/checkpoint. *exists = 0 (DT_OK, empty state) when there is none;
 * an unreadable or unparsable file is DT_CKPT. */
enum dt_status dt_ckpt_state_read(const char *dir, struct dt_ckpt_state *s, int *exists,
				  struct dt_err *err) DT_MUST_CHECK;
/* Writes <dir>/checkpoint atomically (temp, fsync, rename, fsync dir). */
enum dt_status dt_ckpt_state_write(const char *dir, const struct dt_ckpt_state *s, struct dt_err *err) DT_MUST_CHECK;
/* Joins entry `path` (relative or absolute) to dir into buf. */
void dt_ckpt_state_resolve(const char *dir, const char *path, char *buf, size_t cap);

/* For pollers (the evaluator): where the newest checkpoint is, without
 * opening it. A checkpoint can be deleted or replaced under a poller at any
 * moment; that is DT_CKPT_POLL_RETRY, never an error. */
enum dt_ckpt_poll {
	DT_CKPT_POLL_NONE,    /* no checkpoint yet (no state file, no files) */
	DT_CKPT_POLL_FOUND,   /* *path and *step set; the file existed a moment ago */
	DT_CKPT_POLL_RETRY,   /* the state file names a file that is not there (yet or any more) */
};
/* DT_CKPT only when the state file exists but cannot be parsed (a poller may
 * still retry: state files are replaced atomically). */
enum dt_status dt_ckpt_latest_path(const char *dir, char *path, size_t cap, int64_t *step,
				   enum dt_ckpt_poll *result, struct dt_err *err) DT_MUST_CHECK;
/* Every checkpoint of dir, oldest first, from the state file (or a scan when
 * there is none), as full paths; for --eval_mode=every. */
enum dt_status dt_ckpt_list(const char *dir, struct dt_ckpt_state *out, struct dt_err *err) DT_MUST_CHECK;

/* ---- one file, for `dtrain ckpt inspect` / `verify` and the fuzzer ---- */

enum dt_st_dtype {
	DT_ST_BOOL, DT_ST_U8, DT_ST_I8, DT_ST_I16, DT_ST_U16, DT_ST_F16, DT_ST_BF16, DT_ST_I32,
	DT_ST_U32, DT_ST_F32, DT_ST_F64, DT_ST_I64, DT_ST_U64, DT_ST_C64, DT_ST_F8_E5M2, DT_ST_F8_E4M3,
	DT_ST_F8_E8M0, DT_ST_F8_E4M3FNUZ, DT_ST_F8_E5M2FNUZ, DT_ST_F4, DT_ST_F6_E2M3, DT_ST_F6_E3M2,
	DT_ST_DTYPE_COUNT
};
/* "F32"; bits per element (4, 6, 8, ..., 64). */
const char *dt_st_dtype_name(enum dt_st_dtype t);
int dt_st_dtype_bits(enum dt_st_dtype t);

#define DT_ST_MAX_DIMS 8

struct dt_st_tensor_info {
	char *name;                        /* owned */
	enum dt_st_dtype dtype;
	int ndim;                          /* 0 for a scalar */
	int64_t shape[DT_ST_MAX_DIMS];
	uint64_t begin, end;               /* data_offsets, relative to the byte buffer */
};

struct dt_st_file {
	char *path;                        /* owned; "<memory>" for dt_st_parse */
	uint64_t file_size;
	uint64_t header_len;               /* N */
	uint64_t data_start;               /* 8 + N */
	int num_tensors;
	struct dt_st_tensor_info *tensors; /* (num_tensors) sorted by begin, owned */
	int num_meta;
	char **meta_keys, **meta_values;   /* (num_meta) in header order, owned */

	/* The header checksum, found in the raw header bytes by the parser
	 * (the JSON text "header_crc32c":"XXXXXXXX" exactly once; not found, or
	 * found twice: header_crc_found = 0). header_crc_computed is the
	 * CRC-32C of bytes [0, 8+N) with those 8 digits read as the
	 * placeholder; header_crc_stored the 8 digits as written (when hex). */
	int header_crc_found;
	int header_crc_stored_ok;          /* the 8 digits are lowercase hex */
	uint32_t header_crc_stored, header_crc_computed;
};

/* Parses and checks the layout of a whole file held in memory (every rule of
 * the reference reader; no CRC). The fuzz target's entry point. */
enum dt_status dt_st_parse(const void *bytes, size_t len, struct dt_st_file **out, struct dt_err *err) DT_MUST_CHECK;
/* The same from a file: reads only the 8 + N header bytes. */
enum dt_status dt_st_open(const char *path, struct dt_st_file **out, struct dt_err *err) DT_MUST_CHECK;
void dt_st_free(struct dt_st_file *f);
/* The value of metadata `key`, or NULL. */
const char *dt_st_meta(const struct dt_st_file *f, const char *key);
/* The tensor named `name`, or NULL. */
const struct dt_st_tensor_info *dt_st_find(const struct dt_st_file *f, const char *name);

/* What tensor `name` of f is, for `ckpt inspect`: "step" (global_step),
 * "slot" (an optimizer slot of another tensor), else its variable's kind
 * from the non_trainable metadata (nn/model.h's dt_var_kind_name), and
 * "trainable" for the variables not named there. */
const char *dt_ckpt_tensor_kind(const struct dt_st_file *f, const char *name);

/* Checks that `f` is a dtrain checkpoint (format, global_step, crc32c keys),
 * that its header checksum matches (format v2; a v1 file has none), that its
 * model_signature matches its own variables (the tensors other than
 * global_step and optimizer slots), and that the CRC-32C of its byte buffer
 * matches, reading the data from `path` (or from `bytes` when not NULL: the
 * whole file in memory). */
enum dt_status dt_ckpt_verify(const struct dt_st_file *f, const void *bytes, struct dt_err *err) DT_MUST_CHECK;
/* Only the header: format, header checksum, global_step key and tensor.
 * What the loader checks before believing any name, shape or value. */
enum dt_status dt_ckpt_check_header(const struct dt_st_file *f, struct dt_err *err) DT_MUST_CHECK;

/* The header checksum of a file's first 8 + N bytes `head` (len >= 8):
 * *found = 1 and *crc as header_crc32c defines it when the header holds
 * "header_crc32c":"<8 bytes>" exactly once (*at: the offset of the 8
 * bytes in head), else *found = 0. The writer seals a header with it;
 * tests use it to forge well-sealed headers. */
void dt_st_header_crc(const void *head, size_t len, int *found, size_t *at, uint32_t *crc);

/* Builds a safetensors header (the 8-byte length and the space-padded JSON)
 * for tensors laid out in the given order with the given metadata (in the
 * given order); the writer's primitive, exposed for the golden-bytes test.
 * `*out` is heap memory the caller frees. */
struct dt_st_tensor_desc {
	const char *name;
	enum dt_st_dtype dtype;
	int ndim;
	const int64_t *shape;
	uint64_t nbytes;
};
enum dt_status dt_st_build_header(const struct dt_st_tensor_desc *t, int n, const struct dt_ckpt_kv *meta,
				  int num_meta, char **out, size_t *out_len, struct dt_err *err) DT_MUST_CHECK;

/* ---- the saver: when to save, and the log line ---- */

struct dt_saver {
	char *dir;                         /* owned */
	int64_t every_steps;               /* > 0: save by steps */
	double every_secs;                 /* > 0: save by time */
	int keep_max;
	int64_t last_step;                 /* step of the last save (or restore) */
	int64_t last_ns;                   /* monotonic time of it */
};

/* TensorFlow's RunConfig rules: steps and secs are exclusive (both > 0 →
 * DT_USAGE); neither set → every 600 seconds; keep_max >= 0. Creates dir
 * (DT_IO when it cannot, or cannot be written). */
enum dt_status dt_saver_init(struct dt_saver *s, const char *dir, int64_t every_steps, double every_secs,
			     int keep_max, struct dt_err *err) DT_MUST_CHECK;
void dt_saver_release(struct dt_saver *s);
/* Marks `step` as saved now (after a restore, so the cadence counts from it). */
void dt_saver_mark(struct dt_saver *s, int64_t step);
/* True when a checkpoint is due at `step` (after that step's update). */
int dt_saver_due(const struct dt_saver *s, int64_t step);
/* Saves (dt_ckpt_save with s's dir and keep_max), logs
 * "saved checkpoint for step N to PATH (X MiB, Y ms)" and marks the step. */
enum dt_status dt_saver_save(struct dt_saver *s, const struct dt_ckpt_contents *c, struct dt_err *err) DT_MUST_CHECK;

#endif
