/* Unit tests of a spec's parameters and templates (launch/params.h) and of
 * seed 001's RiseML form as dtrain's spec (launch/spec_riseml.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "launch/params.h"
#include "launch/spec.h"

static enum dt_status parse(const char *text, struct dt_launch_spec *s, struct dt_err *err)
{
	return dt_launch_spec_parse(text, strlen(text), "x.yaml", s, err);
}

/* Seed 001's example as its page writes it. */
DT_TEST(launch_params, seed_001_maps_onto_dtrains_spec)
{
	const char *text = "project: ai-toaster\ntrain:\n  framework: tensorflow\n  resources:\n    cpus: 2\n"
			   "    mem: 16384\n    gpus: 4\n  tensorflow:\n    version: 1.2.1-gpu\n    distributed:\n"
			   "      worker: 3\n      ps:\n        count: 2\n        resources:\n          cpus: 2\n"
			   "          mem: 16384\n          gpus: 0\n  run: >-\n"
			   "    python train_model.py --num-layers {{ num-layers }}\n"
			   "                          --learning-rate {{ learning-rate }}\n"
			   "                          --training-data /data/my-project\n"
			   "  parameters:\n    num-layers: [2, 3]\n    learning-rate: {range: {min: 0.001, max: 0.003, step: 0.001}}\n";
	struct dt_launch_spec s;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(parse(text, &s, &err), &err);
	DT_CHECK_STR_EQ(s.name, "ai-toaster");
	DT_CHECK_INT_EQ(s.workers, 3);
	DT_CHECK_INT_EQ(s.ps, 2);
	DT_CHECK_INT_EQ(s.mode, DT_LAUNCH_ASYNC);
	DT_CHECK_INT_EQ(s.shell, 1);
	DT_CHECK_STR_EQ(s.command[0], "python train_model.py --num-layers 2 --learning-rate 0.001 --training-data "
				      "/data/my-project");
	DT_CHECK_INT_EQ(s.res[DT_GROUP_WORKER].cpus, 2);
	DT_CHECK(s.res[DT_GROUP_WORKER].mem_bytes == 16384LL << 20);
	DT_CHECK_INT_EQ(s.res[DT_GROUP_WORKER].gpus, 4);
	DT_CHECK_INT_EQ(s.res[DT_GROUP_PS].gpus, 0);
	DT_CHECK_STR_EQ(s.tf_version, "1.2.1-gpu");
	DT_CHECK(s.sweep != NULL);
	DT_CHECK_INT_EQ(s.sweep->ntrials, 6);
	DT_CHECK_INT_EQ(s.sweep->concurrency, 1);
	struct dt_launch_spec t;
	DT_CHECK_OK(dt_launch_spec_trial(&s, 6, &t, &err), &err);
	DT_CHECK_INT_EQ(t.trial, 6);
	DT_CHECK_STR_EQ(t.command[0], "python train_model.py --num-layers 3 --learning-rate 0.003 --training-data "
				      "/data/my-project");
	dt_launch_spec_release(&t);
	dt_launch_spec_release(&s);

	/* Without `distributed`: one chief, no ps. */
	DT_CHECK_OK(parse("project: p\ntrain:\n  framework: tensorflow\n  run: [make, ./train]\n", &s, &err), &err);
	DT_CHECK_INT_EQ(s.workers, 1);
	DT_CHECK_INT_EQ(s.ps, 0);
	DT_CHECK_INT_EQ(s.mode, DT_LAUNCH_MIRRORED);
	DT_CHECK_STR_EQ(s.command[0], "set -e\nmake\n./train");
	DT_CHECK(s.sweep == NULL);
	dt_launch_spec_release(&s);
}

DT_TEST(launch_params, templates_expand_and_report_where)
{
	struct dt_launch_sweep sw = { 0 };
	struct dt_launch_param p[2] = { { .name = "lr" }, { .name = "num-layers" } };
	sw.params = p;
	sw.nparams = 2;
	char *values[] = { "0.1", "3", NULL };
	unsigned char used[2] = { 0 };
	char *out = NULL;
	size_t where = 0;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_launch_template_expand("--lr={{lr}} --n {{  num-layers }}{{ lr }}", &sw, values, used, &out,
					      &where, &err), &err);
	DT_CHECK_STR_EQ(out, "--lr=0.1 --n 30.1");
	DT_CHECK(used[0] && used[1]);
	free(out);
	DT_CHECK_INT_EQ(dt_launch_template_expand("ab {{ x }}", &sw, values, used, &out, &where, &err), DT_CONFIG);
	DT_CHECK_INT_EQ(where, 3);
	DT_CHECK_CONTAINS(err.msg, "unknown parameter 'x' in '{{ x }}'; parameters: lr, num-layers");
	DT_CHECK_INT_EQ(dt_launch_template_expand("{{ lr ", &sw, values, used, &out, &where, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "broken placeholder");
	DT_CHECK_INT_EQ(dt_launch_template_expand("{{ lr }}", NULL, NULL, NULL, &out, &where, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "the spec has no 'parameters:'");
	/* No "{{": the text as it is, whatever the braces. */
	DT_CHECK_OK(dt_launch_template_expand("awk '{print $1}' }}", NULL, NULL, NULL, &out, &where, &err), &err);
	DT_CHECK_STR_EQ(out, "awk '{print $1}' }}");
	free(out);
}

/* Grid order (the last parameter fastest), range values, max_trials as a
 * cap, and params.yaml. */
DT_TEST(launch_params, grid_order_ranges_and_yaml)
{
	const char *text = "command: \"echo {{ a }} {{ b }} {{ c }}\"\nmax_trials: 5\nparameters:\n"
			   "  a: {range: {min: 0.1, max: 0.3, step: 0.1}}\n  b: {min: 10, max: 30, step: 10}\n"
			   "  c: [x, 'two words']\n";
	struct dt_launch_spec s;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(parse(text, &s, &err), &err);
	DT_CHECK_INT_EQ(s.sweep->ntrials, 5); /* 18 combinations, the first 5 */
	DT_CHECK_INT_EQ(s.sweep->params[0].nvalues, 3);
	DT_CHECK_STR_EQ(s.sweep->params[0].values[2], "0.3");
	DT_CHECK_STR_EQ(s.sweep->params[1].values[1], "20");
	static const char *const want[5] = { "a=0.1 b=10 c=x", "a=0.1 b=10 c=two words", "a=0.1 b=20 c=x",
					     "a=0.1 b=20 c=two words", "a=0.1 b=30 c=x" };
	for (int k = 1; k <= 5; k++) {
		char **v = dt_launch_trial_values(s.sweep, k), line[200];
		dt_launch_values_line(s.sweep, v, line, sizeof(line));
		DT_CHECK_STR_EQ(line, want[k - 1]);
		if (k == 2) {
			char *yaml = NULL;
			size_t len = 0;
			dt_launch_values_yaml(s.sweep, v, &yaml, &len);
			DT_CHECK_STR_EQ(yaml, "a: 0.1\nb: 10\nc: \"two words\"\n");
			free(yaml);
		}
		dt_launch_values_free(v);
	}
	dt_launch_spec_release(&s);
}

/* Random draws: in range, on their scale, the same for the same seed and
 * trial, whatever max_trials. */
DT_TEST(launch_params, random_draws_are_stable_and_in_range)
{
	const char *a = "command: \"echo {{ lr }} {{ n }} {{ o }}\"\nsearch: random\nmax_trials: 200\nseed: 3\n"
			"parameters:\n  lr: {min: 0.0001, max: 1, scale: log}\n  n: {min: 1, max: 4}\n"
			"  o: {choices: [p, q]}\n";
	const char *b = "command: \"echo {{ lr }} {{ n }} {{ o }}\"\nsearch: random\nmax_trials: 10\nseed: 3\n"
			"parameters:\n  lr: {min: 0.0001, max: 1, scale: log}\n  n: {min: 1, max: 4}\n"
			"  o: {choices: [p, q]}\n";
	struct dt_launch_spec s, s2;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(parse(a, &s, &err), &err);
	DT_CHECK_OK(parse(b, &s2, &err), &err);
	int below_01 = 0, seen_n[5] = { 0 };
	for (int k = 1; k <= 200; k++) {
		char **v = dt_launch_trial_values(s.sweep, k);
		double lr = atof(v[0]);
		int n = atoi(v[1]);
		DT_CHECK(lr >= 0.0001 && lr <= 1);
		DT_CHECK(n >= 1 && n <= 4);
		DT_CHECK(!strcmp(v[2], "p") || !strcmp(v[2], "q"));
		below_01 += lr < 0.01;
		seen_n[n]++;
		if (k <= 10) {
			char **w = dt_launch_trial_values(s2.sweep, k);
			for (int i = 0; i < 3; i++)
				DT_CHECK_STR_EQ(v[i], w[i]);
			dt_launch_values_free(w);
		}
		dt_launch_values_free(v);
	}
	/* Log scale: half the draws below 0.01 (the middle of 1e-4..1 in log), give or take. */
	DT_CHECK(below_01 > 70 && below_01 < 130);
	for (int n = 1; n <= 4; n++)
		DT_CHECK(seen_n[n] > 20);
	dt_launch_spec_release(&s);
	dt_launch_spec_release(&s2);
}
