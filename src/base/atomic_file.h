/*
 * atomic_file.h — durable, all-or-nothing file writes.
 *
 * A file is written to "<path>.tmp.<pid>" in the same directory, flushed,
 * fsynced, renamed over <path>, and the directory is fsynced, so a reader
 * (or a crash) sees either the old file or the complete new one, never a
 * half-written one (redis's rdbSave). Every step's failure is reported
 * with the step and the path; on any failure the temporary file is removed.
 *
 * Usage:
 *     struct dt_atomic_file f;
 *     if ((st = dt_atomic_file_open(&f, path, err))) return st;
 *     if ((st = dt_atomic_file_write(&f, buf, n, err))) { dt_atomic_file_abort(&f); return st; }
 *     return dt_atomic_file_commit(&f, err);   // releases f either way
 */
#ifndef DT_BASE_ATOMIC_FILE_H
#define DT_BASE_ATOMIC_FILE_H

#include <stddef.h>
#include "base/err.h"

struct dt_atomic_file {
	int fd;
	char *path;     /* final name, owned */
	char *tmp_path; /* temporary name, owned */
};

enum dt_status dt_atomic_file_open(struct dt_atomic_file *f, const char *path, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_atomic_file_write(struct dt_atomic_file *f, const void *data, size_t len, struct dt_err *err) DT_MUST_CHECK;
/* fsync, rename, fsync the directory; releases `f` whether or not it succeeds. */
enum dt_status dt_atomic_file_commit(struct dt_atomic_file *f, struct dt_err *err) DT_MUST_CHECK;
/* Removes the temporary file and releases `f`; safe after a failed open. */
void dt_atomic_file_abort(struct dt_atomic_file *f);

/* One call for a whole buffer. */
enum dt_status dt_write_file_atomic(const char *path, const void *data, size_t len, struct dt_err *err) DT_MUST_CHECK;

/* fsyncs the directory that holds `path` (after a rename or unlink in it). */
enum dt_status dt_fsync_parent_dir(const char *path, struct dt_err *err) DT_MUST_CHECK;

/* Reads a whole file into a NUL-terminated heap buffer (caller frees);
 * refuses files larger than max_bytes. */
enum dt_status dt_read_file(const char *path, size_t max_bytes, char **out, size_t *len, struct dt_err *err) DT_MUST_CHECK;

#endif
