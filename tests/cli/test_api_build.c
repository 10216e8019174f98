/*
 * test_api_build.c — libdtrain as a package: the shared library exports the
 * API of include/dtrain.h and nothing else, `make install` lays out what
 * pkg-config promises, and a program written against the installed header
 * builds with `cc prog.c $(pkg-config --cflags --libs dtrain)` (shared and
 * --static) and runs.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_util.h"

/* Output of `sh -c cmd` (must exit 0), malloc'd. */
static char *sh_out(const char *cmd)
{
	const char *argv[] = { "/bin/sh", "-c", cmd, NULL };
	struct dt_run r;
	dt_test_run(&r, argv, NULL, 60);
	if (r.exit_code != 0)
		dt_test_fail(__FILE__, __LINE__, "'%s' exited %d: %s", cmd, r.exit_code, r.err);
	char *out = r.out;
	r.out = NULL;
	dt_run_release(&r);
	return out;
}

/* Every function the header declares with DTRAIN_API, as "name\n" lines. */
static char *declared_api(const struct api_tree *t)
{
	char cmd[1000];
	snprintf(cmd, sizeof(cmd),
		 "tr '\\n' ' ' < '%s/include/dtrain.h' | grep -o 'DTRAIN_API [^(;]*[ *]dtrain_[a-z0-9_]*(' | "
		 "sed 's/.*[ *]\\(dtrain_[a-z0-9_]*\\)($/\\1/' | sort -u",
		 t->repo);
	return sh_out(cmd);
}

DT_TEST(api_build, shared_library_exports_exactly_the_api)
{
	struct api_tree t;
	api_install(&t);
	char cmd[1000];
	snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s/%s/libdtrain.so.0' | awk '{print $3}' | sort -u", t.repo,
		 t.build);
	char *exported = sh_out(cmd);
	char *declared = declared_api(&t);
	int n = 0;
	for (char *line = strtok(exported, "\n"); line; line = strtok(NULL, "\n"), n++) {
		if (strncmp(line, "dtrain_", 7) != 0)
			dt_test_fail(__FILE__, __LINE__, "libdtrain.so.0 exports '%s', which is not dtrain_*", line);
		char want[200];
		snprintf(want, sizeof(want), "%s\n", line);
		if (!strstr(declared, want))
			dt_test_fail(__FILE__, __LINE__, "libdtrain.so.0 exports '%s', which dtrain.h does not declare",
				     line);
	}
	/* And everything declared is there: count the declarations. */
	int m = 0;
	for (const char *p = declared; (p = strchr(p, '\n')); p++)
		m++;
	DT_CHECK(m > 60);
	DT_CHECK_INT_EQ(n, m);
	free(exported);
	free(declared);
}

DT_TEST(api_build, install_lays_out_the_package)
{
	struct api_tree t;
	api_install(&t);
	const char *files[] = { "usr/include/dtrain.h", "usr/lib/libdtrain.a", "usr/lib/libdtrain.so.0.1.0",
				"usr/lib/pkgconfig/dtrain.pc", "usr/bin/dtrain" };
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char p[800];
		snprintf(p, sizeof(p), "%s/%s", t.root, files[i]);
		if (access(p, R_OK) != 0)
			dt_test_fail(__FILE__, __LINE__, "make install left out %s", files[i]);
	}
	char link[PATH_MAX], p[800];
	snprintf(p, sizeof(p), "%s/usr/lib/libdtrain.so.0", t.root);
	ssize_t n = readlink(p, link, sizeof(link) - 1);
	DT_CHECK(n > 0);
	link[n] = 0;
	DT_CHECK_STR_EQ(link, "libdtrain.so.0.1.0");
	snprintf(p, sizeof(p), "%s/usr/lib/libdtrain.so", t.root);
	n = readlink(p, link, sizeof(link) - 1);
	DT_CHECK(n > 0);
	link[n] = 0;
	DT_CHECK_STR_EQ(link, "libdtrain.so.0");

	char cmd[2400];
	snprintf(cmd, sizeof(cmd), "readelf -d '%s/usr/lib/libdtrain.so.0.1.0'", t.root);
	char *dyn = sh_out(cmd);
	DT_CHECK_CONTAINS(dyn, "Library soname: [libdtrain.so.0]");
	free(dyn);
	snprintf(cmd, sizeof(cmd),
		 "export PKG_CONFIG_PATH='%s/pkgconfig' PKG_CONFIG_SYSROOT_DIR='%s'; pkg-config --modversion dtrain && "
		 "pkg-config --cflags --libs dtrain",
		 t.libdir, t.root);
	char *pc = sh_out(cmd);
	DT_CHECK_CONTAINS(pc, "0.1.0");
	char want[900];
	snprintf(want, sizeof(want), "-I%s/usr/include", t.root);
	DT_CHECK_CONTAINS(pc, want);
	DT_CHECK_CONTAINS(pc, "-ldtrain");
	free(pc);
}

static const char errors_program[] =
	"#include <dtrain.h>\n"
	"#include <stdio.h>\n"
	"#include <string.h>\n"
	"int main(int argc, char **argv)\n"
	"{\n"
	"	dtrain_error *err = dtrain_error_new();\n"
	"	dtrain_cluster *cl = NULL;\n"
	"	if (dtrain_cluster_resolve(&argc, argv, &cl, err) != DTRAIN_OK) {\n"
	"		fprintf(stderr, \"error: %s\\n\", dtrain_error_message(err));\n"
	"		int rc = dtrain_status_exit_code(dtrain_error_status(err));\n"
	"		dtrain_error_free(err);\n"
	"		return rc;\n"
	"	}\n"
	"	printf(\"version %s task %s:%d chief %d source %s rest %d %s\\n\", dtrain_version(),\n"
	"	       dtrain_cluster_task_type(cl), dtrain_cluster_task_index(cl), dtrain_cluster_is_chief(cl),\n"
	"	       dtrain_cluster_source(cl), argc, argc > 1 ? argv[1] : \"-\");\n"
	"	dtrain_cluster_free(cl);\n"
	"	dtrain_error_free(err);\n"
	"	return 0;\n"
	"}\n";

DT_TEST(api_build, outside_program_resolves_its_cluster)
{
	struct api_tree t;
	api_install(&t);
	char exe[800];
	api_compile_text(&t, "cluster_prog", errors_program, exe, sizeof(exe));
	const char *env[] = { t.ld_env, "TF_CONFIG=", NULL };
	const char *argv1[] = { exe, "--ps_hosts=127.0.0.1:2222", "--worker_hosts", "127.0.0.1:2223,127.0.0.1:2224",
				"--job_name=worker", "--keep", "--task_index=1", NULL };
	struct dt_run r;
	dt_test_run(&r, argv1, env, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "version 0.1.0 task worker:1 chief 0 source flags rest 2 --keep");
	dt_run_release(&r);

	const char *env2[] = { t.ld_env,
			       "TF_CONFIG={\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:2\"]}, "
			       "\"task\": {\"type\": \"chief\", \"index\": 0}}",
			       NULL };
	const char *argv2[] = { exe, NULL };
	dt_test_run(&r, argv2, env2, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "task chief:0 chief 1 source TF_CONFIG rest 1");
	dt_run_release(&r);

	/* A bad TF_CONFIG: the library returns a status with a message, the program decides. */
	const char *env3[] = { t.ld_env, "TF_CONFIG={\"cluster\": {\"worker\": [\"h:1\"]}, \"task\": {\"type\": "
					 "\"worker\", \"index\": 3}}",
			       NULL };
	dt_test_run(&r, argv2, env3, 30);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: ");
	DT_CHECK_CONTAINS(r.err, "worker");
	dt_run_release(&r);
}

DT_TEST(api_build, static_link_with_pkg_config_static)
{
	struct api_tree t;
	api_install(&t);
	char src[700], exe[800], cmd[8000];
	snprintf(src, sizeof(src), "%s/static_prog.c", dt_test_tmpdir());
	dt_test_write_file(src, errors_program, strlen(errors_program));
	snprintf(exe, sizeof(exe), "%s/static_prog", dt_test_tmpdir());
	/* -l:libdtrain.a picks the archive; --static adds Libs.private. */
	snprintf(cmd, sizeof(cmd),
		 "cc -std=c11 -Wall -Werror %s%s '%s' -o '%s' $(PKG_CONFIG_PATH='%s/pkgconfig' "
		 "PKG_CONFIG_SYSROOT_DIR='%s' pkg-config --static --cflags --libs dtrain | sed 's/-ldtrain/-l:libdtrain.a/')",
		 DT_TEST_SANITIZE[0] ? "-fsanitize=" : "", DT_TEST_SANITIZE, src, exe, t.libdir, t.root);
	free(sh_out(cmd));
	const char *argv[] = { exe, NULL };
	const char *env[] = { "TF_CONFIG=", "LD_LIBRARY_PATH=/nonexistent", NULL };
	struct dt_run r;
	dt_test_run(&r, argv, env, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "task worker:0 chief 1 source local");
	dt_run_release(&r);
}

/* The README's tour program, as the README prints it: at most 30 lines,
 * built against the installed library, trains and reports an accuracy. */
DT_TEST_TIMEOUT(api_build, readme_tour_program, 180)
{
	struct api_tree t;
	api_install(&t);
	char cmd[3000], src[700];
	snprintf(src, sizeof(src), "%s/tour.c", dt_test_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "awk '/api-tour/{f=1;next} f&&/^```c/{g=1;next} g&&/^```/{exit} g' '%s/README.md' > '%s' && wc -l < '%s'",
		 t.repo, src, src);
	char *lines = sh_out(cmd);
	DT_CHECK(atoi(lines) >= 20 && atoi(lines) <= 30);
	free(lines);
	char exe[800];
	api_compile(&t, src, "tour", exe, sizeof(exe));
	const char *argv[] = { exe, NULL };
	const char *env[] = { t.ld_env, "TF_CONFIG=", NULL };
	struct dt_run r;
	dt_test_run(&r, argv, env, 150);
	if (r.exit_code != 0)
		dt_test_fail(__FILE__, __LINE__, "the tour exited %d: %s", r.exit_code, r.err);
	DT_CHECK_CONTAINS(r.out, "local: test accuracy 0.8");
	DT_CHECK_CONTAINS(r.err, "[chief:0] I step 2000/2000");
	dt_run_release(&r);
}
