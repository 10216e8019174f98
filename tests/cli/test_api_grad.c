/*
 * test_api_grad.c — gradients checked by finite differences THROUGH the
 * public API (tests/api/gradcheck.c, built against the installed library):
 * a custom model's callback and a layer graph's backward pass.
 */
#include <stdlib.h>

#include "api_util.h"

static void gradcheck(const char *which)
{
	struct api_tree t;
	api_install(&t);
	char exe[800];
	api_compile(&t, "tests/api/gradcheck.c", "gradcheck", exe, sizeof(exe));
	const char *argv[] = { exe, which, NULL };
	const char *env[] = { t.ld_env, "TF_CONFIG=", NULL };
	struct dt_run r;
	dt_test_run(&r, argv, env, 60);
	if (r.exit_code != 0)
		dt_test_fail(__FILE__, __LINE__, "gradcheck %s exited %d\n--- stdout\n%s\n--- stderr\n%s", which,
			     r.exit_code, r.out, r.err);
	DT_CHECK_CONTAINS(r.out, "gradient elements match finite differences");
	dt_run_release(&r);
}

DT_TEST(api_grad, custom_model_callback) { gradcheck("custom"); }
DT_TEST(api_grad, layer_graph) { gradcheck("graph"); }
