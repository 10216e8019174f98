/*
 * test_api_ckpt.c — checkpoints and user scalars through the public API
 * (tests/api/ckpt.c, built against the installed library): a custom loop
 * with output_dir saves at its last step; a second program continues from
 * that checkpoint to a later step; an explicit restore reads the final
 * variables back; the user's scalar is in the TensorBoard event file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_util.h"

static char *run_ckpt(const struct api_tree *t, const char *exe, const char *dir, const char *what)
{
	const char *argv[] = { exe, dir, what, NULL };
	const char *env[] = { t->ld_env, "TF_CONFIG=", NULL };
	struct dt_run r;
	dt_test_run(&r, argv, env, 60);
	if (r.exit_code != 0)
		dt_test_fail(__FILE__, __LINE__, "ckpt %s exited %d: %s", what, r.exit_code, r.err);
	char *out = r.out;
	r.out = NULL;
	dt_run_release(&r);
	return out;
}

DT_TEST(api_ckpt, save_continue_restore_and_scalars)
{
	struct api_tree t;
	api_install(&t);
	char exe[800], dir[700];
	api_compile(&t, "tests/api/ckpt.c", "ckpt", exe, sizeof(exe));
	snprintf(dir, sizeof(dir), "%s/run", dt_test_tmpdir());

	char *a = run_ckpt(&t, exe, dir, "100");
	DT_CHECK_CONTAINS(a, "start 0 end 100 ");
	char *b = run_ckpt(&t, exe, dir, "200");
	DT_CHECK_CONTAINS(b, "start 100 end 200 ");
	char *c = run_ckpt(&t, exe, dir, "restore");
	/* The restored variables are the second run's final ones. */
	const char *w_end = strstr(b, " w0 "), *w_restored = strstr(c, " w0 ");
	DT_CHECK(w_end && w_restored);
	DT_CHECK_STR_EQ(w_restored, w_end);
	DT_CHECK_CONTAINS(c, "restored 200 ");
	/* Learning happened: w0 moves from 0 towards 3. */
	DT_CHECK(atof(w_end + 4) > 1.0);

	char cmd[1600];
	snprintf(cmd, sizeof(cmd), "grep -l 'user/w0' '%s'/events.out.tfevents.* | wc -l", dir);
	const char *argv[] = { "/bin/sh", "-c", cmd, NULL };
	struct dt_run r;
	dt_test_run(&r, argv, NULL, 30);
	DT_CHECK(atoi(r.out) >= 1);
	dt_run_release(&r);
	free(a);
	free(b);
	free(c);
}
