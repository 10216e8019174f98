/* `dtrain train --timeline=PATH` (base/trace.h) and `dtrain timeline merge`:
 * each task's spans, read back by an independent reader
 * (tests/tools/check_timeline.py, Python's json with exact decimals), nest
 * and never overlap on any thread; one process has every step's input wait,
 * forward, backward and halves, its checkpoint saves and evaluation; two
 * all-reduce workers' timelines, merged, show each gradient bucket's
 * collective overlapping in time on both (on one host the tasks share a
 * clock); parameter-server trainers show their rounds with the bytes they
 * moved. And a timeline that cannot be written is refused before the run. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "cluster_procs.h"
#include "dt_test.h"

#define TASK_WAIT_S 120.0

/* The checker's summary of `files` (NULL-terminated), parsed; NULL on failure. */
static json_t *check(const char *const *files)
{
	const char *argv[16] = { "/usr/bin/python3", "tests/tools/check_timeline.py" };
	int n = 2;
	for (int i = 0; files[i] && n < 15; i++)
		argv[n++] = files[i];
	argv[n] = NULL;
	struct dt_run r;
	dt_test_run(&r, argv, NULL, 60);
	if (r.exit_code != 0)
		fprintf(stderr, "check_timeline: %s%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	json_t *j = r.exit_code == 0 ? json_loads(r.out, 0, NULL) : NULL;
	DT_CHECK(j != NULL);
	dt_run_release(&r);
	return j;
}

static long long spans(json_t *sum, const char *task, const char *what)
{
	return json_integer_value(json_object_get(
		json_object_get(json_object_get(json_object_get(sum, "processes"), task), "spans"), what));
}

DT_TEST_TIMEOUT(timeline, one_process_every_step_nested, 120)
{
	char tl[512], dir[512], tflag[600], oflag[600];
	dt_test_path(tl, sizeof(tl), "local.json");
	dt_test_path(dir, sizeof(dir), "run");
	snprintf(tflag, sizeof(tflag), "--timeline=%s", tl);
	snprintf(oflag, sizeof(oflag), "--output_dir=%s", dir);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=lenet", "--problem=synthetic", "--train_steps=20",
					 "--save_checkpoints_steps=10", "--log_every=0", oflag, tflag, NULL },
		    NULL, TASK_WAIT_S);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	json_t *sum = check((const char *[]){ tl, NULL });
	const char *const every_step[] = { "input/next batch", "compute/forward", "compute/backward", "step/compute",
					   "step/apply" };
	for (size_t i = 0; i < sizeof(every_step) / sizeof(every_step[0]); i++)
		DT_CHECK_INT_EQ(spans(sum, "chief:0", every_step[i]), 20);
	DT_CHECK_INT_EQ(spans(sum, "chief:0", "checkpoint/save"), 2);
	DT_CHECK_INT_EQ(spans(sum, "chief:0", "evaluate/evaluation"), 1);
	DT_CHECK(spans(sum, "chief:0", "compute/forward (evaluation)") > 0);
	json_decref(sum);
}

/* Two workers by all-reduce (lenet: two gradient buckets), their timelines
 * merged: the same collective is in flight on both at once. */
DT_TEST_TIMEOUT(timeline, allreduce_buckets_overlap_across_the_workers, 180)
{
	char tl[2][512], tflag[2][600], merged[512], mflag[600];
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	for (int i = 0; i < 2; i++) {
		char name[32];
		snprintf(name, sizeof(name), "worker%d.json", i);
		dt_test_path(tl[i], sizeof(tl[i]), name);
		snprintf(tflag[i], sizeof(tflag[i]), "--timeline=%s", tl[i]);
		const char *args[] = { "--model=lenet", "--problem=synthetic", "--train_steps=20", "--log_every=0",
				       "--noeval", "--connect_timeout=60", tflag[i], NULL };
		cluster_start_train(&c, "worker", i, args);
	}
	EXPECT_EXIT(&c, &c.tasks[0], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[1], 0, 60);
	dt_test_path(merged, sizeof(merged), "merged.json");
	snprintf(mflag, sizeof(mflag), "--to=%s", merged);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "timeline", "merge", mflag, tl[0], tl[1], NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "merged 2 timeline(s)");
	dt_run_release(&r);
	json_t *sum = check((const char *[]){ merged, NULL });
	json_t *b0 = json_object_get(json_object_get(sum, "buckets"), "worker:0");
	json_t *b1 = json_object_get(json_object_get(sum, "buckets"), "worker:1");
	DT_CHECK(json_array_size(b0) >= 20 && json_array_size(b0) == json_array_size(b1));
	size_t met = 0;
	for (size_t k = 0; k < json_array_size(b0) && k < json_array_size(b1); k++) {
		json_t *x = json_array_get(b0, k), *y = json_array_get(b1, k);
		const double xs = atof(json_string_value(json_array_get(x, 0))), xe = atof(json_string_value(json_array_get(x, 1)));
		const double ys = atof(json_string_value(json_array_get(y, 0))), ye = atof(json_string_value(json_array_get(y, 1)));
		met += xs <= ye && ys <= xe; /* a collective ends on neither before it began on both */
		DT_CHECK(json_integer_value(json_array_get(x, 2)) == json_integer_value(json_array_get(y, 2)));
	}
	DT_CHECK(met == json_array_size(b0));
	json_decref(sum);
}

/* A ps, the chief and a worker asynchronously: each trainer's rounds, with bytes. */
DT_TEST_TIMEOUT(timeline, ps_rounds_with_their_bytes, 180)
{
	char tl[2][512], tflag[2][600];
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	const char *ps_args[] = { "--model=mlp", "--problem=synthetic", "--train_steps=30", "--log_every=0", NULL };
	cluster_start_train(&c, "ps", 0, ps_args);
	const char *who[2] = { "worker", "chief" };
	for (int i = 0; i < 2; i++) {
		char name[32];
		snprintf(name, sizeof(name), "%s.json", who[i]);
		dt_test_path(tl[i], sizeof(tl[i]), name);
		snprintf(tflag[i], sizeof(tflag[i]), "--timeline=%s", tl[i]);
		const char *args[] = { "--model=mlp", "--problem=synthetic", "--train_steps=30", "--log_every=0",
				       "--noeval", "--connect_timeout=60", tflag[i], NULL };
		cluster_start_train(&c, who[i], 0, args);
	}
	EXPECT_EXIT(&c, &c.tasks[2], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[1], 0, 60);
	EXPECT_EXIT(&c, &c.tasks[0], 0, 60);
	json_t *sum = check((const char *[]){ tl[0], tl[1], NULL });
	json_t *rounds = json_object_get(json_object_get(sum, "rounds"), "chief:0");
	DT_CHECK(json_array_size(rounds) >= 1);
	for (size_t k = 0; k < json_array_size(rounds); k++) /* a push and a pull of mlp's 235,146 floats at least */
		DT_CHECK(json_integer_value(json_array_get(json_array_get(rounds, k), 2)) >= 2 * 235146 * 4);
	json_decref(sum);
}

DT_TEST(timeline, an_unwritable_path_is_refused_before_the_run)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=5",
					 "--timeline=/nonexistent/dir/t.json", NULL },
		    NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "cannot write the timeline '/nonexistent/dir/t.json'");
	DT_CHECK(!strstr(r.err, "trained"));
	dt_run_release(&r);
}
