/* Unit tests for src/train/events_read: event files written by our writer
 * (events.h) read back exactly; every scalar form TensorBoard accepts
 * (simple_value, DT_FLOAT content or float_val, DT_DOUBLE); other plugins'
 * and non-scalar values skipped; a cut-short last record read up to it with
 * a note; corrupt records, missing and empty directories refused with the
 * file, record and offset named; the step-rewind rule across a restart;
 * subdirectories' tags under their names. The independent writer's files
 * (Google's protobuf runtime) are read in tests/cli/test_report.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_test.h"
#include "train/events.h"
#include "train/events_read.h"

/* Writes the framed events in `b` (a sequence of serialized Events, one per call of add) to path. */
struct file_builder {
	struct dt_pb out, ev;
};

static void add_event(struct file_builder *f)
{
	dt_events_frame(&f->out, f->ev.data, f->ev.len);
	f->ev.len = 0;
}

static void builder_release(struct file_builder *f)
{
	dt_pb_release(&f->out);
	dt_pb_release(&f->ev);
}

static void check_series(const struct dt_ev_run *run, const char *tag, size_t n, const int64_t *steps,
			 const double *values)
{
	const struct dt_ev_series *s = dt_ev_find(run, tag);
	if (!s)
		dt_test_fail(__FILE__, __LINE__, "no series '%s'", tag);
	DT_CHECK_INT_EQ(s->n, n);
	for (size_t i = 0; i < n; i++) {
		DT_CHECK_INT_EQ(s->step[i], steps[i]);
		DT_CHECK_NEAR(s->value[i], values[i], 1e-6);
	}
}

DT_TEST(events_read, reads_back_what_our_writer_wrote)
{
	char dir[512];
	dt_test_path(dir, sizeof(dir), "run");
	struct dt_err err = DT_ERR_INIT;
	struct dt_events *w, *we;
	DT_CHECK_OK(dt_events_open(dir, &w, &err), &err);
	char eval[600];
	snprintf(eval, sizeof(eval), "%s/eval", dir);
	DT_CHECK_OK(dt_events_open(eval, &we, &err), &err);
	const char hp[] = "\x12\x00";
	DT_CHECK_OK(dt_events_write_plugin(w, 0, "_hparams_/experiment", "hparams", hp, 2, &err), &err);
	for (int step = 10; step <= 30; step += 10) {
		const struct dt_scalar v[3] = { { "loss", 1.0f / (float)step }, { "learning_rate", 0.5f },
						{ "global_step/sec", (float)step * 2 } };
		DT_CHECK_OK(dt_events_write_scalars(w, step, v, 3, &err), &err);
	}
	const struct dt_scalar e = { "accuracy", 0.75f };
	DT_CHECK_OK(dt_events_write_scalars(we, 30, &e, 1, &err), &err);
	dt_events_free(w);
	dt_events_free(we);

	struct dt_ev_run run;
	dt_ev_run_init(&run);
	DT_CHECK_OK(dt_ev_read_run(&run, dir, &err), &err);
	DT_CHECK_INT_EQ(run.files, 2);
	DT_CHECK_INT_EQ(run.records, 1 + 1 + 3 + 1 + 1); /* file_version ×2, hparams, 3 steps, eval */
	DT_CHECK_INT_EQ(run.n_series, 4);                 /* no _hparams_ series */
	DT_CHECK_INT_EQ(run.n_notes, 0);
	check_series(&run, "loss", 3, (const int64_t[]){ 10, 20, 30 }, (const double[]){ 0.1, 0.05, 1.0 / 30 });
	check_series(&run, "learning_rate", 3, (const int64_t[]){ 10, 20, 30 }, (const double[]){ 0.5, 0.5, 0.5 });
	check_series(&run, "global_step/sec", 3, (const int64_t[]){ 10, 20, 30 }, (const double[]){ 20, 40, 60 });
	check_series(&run, "eval/accuracy", 1, (const int64_t[]){ 30 }, (const double[]){ 0.75 });
	DT_CHECK_INT_EQ(dt_ev_find(&run, "eval/accuracy")->prefix_len, 5);
	DT_CHECK_INT_EQ(dt_ev_find(&run, "loss")->prefix_len, 0);
	DT_CHECK(dt_ev_find(&run, "accuracy") == NULL);
	DT_CHECK(dt_ev_find(&run, "loss")->wall_time[0] > 1.6e9);
	dt_ev_run_release(&run);
	dt_ev_run_release(NULL);
}

DT_TEST(events_read, every_scalar_form_and_skips_the_rest)
{
	struct file_builder f = { 0 };
	dt_events_encode_file_version(&f.ev, 1.0);
	add_event(&f);
	const struct dt_scalar tf1 = { "tf1", 2.5f };
	dt_events_encode_scalars(&f.ev, 2.0, 7, &tf1, 1, DT_EVENTS_TF1);
	add_event(&f);

	/* Hand-built values: DT_DOUBLE double_val (packed), DT_FLOAT unpacked float_val, a rank-1 tensor. */
	struct dt_pb summary = { 0 }, value = { 0 }, t = { 0 }, shape = { 0 }, dim = { 0 }, packed = { 0 };
	dt_pb_field_bytes(&value, 1, "dbl", 3);
	dt_pb_field_varint(&t, 1, 2);
	double d = 0.125;
	uint8_t db[8];
	memcpy(db, &d, 8);
	dt_pb_field_bytes(&t, 6, db, 8);
	dt_pb_field_bytes(&value, 8, t.data, t.len);
	dt_pb_field_bytes(&summary, 1, value.data, value.len);
	value.len = t.len = 0;
	dt_pb_field_bytes(&value, 1, "unpacked", 8);
	dt_pb_field_varint(&t, 1, 1);
	dt_pb_field_float(&t, 5, 4.0f);
	dt_pb_field_bytes(&value, 8, t.data, t.len);
	dt_pb_field_bytes(&summary, 1, value.data, value.len);
	value.len = t.len = 0;
	dt_pb_field_bytes(&value, 1, "vec", 3);
	dt_pb_field_varint(&t, 1, 1);
	dt_pb_field_varint(&dim, 1, 2);
	dt_pb_field_bytes(&shape, 2, dim.data, dim.len);
	dt_pb_field_bytes(&t, 2, shape.data, shape.len);
	float two[2] = { 1, 2 };
	dt_pb_bytes(&packed, two, sizeof(two));
	dt_pb_field_bytes(&t, 5, packed.data, packed.len);
	dt_pb_field_bytes(&value, 8, t.data, t.len);
	dt_pb_field_bytes(&summary, 1, value.data, value.len);
	dt_pb_field_double(&f.ev, 1, 3.0);
	dt_pb_field_varint(&f.ev, 2, 8);
	dt_pb_field_varint(&f.ev, 15, 99); /* an unknown field: skipped */
	dt_pb_field_bytes(&f.ev, 5, summary.data, summary.len);
	add_event(&f);
	dt_events_encode_plugin(&f.ev, 4.0, 0, "_hparams_/session_end_info", "hparams", "\x2a\x00", 2);
	add_event(&f);

	struct dt_ev_run run;
	dt_ev_run_init(&run);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_ev_parse(&run, "mem", f.out.data, f.out.len, "", &err), &err);
	DT_CHECK_INT_EQ(run.records, 4);
	DT_CHECK_INT_EQ(run.n_series, 3);
	check_series(&run, "tf1", 1, (const int64_t[]){ 7 }, (const double[]){ 2.5 });
	check_series(&run, "dbl", 1, (const int64_t[]){ 8 }, (const double[]){ 0.125 });
	check_series(&run, "unpacked", 1, (const int64_t[]){ 8 }, (const double[]){ 4.0 });
	DT_CHECK(dt_ev_find(&run, "vec") == NULL);
	dt_ev_run_release(&run);
	dt_pb_release(&summary);
	dt_pb_release(&value);
	dt_pb_release(&t);
	dt_pb_release(&shape);
	dt_pb_release(&dim);
	dt_pb_release(&packed);
	builder_release(&f);
}

/* A file of the file_version record and `n` loss records at steps first.., valued base + step. */
static void loss_file(struct file_builder *f, int first, int n, int base)
{
	dt_events_encode_file_version(&f->ev, 1.0);
	add_event(f);
	for (int i = 0; i < n; i++) {
		const struct dt_scalar v = { "loss", (float)(base + first + i) };
		dt_events_encode_scalars(&f->ev, 2.0, first + i, &v, 1, DT_EVENTS_TF2);
		add_event(f);
	}
}

DT_TEST(events_read, a_cut_short_last_record_is_read_up_to_with_a_note)
{
	struct file_builder f = { 0 };
	loss_file(&f, 1, 3, 0);
	struct dt_err err = DT_ERR_INIT;
	/* Every cut inside the last record: in its header, its data, its data crc. */
	size_t last = f.out.len - 64, cuts[] = { 1, 11, 12, 30, 63 };
	DT_CHECK_INT_EQ(f.out.data[last + 0], 48); /* the last record is 48 + 16 bytes */
	for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
		struct dt_ev_run run;
		dt_ev_run_init(&run);
		DT_CHECK_OK(dt_ev_parse(&run, "f", f.out.data, last + cuts[c], "", &err), &err);
		DT_CHECK_INT_EQ(run.records, 3);
		DT_CHECK_INT_EQ(dt_ev_find(&run, "loss")->n, 2);
		DT_CHECK_INT_EQ(run.n_notes, 1);
		DT_CHECK_CONTAINS(run.notes[0], "'f' ends inside record 3");
		DT_CHECK_CONTAINS(run.notes[0], "read up to it");
		dt_ev_run_release(&run);
	}
	builder_release(&f);
}

DT_TEST(events_read, corrupt_records_are_refused_naming_file_record_and_offset)
{
	struct file_builder f = { 0 };
	loss_file(&f, 1, 2, 0);
	struct dt_err err = DT_ERR_INIT;
	size_t second = f.out.len - 64; /* record 2 starts here */
	struct dt_ev_run run;

	f.out.data[second + 40] ^= 1; /* its data */
	dt_ev_run_init(&run);
	DT_CHECK_INT_EQ(dt_ev_parse(&run, "x/ev", f.out.data, f.out.len, "", &err), DT_DATA);
	char want[128];
	snprintf(want, sizeof(want), "corrupt event file 'x/ev': record 2 at offset %zu: data crc mismatch", second);
	DT_CHECK_STR_EQ(err.msg, want);
	DT_CHECK_INT_EQ(dt_ev_find(&run, "loss")->n, 1); /* what came before stays */
	dt_ev_run_release(&run);
	f.out.data[second + 40] ^= 1;

	f.out.data[second + 2] ^= 1; /* its length */
	dt_ev_run_init(&run);
	DT_CHECK_INT_EQ(dt_ev_parse(&run, "x/ev", f.out.data, f.out.len, "", &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "record 2 at offset");
	DT_CHECK_CONTAINS(err.msg, "length crc mismatch");
	dt_ev_run_release(&run);
	builder_release(&f);

	/* Good framing around bytes that are no protobuf (a group's wire type). */
	struct dt_pb b = { 0 };
	const uint8_t junk[] = { 0x0b, 0x0c };
	dt_events_frame(&b, junk, sizeof(junk));
	dt_ev_run_init(&run);
	DT_CHECK_INT_EQ(dt_ev_parse(&run, "j", b.data, b.len, "", &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "corrupt event file 'j': record 0 at offset 0: its 2 bytes are not a valid Event");
	dt_ev_run_release(&run);
	dt_pb_release(&b);
}

DT_TEST(events_read, missing_empty_and_non_directories_are_named)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_ev_run run;
	char dir[512], file[600];
	dt_ev_run_init(&run);
	DT_CHECK_INT_EQ(dt_ev_read_run(&run, dt_test_path(dir, sizeof(dir), "nope"), &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, "cannot read run directory '");
	DT_CHECK_CONTAINS(err.msg, "No such file or directory");

	dt_test_path(dir, sizeof(dir), "empty");
	DT_CHECK(mkdir(dir, 0755) == 0);
	snprintf(file, sizeof(file), "%s/eval", dir);
	DT_CHECK(mkdir(file, 0755) == 0);
	snprintf(file, sizeof(file), "%s/hparams.json", dir);
	dt_test_write_file(file, "{}", 2);
	DT_CHECK_INT_EQ(dt_ev_read_run(&run, dir, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "no event file in '");
	DT_CHECK_CONTAINS(err.msg, "hint: give the --output_dir of a training run");

	DT_CHECK_INT_EQ(dt_ev_read_run(&run, file, &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, "is not a directory");
	dt_ev_run_release(&run);
}

DT_TEST(events_read, a_restart_rewinds_the_curve_and_files_read_in_name_order)
{
	/* The first process wrote steps 1..5, a restarted one from step 3 on:
	 * TensorBoard's rule keeps 1, 2 from the first and 3.. from the second. */
	char dir[512], path[600];
	dt_test_path(dir, sizeof(dir), "run");
	DT_CHECK(mkdir(dir, 0755) == 0);
	struct file_builder a = { 0 }, b = { 0 };
	loss_file(&a, 1, 5, 0);
	loss_file(&b, 3, 4, 100);
	snprintf(path, sizeof(path), "%s/events.out.tfevents.0000000002.h.2", dir);
	dt_test_write_file(path, b.out.data, b.out.len);
	snprintf(path, sizeof(path), "%s/events.out.tfevents.0000000001.h.1", dir);
	dt_test_write_file(path, a.out.data, a.out.len);
	snprintf(path, sizeof(path), "%s/notes.txt", dir); /* not an event file */
	dt_test_write_file(path, "x", 1);
	struct dt_ev_run run;
	dt_ev_run_init(&run);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_ev_read_run(&run, dir, &err), &err);
	DT_CHECK_INT_EQ(run.files, 2);
	check_series(&run, "loss", 6, (const int64_t[]){ 1, 2, 3, 4, 5, 6 }, (const double[]){ 1, 2, 103, 104, 105, 106 });
	DT_CHECK_INT_EQ(run.records, 6 + 5);
	dt_ev_run_release(&run);
	builder_release(&a);
	builder_release(&b);
}
