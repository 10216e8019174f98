#include "train/events.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/crc32c.h"
#include "net/bytes.h"

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

/* Field numbers (tensorflow/core/util/event.proto, summary.proto, tensor.proto). */
enum {
	EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5,
	SUMMARY_VALUE = 1,
	VALUE_TAG = 1, VALUE_SIMPLE_VALUE = 2, VALUE_TENSOR = 8, VALUE_METADATA = 9,
	TENSOR_DTYPE = 1, TENSOR_SHAPE = 2, TENSOR_CONTENT = 4, TENSOR_FLOAT_VAL = 5,
	METADATA_PLUGIN_DATA = 1, METADATA_DATA_CLASS = 4,
	PLUGIN_NAME = 1, PLUGIN_CONTENT = 2,
};
enum { DT_FLOAT_TYPE = 1, DATA_CLASS_SCALAR = 1 };

#define FILE_VERSION "brain.Event:2"

static void reserve(struct dt_pb *b, size_t more)
{
	if (b->cap - b->len >= more)
		return;
	size_t cap = b->cap ? b->cap : 64;
	while (cap - b->len < more)
		cap *= 2;
	b->data = dt_xrealloc(b->data, cap);
	b->cap = cap;
}

void dt_pb_release(struct dt_pb *b)
{
	if (!b)
		return;
	free(b->data);
	*b = (struct dt_pb){ 0 };
}

void dt_pb_bytes(struct dt_pb *b, const void *p, size_t n)
{
	if (n == 0)
		return;
	reserve(b, n);
	memcpy(b->data + b->len, p, n);
	b->len += n;
}

void dt_pb_varint(struct dt_pb *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;
	while (v >= 0x80) {
		tmp[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	tmp[n++] = (uint8_t)v;
	dt_pb_bytes(b, tmp, n);
}

void dt_pb_key(struct dt_pb *b, unsigned field, unsigned wire_type)
{
	dt_pb_varint(b, (uint64_t)field << 3 | wire_type);
}

void dt_pb_field_varint(struct dt_pb *b, unsigned field, uint64_t v)
{
	dt_pb_key(b, field, WIRE_VARINT);
	dt_pb_varint(b, v);
}

void dt_pb_field_double(struct dt_pb *b, unsigned field, double v)
{
	uint64_t bits;
	memcpy(&bits, &v, sizeof(bits));
	uint8_t tmp[8];
	dt_put_u64le(tmp, bits);
	dt_pb_key(b, field, WIRE_FIXED64);
	dt_pb_bytes(b, tmp, sizeof(tmp));
}

void dt_pb_field_float(struct dt_pb *b, unsigned field, float v)
{
	uint32_t bits;
	memcpy(&bits, &v, sizeof(bits));
	uint8_t tmp[4];
	dt_put_u32le(tmp, bits);
	dt_pb_key(b, field, WIRE_FIXED32);
	dt_pb_bytes(b, tmp, sizeof(tmp));
}

void dt_pb_field_bytes(struct dt_pb *b, unsigned field, const void *p, size_t n)
{
	dt_pb_key(b, field, WIRE_LEN);
	dt_pb_varint(b, n);
	dt_pb_bytes(b, p, n);
}

/* Appends an embedded message held in `inner` as field `field`, and empties `inner`. */
static void put_message(struct dt_pb *b, unsigned field, struct dt_pb *inner)
{
	dt_pb_field_bytes(b, field, inner->data, inner->len);
	inner->len = 0;
}

/* Event fields 1 and 2 (step only when non-zero, as proto3 does). */
static void put_event_head(struct dt_pb *b, double wall_time, int64_t step)
{
	dt_pb_field_double(b, EVENT_WALL_TIME, wall_time);
	if (step != 0)
		dt_pb_field_varint(b, EVENT_STEP, (uint64_t)step);
}

void dt_events_encode_file_version(struct dt_pb *b, double wall_time)
{
	put_event_head(b, wall_time, 0);
	dt_pb_field_bytes(b, EVENT_FILE_VERSION, FILE_VERSION, strlen(FILE_VERSION));
}

/* One Summary.Value (TF2: a rank-0 DT_FLOAT tensor with the scalars plugin). */
static void put_value(struct dt_pb *value, const struct dt_scalar *s, enum dt_events_style style)
{
	dt_pb_field_bytes(value, VALUE_TAG, s->tag, strlen(s->tag));
	if (style == DT_EVENTS_TF1) {
		dt_pb_field_float(value, VALUE_SIMPLE_VALUE, s->value);
		return;
	}
	uint32_t bits;
	memcpy(&bits, &s->value, sizeof(bits));
	uint8_t content[4];
	dt_put_u32le(content, bits);
	struct dt_pb t = { 0 };
	dt_pb_field_varint(&t, TENSOR_DTYPE, DT_FLOAT_TYPE);
	dt_pb_field_bytes(&t, TENSOR_SHAPE, NULL, 0);
	dt_pb_field_bytes(&t, TENSOR_CONTENT, content, sizeof(content));
	put_message(value, VALUE_TENSOR, &t);

	struct dt_pb plugin = { 0 };
	dt_pb_field_bytes(&plugin, PLUGIN_NAME, "scalars", 7);
	dt_pb_field_bytes(&t, METADATA_PLUGIN_DATA, plugin.data, plugin.len);
	dt_pb_field_varint(&t, METADATA_DATA_CLASS, DATA_CLASS_SCALAR);
	put_message(value, VALUE_METADATA, &t);
	dt_pb_release(&plugin);
	dt_pb_release(&t);
}

void dt_events_encode_scalars(struct dt_pb *b, double wall_time, int64_t step, const struct dt_scalar *v, size_t n,
			      enum dt_events_style style)
{
	struct dt_pb summary = { 0 }, value = { 0 };
	for (size_t i = 0; i < n; i++) {
		put_value(&value, &v[i], style);
		put_message(&summary, SUMMARY_VALUE, &value);
	}
	put_event_head(b, wall_time, step);
	put_message(b, EVENT_SUMMARY, &summary);
	dt_pb_release(&value);
	dt_pb_release(&summary);
}

void dt_events_encode_plugin(struct dt_pb *b, double wall_time, int64_t step, const char *tag, const char *plugin,
			     const void *content, size_t n)
{
	struct dt_pb summary = { 0 }, value = { 0 }, t = { 0 }, pd = { 0 };
	dt_pb_field_bytes(&value, VALUE_TAG, tag, strlen(tag));
	/* tf.make_tensor_proto(0.0): readers that need a tensor get one. */
	static const uint8_t zero[4] = { 0 };
	dt_pb_field_varint(&t, TENSOR_DTYPE, DT_FLOAT_TYPE);
	dt_pb_field_bytes(&t, TENSOR_SHAPE, NULL, 0);
	dt_pb_field_bytes(&t, TENSOR_FLOAT_VAL, zero, sizeof(zero)); /* packed: one float */
	put_message(&value, VALUE_TENSOR, &t);
	dt_pb_field_bytes(&pd, PLUGIN_NAME, plugin, strlen(plugin));
	dt_pb_field_bytes(&pd, PLUGIN_CONTENT, content, n);
	put_message(&t, METADATA_PLUGIN_DATA, &pd);
	put_message(&value, VALUE_METADATA, &t);
	put_message(&summary, SUMMARY_VALUE, &value);
	put_event_head(b, wall_time, step);
	put_message(b, EVENT_SUMMARY, &summary);
	dt_pb_release(&summary);
	dt_pb_release(&value);
	dt_pb_release(&t);
	dt_pb_release(&pd);
}

void dt_events_frame(struct dt_pb *b, const void *data, size_t n)
{
	uint8_t head[12], foot[4];
	dt_put_u64le(head, (uint64_t)n);
	dt_put_u32le(head + 8, dt_crc32c_mask(dt_crc32c(head, 8)));
	dt_put_u32le(foot, dt_crc32c_mask(dt_crc32c(data, n)));
	dt_pb_bytes(b, head, sizeof(head));
	dt_pb_bytes(b, data, n);
	dt_pb_bytes(b, foot, sizeof(foot));
}

struct dt_events {
	int fd;
	char *path;
	off_t size;          /* bytes of whole records written */
	struct dt_pb event;  /* scratch: the serialized Event */
	struct dt_pb record; /* scratch: the framed record */
};

enum dt_status dt_events_make_dirs(const char *dir, struct dt_err *err)
{
	char *p = dt_xstrdup(dir);
	size_t len = strlen(p);
	enum dt_status st = DT_OK;
	for (size_t i = 1; i <= len && !st; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		char c = p[i];
		p[i] = '\0';
		struct stat sb;
		if (mkdir(p, 0777) != 0 && errno != EEXIST)
			st = dt_err_set(err, DT_IO, "cannot create directory '%s': %s", p, strerror(errno));
		else if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
			st = dt_err_set(err, DT_IO, "cannot create directory '%s': a file of that name is in the way", p);
		p[i] = c;
	}
	free(p);
	return st;
}

/* Hostname with anything but [A-Za-z0-9._-] replaced by '_' (it goes into a file name). */
static void host_name(char *buf, size_t cap)
{
	if (gethostname(buf, cap) != 0 || !buf[0])
		snprintf(buf, cap, "localhost");
	buf[cap - 1] = '\0';
	for (char *c = buf; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
		      *c == '-' || *c == '_'))
			*c = '_';
}

/* Writes all of b with write(2), retrying short writes; on failure truncates
 * the file back to the last whole record. */
static enum dt_status write_record(struct dt_events *w, const struct dt_pb *b, struct dt_err *err)
{
	size_t done = 0;
	while (done < b->len) {
		ssize_t n = write(w->fd, b->data + done, b->len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;
			if (ftruncate(w->fd, w->size) != 0 || lseek(w->fd, w->size, SEEK_SET) < 0)
				dt_err_set(err, DT_IO, "cannot write event file '%s' (%zu of %zu bytes written): %s; "
						       "and cannot truncate the partial record: %s",
					   w->path, done, b->len, strerror(e), strerror(errno));
			else
				dt_err_set(err, DT_IO, "cannot write event file '%s' (%zu of %zu bytes written): %s",
					   w->path, done, b->len, strerror(e));
			return DT_IO;
		}
		done += (size_t)n;
	}
	w->size += (off_t)b->len;
	return DT_OK;
}

/* Frames w->event into w->record and writes it. */
static enum dt_status write_event(struct dt_events *w, struct dt_err *err)
{
	w->record.len = 0;
	dt_events_frame(&w->record, w->event.data, w->event.len);
	return write_record(w, &w->record, err);
}

enum dt_status dt_events_open(const char *dir, struct dt_events **out, struct dt_err *err)
{
	*out = NULL;
	enum dt_status st = dt_events_make_dirs(dir, err);
	if (st)
		return st;
	char host[128];
	host_name(host, sizeof(host));
	double now = dt_wall_seconds();
	struct dt_events *w = dt_xcalloc(1, sizeof(*w));
	w->fd = -1;
	size_t cap = strlen(dir) + strlen(host) + 96;
	w->path = dt_xmalloc(cap);
	/* Another writer of this process may have opened a file in the same second. */
	for (int attempt = 0; attempt < 100 && w->fd < 0; attempt++) {
		int n = snprintf(w->path, cap, "%s/events.out.tfevents.%010lld.%s.%ld", dir, (long long)now, host,
				 (long)getpid());
		if (attempt > 0)
			snprintf(w->path + n, cap - (size_t)n, ".%d", attempt);
		w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (w->fd < 0 && errno != EEXIST)
			break;
	}
	if (w->fd < 0) {
		st = dt_err_set(err, DT_IO, "cannot create event file '%s': %s", w->path, strerror(errno));
		dt_events_free(w);
		return st;
	}
	dt_events_encode_file_version(&w->event, now);
	if ((st = write_event(w, err))) {
		dt_events_free(w);
		return st;
	}
	*out = w;
	return DT_OK;
}

enum dt_status dt_events_write_scalars(struct dt_events *w, int64_t step, const struct dt_scalar *v, size_t n,
				       struct dt_err *err)
{
	w->event.len = 0;
	dt_events_encode_scalars(&w->event, dt_wall_seconds(), step, v, n, DT_EVENTS_TF2);
	return write_event(w, err);
}

enum dt_status dt_events_write_plugin(struct dt_events *w, int64_t step, const char *tag, const char *plugin,
				      const void *content, size_t n, struct dt_err *err)
{
	w->event.len = 0;
	dt_events_encode_plugin(&w->event, dt_wall_seconds(), step, tag, plugin, content, n);
	return write_event(w, err);
}

const char *dt_events_path(const struct dt_events *w)
{
	return w->path;
}

void dt_events_free(struct dt_events *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	free(w->path);
	dt_pb_release(&w->event);
	dt_pb_release(&w->record);
	free(w);
}
