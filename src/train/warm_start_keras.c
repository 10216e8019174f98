/*
 * warm_start_keras.c — a Keras 3 `.keras` archive as a warm-start source
 * (warm_start.h, item 5): a zip (Keras's saving_lib) holding
 * `metadata.json`, `config.json` (the topology, which --keras_model reads
 * from its own JSON) and `model.weights.h5` (Keras 3's .weights.h5 layout,
 * read by warm_start_h5.c). The zip is read with libarchive from memory;
 * the member's CRC-32 is checked as it is read, and a member or archive
 * cut short is an error, never a short file handed on.
 */
#include "train/warm_start.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

#define MEMBER "model.weights.h5"

enum dt_status dt__warm_keras_open(const void *bytes, size_t len, const char *path, struct dt__warm_source *s,
				   struct dt_err *err)
{
	memset(s, 0, sizeof(*s));
	struct archive *a = archive_read_new();
	if (!a)
		return dt_err_set(err, DT_NOMEM, "cannot read '%s': libarchive could not start", path);
	archive_read_support_format_zip(a);
	enum dt_status st = DT_OK;
	unsigned char *buf = NULL;
	size_t n = 0, cap = 0;
	int found = 0;
	if (archive_read_open_memory(a, bytes, len) != ARCHIVE_OK) {
		st = dt_err_set(err, DT_CKPT, "Keras archive '%s' is not a readable zip: %s", path,
				archive_error_string(a) ? archive_error_string(a) : "unknown error");
		goto out;
	}
	struct archive_entry *e;
	int r;
	while (!found && (r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *name = archive_entry_pathname(e);
		if (!name || strcmp(name, MEMBER) != 0)
			continue; /* the next header skips the member's data */
		found = 1;
		for (;;) {
			if (cap - n < 65536) {
				if (cap >= DT_WARM_MAX_FILE) {
					st = dt_err_set(err, DT_CKPT, "Keras archive '%s': %s is over 1 GiB", path, MEMBER);
					goto out;
				}
				cap = cap ? 2 * cap : 1 << 20;
				buf = dt_xrealloc(buf, cap);
			}
			la_ssize_t got = archive_read_data(a, buf + n, cap - n);
			if (got < 0) {
				st = dt_err_set(err, DT_CKPT, "Keras archive '%s': cannot read %s (truncated or damaged): %s",
						path, MEMBER, archive_error_string(a) ? archive_error_string(a) : "unknown error");
				goto out;
			}
			if (got == 0)
				break;
			n += (size_t)got;
		}
	}
	if (!found) {
		st = dt_err_set(err, DT_CKPT, "Keras archive '%s' has no %s (%s)", path, MEMBER,
				r == ARCHIVE_EOF ? "not in the archive"
						 : archive_error_string(a) ? archive_error_string(a) : "a damaged archive");
		goto out;
	}
	if ((st = dt__warm_h5_open(buf, n, path, s, err)))
		goto out;
	if (s->format != DT_WARM_KERAS3_H5) {
		dt__warm_source_release(s);
		st = dt_err_set(err, DT_CKPT, "Keras archive '%s': its %s is not in Keras 3's layout", path, MEMBER);
		goto out;
	}
	s->format = DT_WARM_KERAS_ARCHIVE;
out:
	archive_read_free(a);
	free(buf);
	return st;
}
