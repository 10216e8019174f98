/*
 * test_api_misuse.c — misuse of the public API gets a status and a message,
 * never a crash: tests/api/misuse.c, built against the installed library,
 * runs each case and prints what it got.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_util.h"

static char exe[800];

static char *run_case(const char *name)
{
	struct api_tree t;
	api_install(&t);
	api_compile(&t, "tests/api/misuse.c", "misuse", exe, sizeof(exe));
	const char *argv[] = { exe, name, NULL };
	const char *env[] = { t.ld_env, "TF_CONFIG=", NULL };
	struct dt_run r;
	dt_test_run(&r, argv, env, 60);
	if (r.exit_code != 0 || !strstr(r.out, "DONE"))
		dt_test_fail(__FILE__, __LINE__, "misuse %s exited %d\n--- stdout\n%s\n--- stderr\n%s", name, r.exit_code,
			     r.out, r.err);
	char *out = r.out;
	r.out = NULL;
	dt_run_release(&r);
	return out;
}

/* The line "CASE <name>: ..." of out (at most cap bytes into line). */
static const char *case_line(const char *out, const char *name, char *line, size_t cap)
{
	char key[128];
	snprintf(key, sizeof(key), "CASE %s: ", name);
	const char *p = strstr(out, key);
	if (!p)
		dt_test_fail(__FILE__, __LINE__, "no line for case '%s' in:\n%s", name, out);
	size_t n = strcspn(p, "\n");
	snprintf(line, cap, "%.*s", (int)n, p);
	return line;
}

#define EXPECT_CASE(out, name, text)                                   \
	do {                                                           \
		char line_[1200];                                      \
		DT_CHECK_CONTAINS(case_line(out, name, line_, sizeof(line_)), text); \
	} while (0)

DT_TEST(api_misuse, null_handles)
{
	char *out = run_case("null_handles");
	EXPECT_CASE(out, "null_session_step", "USAGE: ");
	EXPECT_CASE(out, "null_session_step", "session is NULL");
	EXPECT_CASE(out, "null_session_run", "USAGE: ");
	EXPECT_CASE(out, "null_session_new", "USAGE: ");
	EXPECT_CASE(out, "null_model_check", "USAGE: the model is NULL");
	EXPECT_CASE(out, "null_data_add", "USAGE: ");
	EXPECT_CASE(out, "null_cluster_add", "USAGE: ");
	EXPECT_CASE(out, "null_set", "USAGE: ");
	EXPECT_CASE(out, "null_evaluate", "USAGE: ");
	EXPECT_CASE(out, "null_builder", "-1 -1 1 nomode 0");
	EXPECT_CASE(out, "null_err", "USAGE");
	free(out);
}

DT_TEST(api_misuse, shapes_that_do_not_connect)
{
	char *out = run_case("shapes");
	/* The bad call and every call after it return -1; the first error is kept. */
	EXPECT_CASE(out, "shapes_nodes", "-1 -1");
	EXPECT_CASE(out, "shapes", "CONFIG: ");
	EXPECT_CASE(out, "shapes", "conv2d");
	EXPECT_CASE(out, "add_shapes", "CONFIG: ");
	EXPECT_CASE(out, "unknown_node", "USAGE: ");
	EXPECT_CASE(out, "unknown_node", "node 7");
	EXPECT_CASE(out, "no_loss", "CONFIG: ");
	EXPECT_CASE(out, "no_loss", "loss");
	free(out);
}

DT_TEST(api_misuse, batch_callback_error)
{
	char *out = run_case("batch_callback_error");
	EXPECT_CASE(out, "batch_callback_error", "IO: ");
	EXPECT_CASE(out, "batch_callback_error", "cannot read shard 0: disk on fire");
	EXPECT_CASE(out, "batch_callback_error", "the batch callback failed at step 2");
	free(out);
}

DT_TEST(api_misuse, label_out_of_range)
{
	char *out = run_case("label_out_of_range");
	EXPECT_CASE(out, "label_out_of_range", "USAGE: ");
	EXPECT_CASE(out, "label_out_of_range", "label 7 out of range [0, 3)");
	free(out);
}

DT_TEST(api_misuse, calls_in_the_wrong_order)
{
	char *out = run_case("wrong_order");
	EXPECT_CASE(out, "set_after_step", "USAGE: ");
	EXPECT_CASE(out, "builder_after_session", "USAGE: ");
	EXPECT_CASE(out, "close", "OK: ");
	EXPECT_CASE(out, "step_after_close", "USAGE: ");
	EXPECT_CASE(out, "close_twice", "USAGE: ");
	EXPECT_CASE(out, "session_before_set_task", "USAGE: ");
	EXPECT_CASE(out, "session_before_set_task", "the cluster has tasks but not this process");
	EXPECT_CASE(out, "add_after_set_task", "USAGE: ");
	EXPECT_CASE(out, "unknown_option", "USAGE: ");
	EXPECT_CASE(out, "unknown_option", "learning_rate"); /* the valid names are listed */
	EXPECT_CASE(out, "bad_value", "USAGE: ");
	free(out);
}

DT_TEST(api_misuse, custom_model_writes_nan)
{
	char *out = run_case("nan");
	EXPECT_CASE(out, "nan_loss", "RUNTIME: ");
	EXPECT_CASE(out, "nan_loss", "loss is nan");
	EXPECT_CASE(out, "nan_gradient", "RUNTIME: ");
	EXPECT_CASE(out, "nan_gradient", "nan into the gradient of 'w' at index 0");
	free(out);
}
