/* Unit tests for stragglers named (issue 40 part 3): the progress file's
 * step_time (base/progress.h key 7: this task's own seconds per step over
 * the window, with a fake clock; notes and ring updates are no steps), and
 * launch/state.h's dt_exp_stragglers: the running trainers' median, the
 * slowest named with its ratio, stale files, the ps and the evaluator left
 * out, and the line `status` and `monitor` print. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/progress.h"
#include "dt_test.h"
#include "launch/state.h"

DT_TEST(stragglers, step_time_is_the_tasks_own_seconds_per_step)
{
	char path[600];
	dt_test_path(path, sizeof(path), "p");
	struct dt_progress_writer w;
	dt_progress_writer_init(&w, path);
	double t0 = 1.7e9;
	/* Each of this task's steps takes 0.25 s, while the global step (moved by
	 * other trainers too) advances 10 per call: the rate is the global one,
	 * the step time this task's. */
	for (int i = 0; i <= 40; i++)
		(void)dt_progress_writer_step(&w, 10 * i, 0, t0 + 0.25 * i);
	DT_CHECK_NEAR(dt_progress_writer_step_time(&w), 0.25, 1e-9);
	DT_CHECK_NEAR(dt_progress_writer_rate(&w), 40, 1e-9);
	/* An evaluation note is no step of this task. */
	DT_CHECK_INT_EQ(dt_progress_writer_note(&w, "eval", t0 + 10.1), 1);
	struct dt_progress p;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_progress_read(path, &p, &err), &err);
	DT_CHECK_NEAR(p.step_time, 0.25, 1e-6);
	DT_CHECK_INT_EQ(p.step, 400);
	/* The step time follows a slow-down within the window. */
	for (int i = 1; i <= 12; i++)
		(void)dt_progress_writer_step(&w, 400 + i, 0, t0 + 10 + 1.0 * i);
	DT_CHECK_NEAR(dt_progress_writer_step_time(&w), 1.0, 1e-9);
	DT_CHECK_OK(dt_progress_read(path, &p, &err), &err);
	DT_CHECK_NEAR(p.step_time, 1.0, 1e-6);
	/* One sample, or a file without the key: unknown (0). */
	dt_progress_writer_init(&w, path);
	DT_CHECK_INT_EQ(dt_progress_writer_step(&w, 1, 0, t0), 1);
	DT_CHECK_OK(dt_progress_read(path, &p, &err), &err);
	DT_CHECK(p.step_time == 0);
}

/* Writes task `name`'s progress file with its step time, stamped `time`. */
static void put(const struct dt_exp *e, const char *name, double step_time, double time)
{
	char path[700], text[200];
	dt_exp_progress_path(e, name, path, sizeof(path));
	int n = snprintf(text, sizeof(text), "step 100\ntotal 1000\ntime %.3f\nrate 10\nstep_time %.6f\n", time,
			 step_time);
	dt_test_write_file(path, text, (size_t)n);
}

DT_TEST(stragglers, the_slowest_trainer_is_named_with_its_ratio_to_the_median)
{
	struct dt_exp e;
	memset(&e, 0, sizeof(e));
	snprintf(e.dir, sizeof(e.dir), "%s", dt_test_tmpdir());
	char dir[700];
	snprintf(dir, sizeof(dir), "%s/progress", e.dir);
	DT_CHECK(mkdir(dir, 0755) == 0);
	struct dt_exp_task tasks[6] = {
		{ .name = "ps.0", .state = DT_TS_RUNNING },       { .name = "chief", .state = DT_TS_RUNNING },
		{ .name = "worker.0", .state = DT_TS_RUNNING },   { .name = "worker.1", .state = DT_TS_RUNNING },
		{ .name = "worker.2", .state = DT_TS_RUNNING },   { .name = "evaluator", .state = DT_TS_RUNNING },
	};
	e.tasks = tasks;
	e.ntasks = 6;
	double now = 1000;
	put(&e, "ps.0", 9.0, now);      /* not a trainer */
	put(&e, "evaluator", 9.0, now); /* not a trainer */
	put(&e, "chief", 0.100, now);
	put(&e, "worker.0", 0.110, now - 1);
	put(&e, "worker.1", 0.190, now);
	put(&e, "worker.2", 0.120, now - DT_PROGRESS_WINDOW_S - 1); /* stale: left out */
	struct dt_exp_stragglers s;
	dt_exp_stragglers(&e, now, &s);
	DT_CHECK_INT_EQ(s.n, 3);
	DT_CHECK_NEAR(s.median_s, 0.110, 1e-9);
	DT_CHECK_STR_EQ(s.slowest, "worker.1");
	DT_CHECK_NEAR(s.slowest_s, 0.190, 1e-9);
	DT_CHECK_NEAR(s.ratio, 0.190 / 0.110, 1e-9);
	char line[512];
	dt_exp_stragglers_line(&e, now, line, sizeof(line));
	DT_CHECK_STR_EQ(line, "step time: chief 0.100 s, worker.0 0.110 s, worker.1 0.190 s; "
			      "slowest worker.1: 1.73x the median 0.110 s");

	/* An even count: the median is the mean of the middle two. */
	put(&e, "worker.2", 0.120, now);
	dt_exp_stragglers(&e, now, &s);
	DT_CHECK_INT_EQ(s.n, 4);
	DT_CHECK_NEAR(s.median_s, 0.115, 1e-9);
	/* A task that ended is no straggler; one trainer left names nobody. */
	tasks[2].state = tasks[3].state = tasks[4].state = DT_TS_FINISHED;
	dt_exp_stragglers(&e, now, &s);
	DT_CHECK_INT_EQ(s.n, 1);
	DT_CHECK_STR_EQ(s.slowest, "");
	dt_exp_stragglers_line(&e, now, line, sizeof(line));
	DT_CHECK_STR_EQ(line, "step time: chief 0.100 s");
	tasks[1].state = DT_TS_FINISHED;
	dt_exp_stragglers_line(&e, now, line, sizeof(line));
	DT_CHECK_STR_EQ(line, "");
}

DT_TEST(stragglers, the_slow_step_knob_names_tasks_exactly)
{
	const char *spec = "chief:10,worker.1:40,worker.10:5";
	DT_CHECK_NEAR(dt_progress_slow_step_s(spec, "chief"), 0.010, 1e-12);
	DT_CHECK_NEAR(dt_progress_slow_step_s(spec, "worker.1"), 0.040, 1e-12);
	DT_CHECK_NEAR(dt_progress_slow_step_s(spec, "worker.10"), 0.005, 1e-12);
	DT_CHECK(dt_progress_slow_step_s(spec, "worker.0") == 0);
	DT_CHECK(dt_progress_slow_step_s(spec, "") == 0);
	DT_CHECK(dt_progress_slow_step_s(NULL, "chief") == 0);
	DT_CHECK(dt_progress_slow_step_s("chief:-3,worker.0:x", "chief") == 0);
	DT_CHECK(dt_progress_slow_step_s("chief:-3,worker.0:x", "worker.0") == 0);
}
