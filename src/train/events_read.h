/*
 * events_read.h — reading TensorBoard event files back: the scalars of a
 * run, for `dtrain report` (train/report.h).
 *
 * The byte layout is events.h's (TFRecord framing around `Event`
 * protobufs). This reader accepts what TensorBoard accepts for a scalar, so
 * it reads the files of older dtrain versions and of TensorFlow itself:
 *   1. a Summary.Value's `simple_value` (TF1), or
 *   2. its `tensor` when it is rank 0 (no dims) and DT_FLOAT (dtype 1) with
 *      4 bytes of tensor_content or one float_val, or DT_DOUBLE (dtype 2)
 *      with 8 bytes of content or one double_val (packed or not),
 *   3. and its metadata, when present, names no plugin or "scalars": the
 *      HParams plugin's values (`_hparams_/...`) and other plugins' are
 *      skipped, as are values of any other shape or type.
 * Unknown fields are skipped (proto3's rule); a protobuf that does not
 * parse inside a record whose CRCs match is an error.
 *
 * A run directory is read like TensorBoard's `--logdir`: its own event
 * files (name contains "tfevents", read in name order, which the writer's
 * timestamp makes chronological) are the run ".", with tags as written
 * ("loss"); each subdirectory one level down holding event files (`eval/`,
 * `eval_train/`, SUMMARIES.md) adds its tags under its name ("eval/loss").
 *
 * Step rewind (TensorBoard's purge rule): a point whose step is at or below
 * the last point of its tag drops the points at and after its step first,
 * so a chief restarted from a checkpoint (a new file from the restored step
 * on) leaves one clean curve.
 *
 * Errors: a path that does not exist or cannot be read is DT_IO; a
 * directory with no event file, a CRC mismatch or an undecodable Event is
 * DT_DATA, the message naming the file, the record index (from 0) and its
 * byte offset. A file that ends inside a record (the writer is still
 * running, or was killed mid-write) is read up to that record and a note
 * says so: it is not an error.
 *
 * Ownership: a `struct dt_ev_run` owns its series, tags, notes and dir
 * (dt_ev_run_release frees them; the struct itself is the caller's).
 */
#ifndef DT_TRAIN_EVENTS_READ_H
#define DT_TRAIN_EVENTS_READ_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Files above this size are refused (DT_DATA): a summary record is ~240
 * bytes, so this is millions of summary steps. */
#define DT_EV_FILE_MAX ((size_t)1 << 30)

/* One tag's points, in step order (after the rewind rule). */
struct dt_ev_series {
	char *tag;         /* "loss", "eval/accuracy" (owned) */
	size_t prefix_len; /* bytes of tag that name its subdirectory ("eval/": 5; 0 for the run's own) */
	size_t n, cap;
	int64_t *step;     /* (n) */
	double *wall_time; /* (n) seconds since the epoch */
	double *value;     /* (n) as written (NaN and infinities kept) */
};

/* The scalars of one run directory and what reading it found. */
struct dt_ev_run {
	char *dir;                   /* as given (owned) */
	struct dt_ev_series *series; /* (n_series) in order of first appearance */
	size_t n_series, cap_series;
	int files;                   /* event files read */
	int64_t records;             /* records read, file_version ones included */
	char **notes;                /* (n_notes) cut-short files and the like (owned) */
	size_t n_notes;
};

/* Empties `run` (zeroes it; nothing to free yet). */
void dt_ev_run_init(struct dt_ev_run *run);
/* Frees what `run` owns and zeroes it; accepts NULL. */
void dt_ev_run_release(struct dt_ev_run *run);

/* Parses the bytes of one event file (`name` for messages) and adds its
 * scalars to `run` with `prefix` before each tag ("" or "eval/"). A
 * cut-short last record adds a note. DT_DATA on a corrupt record; what was
 * read before it stays in `run`. */
enum dt_status dt_ev_parse(struct dt_ev_run *run, const char *name, const uint8_t *buf, size_t len,
			   const char *prefix, struct dt_err *err) DT_MUST_CHECK;
/* Reads the event file at `path` (dt_ev_parse). DT_IO when unreadable. */
enum dt_status dt_ev_read_file(struct dt_ev_run *run, const char *path, const char *prefix,
			       struct dt_err *err) DT_MUST_CHECK;
/* Reads the run directory `dir` and its subdirectories one level down
 * (see above) into `run` (initialized by the caller). DT_IO when `dir`
 * does not exist or is not a directory; DT_DATA when neither holds an
 * event file. */
enum dt_status dt_ev_read_run(struct dt_ev_run *run, const char *dir, struct dt_err *err) DT_MUST_CHECK;

/* The series tagged `tag`, or NULL. */
const struct dt_ev_series *dt_ev_find(const struct dt_ev_run *run, const char *tag);

#endif
