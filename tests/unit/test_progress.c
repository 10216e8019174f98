/* Unit tests for src/base/progress: the writer with a fake clock (at most
 * one rewrite a second, the rate over a sliding window of the step counter,
 * the last step written at once), the reader, and what `status` and
 * `monitor` derive from a file (launch/state.h: % done, stale rate, ETA). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/progress.h"
#include "dt_test.h"
#include "launch/state.h"

DT_TEST(progress, writer_rewrites_once_a_second_with_a_windowed_rate)
{
	char path[600];
	dt_test_path(path, sizeof(path), "p");
	struct dt_progress_writer w;
	dt_progress_writer_init(&w, path);
	double t0 = 1.7e9;
	DT_CHECK_INT_EQ(dt_progress_writer_step(&w, 1, 1000, t0), 1); /* the first step: at once */
	struct dt_progress p;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_progress_read(path, &p, &err), &err);
	DT_CHECK_INT_EQ(p.step, 1);
	DT_CHECK_INT_EQ(p.total, 1000);
	DT_CHECK(p.rate == 0); /* one sample: no rate yet */
	/* 50 steps/s for 3 s, one call per step: three rewrites, not 150. */
	int writes = 0;
	for (int i = 2; i <= 151; i++)
		writes += dt_progress_writer_step(&w, i, 1000, t0 + (i - 1) * 0.02);
	DT_CHECK(writes >= 2 && writes <= 3);
	DT_CHECK_OK(dt_progress_read(path, &p, &err), &err);
	DT_CHECK(p.step >= 100 && p.step <= 151);
	DT_CHECK(fabs(p.rate - 50) < 0.5);
	/* The rate follows a change within the window, not the run's mean. */
	int64_t step = 151;
	double t = t0 + 3.0;
	for (int i = 0; i < 2000; i++) {
		step += 2;
		t += 0.01; /* 200 steps/s */
		(void)dt_progress_writer_step(&w, step, 100000, t);
	}
	DT_CHECK(fabs(dt_progress_writer_rate(&w) - 200) < 2);
	/* A note is written at once and kept by later rewrites. */
	DT_CHECK_INT_EQ(dt_progress_writer_note(&w, "eval at global step 800: accuracy 0.8800", t), 1);
	(void)dt_progress_writer_step(&w, step + 300, 100000, t + 1.5);
	DT_CHECK_OK(dt_progress_read(path, &p, &err), &err);
	DT_CHECK_STR_EQ(p.note, "eval at global step 800: accuracy 0.8800");
	DT_CHECK_INT_EQ(p.step, step + 300);
	/* Reaching the total is written at once, whatever the second. */
	DT_CHECK_INT_EQ(dt_progress_writer_step(&w, 100000, 100000, t + 1.6), 1);
	/* A disabled writer writes nothing. */
	struct dt_progress_writer off;
	dt_progress_writer_init(&off, NULL);
	DT_CHECK_INT_EQ(dt_progress_writer_step(&off, 5, 10, t0), 0);
}

DT_TEST(progress, reader_refuses_a_file_without_step_or_time)
{
	char path[600];
	dt_test_path(path, sizeof(path), "bad");
	dt_test_write_file(path, "total 10\nrate 3\n", 16);
	struct dt_progress p;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_progress_read(path, &p, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "lacks its 'step' or 'time' line");
	dt_test_path(path, sizeof(path), "absent");
	DT_CHECK(dt_progress_read(path, &p, NULL) != DT_OK);
}

DT_TEST(progress, status_derives_done_eta_and_a_stale_rate)
{
	struct dt_exp e;
	memset(&e, 0, sizeof(e));
	snprintf(e.dir, sizeof(e.dir), "%s", dt_test_tmpdir());
	char dir[700], path[700];
	snprintf(dir, sizeof(dir), "%s/progress", e.dir);
	DT_CHECK(mkdir(dir, 0755) == 0);
	struct dt_exp_task tasks[2] = { { .name = "chief", .state = DT_TS_RUNNING },
					{ .name = "evaluator", .state = DT_TS_RUNNING } };
	e.tasks = tasks;
	e.ntasks = 2;
	dt_exp_progress_path(&e, "chief", path, sizeof(path));
	const char *text = "step 250\ntotal 1000\ntime 1000.0\nrate 50.0\n";
	dt_test_write_file(path, text, strlen(text));
	dt_exp_progress_path(&e, "evaluator", path, sizeof(path));
	text = "step 200\ntotal 1000\ntime 999.0\nrate 0\nnote eval at global step 200: accuracy 0.7000\n";
	dt_test_write_file(path, text, strlen(text));
	struct dt_exp_progress p;
	char note[300];
	dt_exp_progress(&e, 1001.0, &p, note, sizeof(note));
	DT_CHECK(p.have);
	DT_CHECK_INT_EQ(p.p.step, 250);
	DT_CHECK(fabs(p.pct - 25) < 1e-9);
	DT_CHECK(fabs(p.rate - 50) < 1e-9);
	DT_CHECK(fabs(p.eta_s - (750 / 50.0 - 1)) < 1e-9); /* the second since the file counts */
	DT_CHECK_STR_EQ(note, "eval at global step 200: accuracy 0.7000 (evaluator)");
	/* No step for longer than the window: no rate, no ETA. */
	dt_exp_progress(&e, 1000.0 + DT_PROGRESS_WINDOW_S + 1, &p, NULL, 0);
	DT_CHECK(p.rate == 0);
	DT_CHECK(p.eta_s < 0);
	char d[32];
	dt_progress_fmt_duration(d, sizeof(d), 3725);
	DT_CHECK_STR_EQ(d, "1h02m");
	dt_progress_fmt_duration(d, sizeof(d), 65);
	DT_CHECK_STR_EQ(d, "1m05s");
	dt_progress_fmt_duration(d, sizeof(d), -1);
	DT_CHECK_STR_EQ(d, "-");
}

/* The ring line (an elastic ring's members, `dtrain status` shows it): kept
 * across the step rewrites, one line, read back; absent, it reads as "". */
DT_TEST(progress, ring_line_round_trips_and_survives_step_rewrites)
{
	char path[600];
	dt_test_path(path, sizeof(path), "ring");
	struct dt_progress_writer w;
	dt_progress_writer_init(&w, path);
	struct dt_progress p;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_progress_writer_step(&w, 10, 100, 1000.0), 1);
	DT_CHECK_INT_EQ(dt_progress_read(path, &p, &err), DT_OK);
	DT_CHECK_STR_EQ(p.ring, "");
	DT_CHECK_INT_EQ(dt_progress_writer_ring(&w, "workers 0,2 (2 of 3); re-formed 1 time(s)\nsecond line", 1000.2), 1);
	DT_CHECK_INT_EQ(dt_progress_writer_step(&w, 20, 100, 1001.5), 1);
	DT_CHECK_INT_EQ(dt_progress_read(path, &p, &err), DT_OK);
	DT_CHECK_INT_EQ(p.step, 20);
	DT_CHECK_STR_EQ(p.ring, "workers 0,2 (2 of 3); re-formed 1 time(s)");
}
