/* libFuzzer target for the event-file reader (src/train/events_read.c):
 * TFRecord framing around hand-decoded Event protobufs.
 *
 * The input is a whole event file. dt_ev_parse either succeeds or fails
 * with DT_DATA and a message; either way what it read keeps the reader's
 * invariants: every series' steps strictly increase (the rewind rule),
 * each record read took at least 16 input bytes, at most one note (a
 * cut-short last record) and only on success, and tags are non-empty. The
 * same bytes read under a prefix give the same series under prefixed tags.
 * The input is also framed as one record (valid CRCs), so the protobuf
 * decoder sees every mutation, not only those that survive the CRCs.
 * Never a crash, an out-of-bounds read or a leak.
 * Run: make build-fuzz/fuzz_events_read && build-fuzz/fuzz_events_read tests/fuzz/corpus/fuzz_events_read */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "train/events.h"
#include "train/events_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const uint8_t *data, size_t size)
{
	struct dt_ev_run a, b;
	dt_ev_run_init(&a);
	dt_ev_run_init(&b);
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st = dt_ev_parse(&a, "fuzz", data, size, "", &err);
	if (st)
		DT_ASSERT(st == DT_DATA && err.msg[0] != '\0' && a.n_notes == 0);
	DT_ASSERT(a.n_notes <= 1);
	DT_ASSERT((size_t)a.records * 16 <= size);
	for (size_t i = 0; i < a.n_series; i++) {
		const struct dt_ev_series *s = &a.series[i];
		DT_ASSERT(s->tag[0] != '\0' && s->prefix_len == 0);
		for (size_t k = 1; k < s->n; k++)
			DT_ASSERT(s->step[k - 1] < s->step[k]);
	}
	enum dt_status st2 = dt_ev_parse(&b, "fuzz", data, size, "eval/", &err);
	DT_ASSERT(st2 == st && b.n_series == a.n_series && b.records == a.records);
	for (size_t i = 0; i < b.n_series; i++) {
		DT_ASSERT(b.series[i].prefix_len == 5 && strcmp(b.series[i].tag + 5, a.series[i].tag) == 0);
		DT_ASSERT(b.series[i].n == a.series[i].n);
	}
	dt_ev_run_release(&a);
	dt_ev_run_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check(data, size);
	struct dt_pb framed = { 0 };
	dt_events_frame(&framed, data, size);
	check(framed.data, framed.len);
	dt_pb_release(&framed);
	return 0;
}
