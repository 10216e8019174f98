/* TensorBoard summaries and the evaluator, end to end: event files read back
 * by an independent reader (Google's protobuf runtime under /usr/bin/python3
 * with tests/tools/event.proto compiled by protoc into the test's temp dir),
 * the chief's run files, `--schedule=continuous_eval` against a training
 * run's output dir (its figures equal the chief's), checkpoints that are
 * half-written or missing under the evaluator, its timeout, and
 * `--schedule=train_and_evaluate` in one process. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster_procs.h"
#include "dt_test.h"

static void run(struct dt_run *r, const char *const *argv, const char *const *env)
{
	dt_test_run(r, argv, env, 120);
	DT_CHECK(!r->timed_out);
}

/* The directory holding event_pb2.py, compiled from tests/tools/event.proto;
 * skips the test when protoc or python3-protobuf is not installed
 * (scripts/install-deps.sh installs both). */
static const char *event_pb_dir(void)
{
	static char dir[512];
	if (dir[0])
		return dir;
	struct dt_run r;
	run(&r, (const char *[]){ "/bin/sh", "-c",
				  "command -v protoc >/dev/null && /usr/bin/python3 -c 'import google.protobuf'", NULL },
	    NULL);
	int have = r.exit_code == 0;
	dt_run_release(&r);
	if (!have)
		DT_SKIP("protoc or python3-protobuf missing (scripts/install-deps.sh installs them)");
	dt_test_path(dir, sizeof(dir), "pb");
	DT_CHECK(mkdir(dir, 0755) == 0);
	char out_flag[600];
	snprintf(out_flag, sizeof(out_flag), "--python_out=%s", dir);
	run(&r, (const char *[]){ "protoc", "-Itests/tools", out_flag, "tests/tools/event.proto", "tests/tools/hparams.proto",
				  NULL }, NULL);
	if (r.exit_code != 0)
		fprintf(stderr, "protoc: %s\n", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	return dir;
}

/* Reads the event files of `path` (a file or a run directory) with the
 * independent reader; returns its JSON ({"files": [...], "scalars": [...]}). */
static json_t *read_events(const char *path)
{
	struct dt_run r;
	run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/read_events.py", event_pb_dir(), path, NULL }, NULL);
	if (r.exit_code != 0)
		fprintf(stderr, "read_events.py failed:\n%s\n", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	json_error_t je;
	json_t *o = json_loads(r.out, 0, &je);
	DT_CHECK(o != NULL);
	dt_run_release(&r);
	return o;
}

/* The value of scalar `tag` at `step` in the reader's output; fails if absent. */
static double scalar_at(json_t *events, const char *tag, int64_t step)
{
	json_t *v;
	size_t i;
	json_array_foreach(json_object_get(events, "scalars"), i, v) {
		if (json_integer_value(json_object_get(v, "step")) == step &&
		    strcmp(json_string_value(json_object_get(v, "tag")), tag) == 0)
			return json_real_value(json_object_get(v, "value"));
	}
	dt_test_fail(__FILE__, __LINE__, "no scalar '%s' at step %lld", tag, (long long)step);
}

/* Number of scalars tagged `tag`. */
static int count_tag(json_t *events, const char *tag)
{
	json_t *v;
	size_t i;
	int n = 0;
	json_array_foreach(json_object_get(events, "scalars"), i, v)
		n += strcmp(json_string_value(json_object_get(v, "tag")), tag) == 0;
	return n;
}

/* The figure after "<key> = " in the eval line of `out` for `step`. */
static double eval_figure(const char *out, int64_t step, const char *key)
{
	char needle[64];
	snprintf(needle, sizeof(needle), "at global step %lld: ", (long long)step);
	const char *line = strstr(out, needle);
	DT_CHECK_CONTAINS(out, needle);
	char k[32];
	snprintf(k, sizeof(k), "%s = ", key);
	const char *p = strstr(line, k);
	DT_CHECK(p != NULL);
	return atof(p + strlen(k));
}

/* The eval line for `step` in `out`, copied into buf. */
static const char *eval_line(const char *out, int64_t step, char *buf, size_t cap)
{
	char needle[64];
	snprintf(needle, sizeof(needle), "at global step %lld: ", (long long)step);
	DT_CHECK_CONTAINS(out, needle);
	const char *p = strstr(out, needle);
	while (p > out && p[-1] != '\n')
		p--;
	size_t n = strcspn(p, "\n");
	snprintf(buf, cap, "%.*s", (int)n, p);
	return buf;
}

static int count_files(const char *dir, const char *infix)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += strstr(e->d_name, infix) != NULL;
	closedir(d);
	return n;
}

DT_TEST_TIMEOUT(summaries, training_scalars_parse_with_protobuf_at_every_summary_step, 120)
{
	char dir[512], arg[600];
	dt_test_path(dir, sizeof(dir), "out");
	snprintf(arg, sizeof(arg), "--output_dir=%s", dir);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=fashion_mnist", "--train_steps=50",
				  "--save_summary_steps=20", "--log_every=20", arg, NULL }, NULL);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);

	DT_CHECK_INT_EQ(count_files(dir, "tfevents"), 1);
	json_t *ev = read_events(dir);
	json_t *files = json_object_get(ev, "files");
	DT_CHECK_INT_EQ(json_array_size(files), 1);
	DT_CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(files, 0), "file_version")), "brain.Event:2");
	const char *path = json_string_value(json_object_get(json_array_get(files, 0), "path"));
	DT_CHECK_CONTAINS(path, "/events.out.tfevents.");
	/* file_version, the HParams experiment and session start, steps 20, 40
	 * and the last step, 50, and the HParams session end. */
	DT_CHECK_INT_EQ(json_integer_value(json_object_get(json_array_get(files, 0), "records")), 7);
	static const char *const tags[] = { "loss", "accuracy", "learning_rate", "global_step/sec", "examples/sec" };
	for (size_t t = 0; t < sizeof(tags) / sizeof(tags[0]); t++)
		DT_CHECK_INT_EQ(count_tag(ev, tags[t]), 3);
	/* The figures agree with the progress lines ("step 40/50 loss 0.8123 acc 0.712 lr 0.00039"). */
	const char *line = strstr(r.err, "step 40/50 loss ");
	DT_CHECK(line != NULL);
	double loss = 0, acc = 0, lr = 0;
	DT_CHECK_INT_EQ(sscanf(line, "step 40/50 loss %lf acc %lf lr %lf", &loss, &acc, &lr), 3);
	DT_CHECK_NEAR(scalar_at(ev, "loss", 40), loss, 1e-4);
	DT_CHECK_NEAR(scalar_at(ev, "accuracy", 40), acc, 1e-3);
	DT_CHECK_NEAR(scalar_at(ev, "learning_rate", 40), lr, lr * 1e-2);
	for (int64_t s = 20; s <= 50; s += s == 40 ? 10 : 20) {
		double sps = scalar_at(ev, "global_step/sec", s), eps = scalar_at(ev, "examples/sec", s);
		DT_CHECK(sps > 0);
		DT_CHECK_NEAR(eps, sps * 64, eps * 1e-5);
		double a = scalar_at(ev, "accuracy", s);
		DT_CHECK(a >= 0 && a <= 1);
	}
	json_decref(ev);

	/* The run files. */
	char p[600];
	snprintf(p, sizeof(p), "%s/hparams.json", dir);
	json_error_t je;
	json_t *hp = json_load_file(p, 0, &je);
	DT_CHECK(hp != NULL);
	DT_CHECK_STR_EQ(json_string_value(json_object_get(hp, "model")), "mlp");
	DT_CHECK_INT_EQ(json_integer_value(json_object_get(hp, "batch_size")), 64);
	json_decref(hp);
	snprintf(p, sizeof(p), "%s/flags.txt", dir);
	FILE *f = fopen(p, "r");
	DT_CHECK(f != NULL);
	char flags[8192];
	size_t n = fread(flags, 1, sizeof(flags) - 1, f);
	flags[n] = '\0';
	fclose(f);
	DT_CHECK_CONTAINS(flags, "--model=mlp\n");
	DT_CHECK_CONTAINS(flags, "--train_steps=50\n");
	DT_CHECK_CONTAINS(flags, "--save_summary_steps=20\n");
	DT_CHECK_CONTAINS(flags, "--prefetch\n");
	DT_CHECK_CONTAINS(flags, arg);
	dt_run_release(&r);

	/* --save_summary_steps=0 writes no event file (the run files still). */
	dt_test_path(dir, sizeof(dir), "out0");
	snprintf(arg, sizeof(arg), "--output_dir=%s", dir);
	run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=5",
				  "--save_summary_steps=0", "--noeval", arg, NULL }, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_INT_EQ(count_files(dir, "tfevents"), 0);
	DT_CHECK_INT_EQ(count_files(dir, "hparams.json"), 1);
	dt_run_release(&r);
}

/* Trains mlp on fashion_mnist for `steps` with a checkpoint every `every`
 * steps into `dir`; returns the trainer's stdout (caller frees). */
static char *train_with_checkpoints(const char *dir, const char *steps, const char *every)
{
	char out_arg[600], steps_arg[64], every_arg[64];
	snprintf(out_arg, sizeof(out_arg), "--output_dir=%s", dir);
	snprintf(steps_arg, sizeof(steps_arg), "--train_steps=%s", steps);
	snprintf(every_arg, sizeof(every_arg), "--save_checkpoints_steps=%s", every);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=fashion_mnist", steps_arg, every_arg,
				  "--save_summary_steps=20", "--log_every=0", out_arg, NULL }, NULL);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	char *out = strdup(r.out);
	dt_run_release(&r);
	return out;
}

/* The HParams plugin's summary of `tag` in the reader's output (its "data"), or NULL. */
static json_t *hparams_data(json_t *ev, const char *tag)
{
	json_t *v;
	size_t i;
	json_array_foreach(json_object_get(ev, "hparams"), i, v)
		if (!strcmp(json_string_value(json_object_get(v, "tag")), tag))
			return json_object_get(v, "data");
	return NULL;
}

/* TensorBoard's HParams tab: the chief's event file holds the plugin's
 * experiment, session start (every hparam of hparams.json, with its value)
 * and session end (SUCCESS), decoded by protoc-compiled hparams.proto. */
DT_TEST_TIMEOUT(summaries, hparams_plugin_summaries_decode_with_protobuf, 120)
{
	char dir[512], arg[600];
	dt_test_path(dir, sizeof(dir), "out");
	snprintf(arg, sizeof(arg), "--output_dir=%s", dir);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=fashion_mnist", "--train_steps=30",
				  "--hparams=learning_rate=0.05,optimizer=momentum", "--save_summary_steps=10", arg, NULL },
	    NULL);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	json_t *ev = read_events(dir);
	char path[600];
	snprintf(path, sizeof(path), "%s/hparams.json", dir);
	json_t *want = json_load_file(path, 0, NULL);
	DT_CHECK(json_is_object(want));

	json_t *start = json_object_get(hparams_data(ev, "_hparams_/session_start_info"), "session_start_info");
	json_t *hp = json_object_get(start, "hparams");
	DT_CHECK(json_is_object(hp));
	DT_CHECK_INT_EQ(json_object_size(hp), json_object_size(want));
	const char *key;
	json_t *v;
	json_object_foreach(want, key, v) {
		json_t *got = json_object_get(hp, key);
		if (!got)
			dt_test_fail(__FILE__, __LINE__, "hparam '%s' is missing from the session start", key);
		if (json_is_number(v))
			DT_CHECK(json_number_value(json_object_get(got, "number_value")) == json_number_value(v));
		else if (json_is_boolean(v))
			DT_CHECK(json_is_true(json_object_get(got, "bool_value")) == json_is_true(v));
		else if (json_is_string(v))
			DT_CHECK_STR_EQ(json_string_value(json_object_get(got, "string_value")), json_string_value(v));
	}
	DT_CHECK(json_number_value(json_object_get(json_object_get(hp, "learning_rate"), "number_value")) == 0.05);
	DT_CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(hp, "optimizer"), "string_value")), "momentum");
	DT_CHECK(json_number_value(json_object_get(start, "start_time_secs")) > 1.6e9);

	json_t *exp = json_object_get(hparams_data(ev, "_hparams_/experiment"), "experiment");
	DT_CHECK_INT_EQ(json_array_size(json_object_get(exp, "hparam_infos")), json_object_size(want));
	json_t *metrics = json_object_get(exp, "metric_infos");
	int eval_accuracy = 0;
	size_t i;
	json_array_foreach(metrics, i, v) {
		json_t *name = json_object_get(v, "name");
		const char *group = json_string_value(json_object_get(name, "group"));
		eval_accuracy |= group && !strcmp(group, "eval") &&
				 !strcmp(json_string_value(json_object_get(name, "tag")), "accuracy") &&
				 !strcmp(json_string_value(json_object_get(v, "dataset_type")), "DATASET_VALIDATION");
	}
	DT_CHECK(eval_accuracy);

	json_t *end = json_object_get(hparams_data(ev, "_hparams_/session_end_info"), "session_end_info");
	DT_CHECK_STR_EQ(json_string_value(json_object_get(end, "status")), "STATUS_SUCCESS");
	json_decref(want);
	json_decref(ev);
}

DT_TEST_TIMEOUT(evaluator, continuous_eval_reports_what_the_chief_measured, 180)
{
	char dir[512], out_arg[600];
	dt_test_path(dir, sizeof(dir), "out");
	snprintf(out_arg, sizeof(out_arg), "--output_dir=%s", dir);
	char *trained = train_with_checkpoints(dir, "60", "20");
	char want[256], got[256];
	eval_line(trained, 60, want, sizeof(want));
	DT_CHECK_CONTAINS(want, "eval (test split, 10000 examples) at global step 60: accuracy = ");

	/* Default mode `latest`: jumps to the final checkpoint, evaluates it, exits 0. */
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--schedule=continuous_eval", "--model=mlp", "--problem=fashion_mnist",
				  "--train_steps=60", "--eval_timeout_secs=60", out_arg, NULL }, NULL);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_STR_EQ(eval_line(r.out, 60, got, sizeof(got)), want);
	DT_CHECK(strstr(r.out, "global step 20") == NULL);
	DT_CHECK_CONTAINS(r.err, "[evaluator:0]");
	dt_run_release(&r);

	/* --eval_mode=every: each checkpoint in order, as the evaluator task of a TF_CONFIG cluster. */
	const char *env[] = { "TF_CONFIG={\"cluster\": {\"chief\": [\"localhost:2000\"], \"ps\": [\"localhost:2001\"]}, "
			      "\"task\": {\"type\": \"evaluator\", \"index\": 0}}", NULL };
	run(&r, (const char *[]){ "dtrain", "train", "--eval_mode=every", "--model=mlp", "--problem=fashion_mnist",
				  "--train_steps=60", "--eval_timeout_secs=60", out_arg, NULL }, env);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	const char *s20 = strstr(r.out, "at global step 20:"), *s40 = strstr(r.out, "at global step 40:"),
		   *s60 = strstr(r.out, "at global step 60:");
	DT_CHECK(s20 && s40 && s60 && s20 < s40 && s40 < s60);
	DT_CHECK_STR_EQ(eval_line(r.out, 60, got, sizeof(got)), want);
	DT_CHECK_CONTAINS(r.err, "[evaluator:0]");
	dt_run_release(&r);

	/* continuous_eval_on_train_data: the train split, into eval_train/. */
	run(&r, (const char *[]){ "dtrain", "train", "--schedule=continuous_eval_on_train_data", "--model=mlp",
				  "--problem=fashion_mnist", "--train_steps=60", "--eval_timeout_secs=60", out_arg, NULL },
	    NULL);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "eval (train split, 60000 examples) at global step 60: accuracy = ");
	dt_run_release(&r);

	/* Another model's evaluator stops at once with exit 4: no retry can fix that. */
	run(&r, (const char *[]){ "dtrain", "train", "--schedule=continuous_eval", "--model=lenet",
				  "--problem=fashion_mnist", "--train_steps=60", "--eval_timeout_secs=60", out_arg, NULL },
	    NULL);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "is of a different model");
	DT_CHECK_CONTAINS(r.err, "hint: run the evaluator with the trainers' --model");
	DT_CHECK_STR_EQ(r.out, "");
	dt_run_release(&r);

	/* The eval summaries: three runs wrote eval/ (1 + 3 records) and one eval_train/;
	 * the lenet evaluator opened a third file in eval/ before it found the mismatch. */
	char eval_dir[600];
	snprintf(eval_dir, sizeof(eval_dir), "%s/eval", dir);
	DT_CHECK_INT_EQ(count_files(eval_dir, "tfevents"), 3);
	json_t *ev = read_events(eval_dir);
	DT_CHECK_INT_EQ(count_tag(ev, "accuracy"), 4);
	DT_CHECK_INT_EQ(count_tag(ev, "loss"), 4);
	DT_CHECK_NEAR(scalar_at(ev, "accuracy", 60), eval_figure(want, 60, "accuracy"), 1e-4);
	DT_CHECK_NEAR(scalar_at(ev, "loss", 60), eval_figure(want, 60, "loss"), 1e-4);
	json_decref(ev);
	snprintf(eval_dir, sizeof(eval_dir), "%s/eval_train", dir);
	ev = read_events(eval_dir);
	DT_CHECK_INT_EQ(count_tag(ev, "accuracy"), 1);
	json_decref(ev);
	free(trained);
}

DT_TEST_TIMEOUT(evaluator, runs_beside_a_training_run_and_sees_every_checkpoint, 180)
{
	char dir[512], out_arg[600];
	dt_test_path(dir, sizeof(dir), "out");
	snprintf(out_arg, sizeof(out_arg), "--output_dir=%s", dir);
	/* The evaluator first, polling a directory that does not exist yet. */
	struct task t;
	task_start(&t, "evaluator", (const char *[]){ "dtrain", "train", "--schedule=continuous_eval", "--eval_mode=every",
						      "--model=mlp", "--problem=fashion_mnist", "--train_steps=60",
						      "--eval_timeout_secs=90", out_arg, NULL }, NULL);
	int ok = task_wait_log(&t, "evaluator: test split", 60);
	if (!ok)
		tasks_dump(&t, 1);
	DT_CHECK(ok);
	char *trained = train_with_checkpoints(dir, "60", "20");
	char want[256], got[256];
	eval_line(trained, 60, want, sizeof(want));
	int code = task_wait(&t, 90);
	if (code != 0)
		tasks_dump(&t, 1);
	DT_CHECK_INT_EQ(code, 0);
	char *out = task_read(&t, 0);
	const char *s20 = strstr(out, "at global step 20:"), *s40 = strstr(out, "at global step 40:"),
		   *s60 = strstr(out, "at global step 60:");
	DT_CHECK(s20 && s40 && s60 && s20 < s40 && s40 < s60);
	DT_CHECK_STR_EQ(eval_line(out, 60, got, sizeof(got)), want);
	free(out);
	free(trained);
}

/* Runs a shell script with $1 and $2 set; fails the test unless it exits 0. */
static void shell(const char *script, const char *a1, const char *a2)
{
	struct dt_run r;
	run(&r, (const char *[]){ "/bin/sh", "-c", script, "sh", a1, a2, NULL }, NULL);
	if (r.exit_code != 0)
		fprintf(stderr, "%s: %s\n", script, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(evaluator, keeps_going_past_half_written_and_missing_checkpoints, 180)
{
	char src[512], dir[512];
	dt_test_path(src, sizeof(src), "src");
	dt_test_path(dir, sizeof(dir), "eval_here");
	char *trained = train_with_checkpoints(src, "40", "20");
	char want[256], got[256];
	eval_line(trained, 40, want, sizeof(want));
	DT_CHECK(mkdir(dir, 0755) == 0);

	/* A half-written checkpoint 20 that the state file names. */
	shell("head -c 3000 \"$1/model.ckpt-20.safetensors\" > \"$2/model.ckpt-20.safetensors\" && "
	      "printf 'model_checkpoint_path: \"model.ckpt-20.safetensors\"\\n' > \"$2/checkpoint\"", src, dir);

	char out_arg[600];
	snprintf(out_arg, sizeof(out_arg), "--output_dir=%s", dir);
	struct task t;
	task_start(&t, "evaluator", (const char *[]){ "dtrain", "train", "--schedule=continuous_eval", "--model=mlp",
						      "--problem=fashion_mnist", "--train_steps=40",
						      "--eval_timeout_secs=90", out_arg, NULL }, NULL);
	int ok = task_wait_log(&t, "skipping it", 60);
	if (!ok)
		tasks_dump(&t, 1);
	DT_CHECK(ok);
	char *log = task_read(&t, 1);
	DT_CHECK_CONTAINS(log, "cannot load checkpoint (attempt 1 of 3, retrying)");
	DT_CHECK_CONTAINS(log, "model.ckpt-20.safetensors");
	free(log);

	/* The state file now names a checkpoint that is not there (deleted, or not renamed yet). */
	shell("printf 'model_checkpoint_path: \"model.ckpt-30.safetensors\"\\n' > \"$2/checkpoint.new\" && "
	      "mv \"$2/checkpoint.new\" \"$2/checkpoint\"", src, dir);
	ok = task_wait_log(&t, "model.ckpt-30.safetensors', which is not there", 30);
	if (!ok)
		tasks_dump(&t, 1);
	DT_CHECK(ok);

	/* Then the final checkpoint arrives, as the chief publishes it. */
	shell("cp \"$1/model.ckpt-40.safetensors\" \"$2/model.ckpt-40.safetensors.tmp\" && "
	      "mv \"$2/model.ckpt-40.safetensors.tmp\" \"$2/model.ckpt-40.safetensors\" && "
	      "printf 'model_checkpoint_path: \"model.ckpt-40.safetensors\"\\n' > \"$2/checkpoint.new\" && "
	      "mv \"$2/checkpoint.new\" \"$2/checkpoint\"", src, dir);
	int code = task_wait(&t, 60);
	if (code != 0)
		tasks_dump(&t, 1);
	DT_CHECK_INT_EQ(code, 0);
	char *out = task_read(&t, 0);
	DT_CHECK_STR_EQ(eval_line(out, 40, got, sizeof(got)), want);
	DT_CHECK(strstr(out, "global step 20") == NULL);
	free(out);

	/* --eval_mode=every: a listed checkpoint deleted before its turn is skipped, the next evaluated. */
	dt_test_path(dir, sizeof(dir), "every");
	DT_CHECK(mkdir(dir, 0755) == 0);
	shell("cp \"$1/model.ckpt-40.safetensors\" \"$2/\" && "
	      "printf 'model_checkpoint_path: \"model.ckpt-40.safetensors\"\\n"
	      "all_model_checkpoint_paths: \"model.ckpt-20.safetensors\"\\n"
	      "all_model_checkpoint_paths: \"model.ckpt-40.safetensors\"\\n' > \"$2/checkpoint\"", src, dir);
	snprintf(out_arg, sizeof(out_arg), "--output_dir=%s", dir);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--schedule=continuous_eval", "--eval_mode=every", "--model=mlp",
				  "--problem=fashion_mnist", "--train_steps=40", "--eval_timeout_secs=60", out_arg, NULL },
	    NULL);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "model.ckpt-20.safetensors' was deleted before it could be evaluated: skipping it");
	DT_CHECK_STR_EQ(eval_line(r.out, 40, got, sizeof(got)), want);
	dt_run_release(&r);
	free(trained);
}

DT_TEST_TIMEOUT(evaluator, gives_up_after_its_timeout_with_exit_3, 60)
{
	char dir[512], out_arg[600];
	dt_test_path(dir, sizeof(dir), "empty");
	snprintf(out_arg, sizeof(out_arg), "--output_dir=%s", dir);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--schedule=continuous_eval", "--model=mlp", "--problem=synthetic",
				  "--train_steps=10", "--eval_timeout_secs=1.5", out_arg, NULL }, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 3);
	DT_CHECK_CONTAINS(r.err, "error: no checkpoint appeared in '");
	DT_CHECK_CONTAINS(r.err, "in 1.5 s");
	DT_CHECK_CONTAINS(r.err, "hint: ");
	DT_CHECK_STR_EQ(r.out, "");
	dt_run_release(&r);

	/* Usage errors: exit 2 before waiting. */
	run(&r, (const char *[]){ "dtrain", "train", "--schedule=continuous_eval", "--problem=synthetic",
				  "--eval_mode=sometimes", out_arg, NULL }, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--eval_mode=sometimes: expected latest or every");
	dt_run_release(&r);
	run(&r, (const char *[]){ "dtrain", "train", "--schedule=continuous_eval", "--problem=synthetic", NULL },
	    (const char *[]){ "OUTPUT_DIR=", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "the evaluator needs --output_dir");
	dt_run_release(&r);
	run(&r, (const char *[]){ "dtrain", "train", "--schedule=continuous_eval", "--problem=synthetic",
				  "--eval_timeout_secs=0", out_arg, NULL }, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--eval_timeout_secs");
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(evaluator, train_and_evaluate_evaluates_after_each_save, 120)
{
	char dir[512], out_arg[600];
	dt_test_path(dir, sizeof(dir), "out");
	snprintf(out_arg, sizeof(out_arg), "--output_dir=%s", dir);
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "train", "--schedule=train_and_evaluate", "--model=mlp",
				  "--problem=fashion_mnist", "--train_steps=60", "--save_checkpoints_steps=20",
				  "--log_every=0", out_arg, NULL }, NULL);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "eval at step 20: accuracy ");
	DT_CHECK_CONTAINS(r.err, "eval at step 40: accuracy ");
	char eval_dir[600];
	snprintf(eval_dir, sizeof(eval_dir), "%s/eval", dir);
	json_t *ev = read_events(eval_dir);
	DT_CHECK_INT_EQ(count_tag(ev, "accuracy"), 3);
	DT_CHECK_NEAR(scalar_at(ev, "accuracy", 60), eval_figure(r.out, 60, "accuracy"), 1e-4);
	DT_CHECK_NEAR(scalar_at(ev, "loss", 60), eval_figure(r.out, 60, "loss"), 1e-4);
	DT_CHECK(scalar_at(ev, "accuracy", 20) > 0);
	json_decref(ev);
	dt_run_release(&r);
}
