/* Unit tests for src/train/events: protobuf varints, the TFRecord framing
 * and masked CRCs against TensorBoard's golden vectors, byte-exact events
 * against the reference file (docs: /work/shared/reference/tfevents.md
 * §1.3 and §1.6), and the file writer (naming, whole records, truncation
 * back to the last whole record when a write fails). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_test.h"
#include "base/crc32c.h"
#include "train/events.h"

/* Fails unless b holds exactly the `n` bytes of `want`, naming the first difference. */
static void check_bytes(const char *what, const uint8_t *got, size_t got_len, const uint8_t *want, size_t n)
{
	size_t m = got_len < n ? got_len : n;
	for (size_t i = 0; i < m; i++)
		if (got[i] != want[i])
			dt_test_fail(__FILE__, __LINE__, "%s: byte %zu is 0x%02x, want 0x%02x", what, i, got[i], want[i]);
	if (got_len != n)
		dt_test_fail(__FILE__, __LINE__, "%s: %zu bytes, want %zu", what, got_len, n);
}

static void check_varint(uint64_t v, const uint8_t *want, size_t n)
{
	struct dt_pb b = { 0 };
	dt_pb_varint(&b, v);
	char what[64];
	snprintf(what, sizeof(what), "varint %llu", (unsigned long long)v);
	check_bytes(what, b.data, b.len, want, n);
	dt_pb_release(&b);
}

DT_TEST(events, varint_edge_cases)
{
	check_varint(0, (const uint8_t[]){ 0x00 }, 1);
	check_varint(1, (const uint8_t[]){ 0x01 }, 1);
	check_varint(127, (const uint8_t[]){ 0x7f }, 1);
	check_varint(128, (const uint8_t[]){ 0x80, 0x01 }, 2);
	check_varint(300, (const uint8_t[]){ 0xac, 0x02 }, 2); /* the protobuf docs' example */
	check_varint(16383, (const uint8_t[]){ 0xff, 0x7f }, 2);
	check_varint(16384, (const uint8_t[]){ 0x80, 0x80, 0x01 }, 3);
	check_varint(UINT32_MAX, (const uint8_t[]){ 0xff, 0xff, 0xff, 0xff, 0x0f }, 5);
	check_varint(1ull << 63, (const uint8_t[]){ 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01 }, 10);
	/* int64 -1 is its two's complement: ten bytes. */
	check_varint((uint64_t)(int64_t)-1, (const uint8_t[]){ 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01 },
		     10);

	struct dt_pb b = { 0 };
	dt_pb_key(&b, 1, 1);   /* Event.wall_time */
	dt_pb_key(&b, 2, 0);   /* Event.step */
	dt_pb_key(&b, 5, 2);   /* Event.summary */
	dt_pb_key(&b, 9, 2);   /* Value.metadata */
	dt_pb_key(&b, 16, 0);  /* first field number that needs two key bytes */
	check_bytes("keys", b.data, b.len, (const uint8_t[]){ 0x09, 0x10, 0x2a, 0x4a, 0x80, 0x01 }, 6);
	dt_pb_release(&b);
	dt_pb_release(NULL);
}

DT_TEST(events, masked_crc_golden_vectors)
{
	/* TensorBoard's masked_crc.rs / tf_record.rs. */
	const uint8_t len24[8] = { 0x18, 0, 0, 0, 0, 0, 0, 0 };
	DT_CHECK_UINT_EQ(dt_crc32c_mask(dt_crc32c(len24, 8)), 0x224B7FA3u);
	const char *crc_test = "\x1a\x11" "CRC test, one two";
	DT_CHECK_UINT_EQ(dt_crc32c_mask(dt_crc32c(crc_test, 19)), 0x5794D08Au);
	uint8_t zeros[32] = { 0 };
	DT_CHECK_UINT_EQ(dt_crc32c(zeros, 32), 0x8A9136AAu);
	DT_CHECK_UINT_EQ(dt_crc32c_mask(dt_crc32c(zeros, 32)), 0x0FD7FFFAu);
}

/* The 50-byte payload TF 2.x wrote for tf.summary.scalar("accuracy", 0.99, step=77). */
static const uint8_t tf_accuracy_payload[] = {
	0x09, 0xc4, 0x05, 0xb7, 0x3d, 0x99, 0xd6, 0xd7, 0x41, 0x10, 0x4d, 0x2a, 0x25, 0x0a, 0x23, 0x0a, 0x08,
	'a', 'c', 'c', 'u', 'r', 'a', 'c', 'y', 0x42, 0x0a, 0x08, 0x01, 0x12, 0x00, 0x22, 0x04, 0xa4, 0x70,
	0x7d, 0x3f, 0x4a, 0x0b, 0x0a, 0x09, 0x0a, 0x07, 's', 'c', 'a', 'l', 'a', 'r', 's',
};

DT_TEST(events, frame_matches_a_record_tensorflow_wrote)
{
	DT_CHECK_INT_EQ(sizeof(tf_accuracy_payload), 50);
	struct dt_pb b = { 0 };
	dt_events_frame(&b, tf_accuracy_payload, sizeof(tf_accuracy_payload));
	DT_CHECK_INT_EQ(b.len, 66);
	check_bytes("header", b.data, 12,
		    (const uint8_t[]){ 0x32, 0, 0, 0, 0, 0, 0, 0, 0x24, 0x19, 0x56, 0xec }, 12);
	check_bytes("payload", b.data + 12, 50, tf_accuracy_payload, 50);
	check_bytes("footer", b.data + 62, 4, (const uint8_t[]){ 0xa5, 0x5b, 0x64, 0x33 }, 4);
	dt_pb_release(&b);
}

/* The reference's 146-byte file (§1.6): file_version, TF1 loss, TF2 loss. */
static const uint8_t golden_file[] = {
	/* record 1: file_version at 1700000000.0 */
	0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22,
	0x09, 0x00, 0x00, 0x00, 0x40, 0xfc, 0x54, 0xd9, 0x41,
	0x1a, 0x0d, 'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2',
	0xec, 0xed, 0x8f, 0x9d,
	/* record 2: TF1 loss = 0.5 at step 77, 1700000001.5 */
	0x1a, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x9b, 0xd8, 0x2d,
	0x09, 0x00, 0x00, 0x60, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x10, 0x4d,
	0x2a, 0x0d, 0x0a, 0x0b, 0x0a, 0x04, 'l', 'o', 's', 's', 0x15, 0x00, 0x00, 0x00, 0x3f,
	0x7c, 0xc2, 0x4f, 0xd1,
	/* record 3: TF2 loss = 0.5 at step 77 */
	0x30, 0, 0, 0, 0, 0, 0, 0, 0x95, 0xf5, 0xd0, 0x5f,
	0x09, 0x00, 0x00, 0x60, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x10, 0x4d,
	0x2a, 0x23, 0x0a, 0x21,
	0x0a, 0x04, 'l', 'o', 's', 's',
	0x42, 0x0a, 0x08, 0x01, 0x12, 0x00, 0x22, 0x04, 0x00, 0x00, 0x00, 0x3f,
	0x4a, 0x0d, 0x0a, 0x09, 0x0a, 0x07, 's', 'c', 'a', 'l', 'a', 'r', 's', 0x20, 0x01,
	0xb3, 0x17, 0x24, 0xd7,
};

DT_TEST(events, encoder_reproduces_the_reference_file_byte_for_byte)
{
	DT_CHECK_INT_EQ(sizeof(golden_file), 146);
	struct dt_pb file = { 0 }, ev = { 0 };
	dt_events_encode_file_version(&ev, 1700000000.0);
	DT_CHECK_INT_EQ(ev.len, 24);
	dt_events_frame(&file, ev.data, ev.len);
	ev.len = 0;
	const struct dt_scalar loss = { "loss", 0.5f };
	dt_events_encode_scalars(&ev, 1700000001.5, 77, &loss, 1, DT_EVENTS_TF1);
	DT_CHECK_INT_EQ(ev.len, 26);
	dt_events_frame(&file, ev.data, ev.len);
	ev.len = 0;
	dt_events_encode_scalars(&ev, 1700000001.5, 77, &loss, 1, DT_EVENTS_TF2);
	DT_CHECK_INT_EQ(ev.len, 48);
	dt_events_frame(&file, ev.data, ev.len);
	check_bytes("event file", file.data, file.len, golden_file, sizeof(golden_file));
	dt_pb_release(&ev);
	dt_pb_release(&file);
}

DT_TEST(events, several_scalars_share_one_summary_and_step_zero_is_omitted)
{
	struct dt_pb ev = { 0 };
	const struct dt_scalar v[2] = { { "a", 1.0f }, { "bb", -2.0f } };
	dt_events_encode_scalars(&ev, 0.0, 0, v, 2, DT_EVENTS_TF2);
	/* wall_time (9 bytes), no step, summary key + length + two values. */
	DT_CHECK_UINT_EQ(ev.data[9], 0x2a);
	/* value 1: tag "a" (3) + tensor (12) + metadata (15) = 30 bytes; value 2: 31 bytes. */
	DT_CHECK_UINT_EQ(ev.data[10], 2 + 30 + 2 + 31);
	DT_CHECK_UINT_EQ(ev.data[11], 0x0a);
	DT_CHECK_UINT_EQ(ev.data[12], 30);
	DT_CHECK_UINT_EQ(ev.data[13 + 30], 0x0a);
	DT_CHECK_UINT_EQ(ev.data[14 + 30], 31);
	DT_CHECK_INT_EQ(ev.len, 11 + 2 + 30 + 2 + 31);
	/* -2.0f = 0xc0000000 little-endian in the second tensor_content. */
	const uint8_t neg2[] = { 0x22, 0x04, 0x00, 0x00, 0x00, 0xc0 };
	DT_CHECK(memmem(ev.data + 45, ev.len - 45, neg2, sizeof(neg2)) != NULL);
	dt_pb_release(&ev);
}

/* Reads a whole file (test fixture helper). */
static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	DT_CHECK(f != NULL);
	uint8_t *buf = malloc(1 << 16);
	*len = fread(buf, 1, 1 << 16, f);
	fclose(f);
	return buf;
}

/* Walks the records of a file, checking both CRCs; returns the record count
 * and fails on any truncated or corrupt record. */
static int count_records(const uint8_t *p, size_t len)
{
	int n = 0;
	size_t off = 0;
	while (off < len) {
		DT_CHECK(len - off >= 16);
		uint64_t dl = 0;
		for (int i = 7; i >= 0; i--)
			dl = dl << 8 | p[off + (size_t)i];
		DT_CHECK(dl <= len - off - 16);
		uint32_t lc = (uint32_t)p[off + 8] | (uint32_t)p[off + 9] << 8 | (uint32_t)p[off + 10] << 16 |
			      (uint32_t)p[off + 11] << 24;
		DT_CHECK_UINT_EQ(lc, dt_crc32c_mask(dt_crc32c(p + off, 8)));
		const uint8_t *f = p + off + 12 + dl;
		uint32_t dc = (uint32_t)f[0] | (uint32_t)f[1] << 8 | (uint32_t)f[2] << 16 | (uint32_t)f[3] << 24;
		DT_CHECK_UINT_EQ(dc, dt_crc32c_mask(dt_crc32c(p + off + 12, dl)));
		off += 16 + dl;
		n++;
	}
	return n;
}

DT_TEST(events, writer_names_files_and_writes_whole_records)
{
	char dir[512];
	dt_test_path(dir, sizeof(dir), "out/eval");
	struct dt_err err = DT_ERR_INIT;
	struct dt_events *w, *w2;
	DT_CHECK_OK(dt_events_open(dir, &w, &err), &err);
	const char *path = dt_events_path(w);
	char want[600];
	snprintf(want, sizeof(want), "%s/events.out.tfevents.", dir);
	DT_CHECK(strncmp(path, want, strlen(want)) == 0);
	char pid[32];
	snprintf(pid, sizeof(pid), ".%ld", (long)getpid());
	DT_CHECK_CONTAINS(path + strlen(want), pid);
	/* 10-digit seconds after the prefix. */
	for (int i = 0; i < 10; i++)
		DT_CHECK(path[strlen(want) + (size_t)i] >= '0' && path[strlen(want) + (size_t)i] <= '9');
	DT_CHECK_UINT_EQ(path[strlen(want) + 10], '.');

	const struct dt_scalar v[2] = { { "loss", 0.25f }, { "accuracy", 0.75f } };
	DT_CHECK_OK(dt_events_write_scalars(w, 100, v, 2, &err), &err);
	DT_CHECK_OK(dt_events_write_scalars(w, 200, v, 1, &err), &err);
	/* A second writer in the same directory (and likely the same second) gets its own file. */
	DT_CHECK_OK(dt_events_open(dir, &w2, &err), &err);
	DT_CHECK(strcmp(dt_events_path(w), dt_events_path(w2)) != 0);

	size_t len;
	uint8_t *buf = slurp(path, &len);
	DT_CHECK_INT_EQ(count_records(buf, len), 3);
	free(buf);
	buf = slurp(dt_events_path(w2), &len);
	DT_CHECK_INT_EQ(count_records(buf, len), 1);
	DT_CHECK_INT_EQ(len, 16 + 24);
	free(buf);
	dt_events_free(w);
	dt_events_free(w2);
	dt_events_free(NULL);
}

DT_TEST(events, a_failed_write_leaves_only_whole_records)
{
	char dir[512];
	dt_test_path(dir, sizeof(dir), "ev");
	struct dt_err err = DT_ERR_INIT;
	struct dt_events *w;
	DT_CHECK_OK(dt_events_open(dir, &w, &err), &err);
	const struct dt_scalar v = { "loss", 1.0f };
	DT_CHECK_OK(dt_events_write_scalars(w, 1, &v, 1, &err), &err);
	struct stat sb;
	DT_CHECK(stat(dt_events_path(w), &sb) == 0);
	off_t whole = sb.st_size;
	/* A file size limit just past the current end: the next record is cut
	 * short (EFBIG), as on a full disk. This test runs in its own process. */
	signal(SIGXFSZ, SIG_IGN);
	struct rlimit rl = { .rlim_cur = (rlim_t)whole + 10, .rlim_max = RLIM_INFINITY };
	DT_CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
	DT_CHECK_INT_EQ(dt_events_write_scalars(w, 2, &v, 1, &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, "cannot write event file '");
	DT_CHECK_CONTAINS(err.msg, "10 of 64 bytes written");
	DT_CHECK(stat(dt_events_path(w), &sb) == 0);
	DT_CHECK_INT_EQ(sb.st_size, whole);
	/* Once space is back, writing goes on after the last whole record. */
	rl.rlim_cur = RLIM_INFINITY;
	DT_CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
	DT_CHECK_OK(dt_events_write_scalars(w, 3, &v, 1, &err), &err);
	size_t len;
	uint8_t *buf = slurp(dt_events_path(w), &len);
	DT_CHECK_INT_EQ(count_records(buf, len), 3);
	free(buf);
	dt_events_free(w);
}

DT_TEST(events, make_dirs_creates_parents_and_names_what_is_in_the_way)
{
	char dir[512], file[512];
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_events_make_dirs(dt_test_path(dir, sizeof(dir), "a/b/c"), &err), &err);
	DT_CHECK_OK(dt_events_make_dirs(dir, &err), &err); /* exists: fine */
	struct stat sb;
	DT_CHECK(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode));
	dt_test_write_file(dt_test_path(file, sizeof(file), "f"), "x", 1);
	DT_CHECK_INT_EQ(dt_events_make_dirs(dt_test_path(dir, sizeof(dir), "f/eval"), &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, "cannot create directory '");
	DT_CHECK_CONTAINS(err.msg, "/f'");
}
