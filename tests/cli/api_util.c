#include "api_util.h"

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef DT_TEST_SANITIZE
#define DT_TEST_SANITIZE ""
#endif

/* Runs `sh -c cmd` with a deadline; fails the test with its output unless it exits 0. */
static void sh_ok(const char *what, const char *cmd, double timeout_s)
{
	const char *argv[] = { "/bin/sh", "-c", cmd, NULL };
	struct dt_run r;
	dt_test_run(&r, argv, NULL, timeout_s);
	if (r.exit_code != 0 || r.timed_out)
		dt_test_fail(__FILE__, __LINE__, "%s failed (exit %d%s):\n  %s\n--- stdout\n%s\n--- stderr\n%s", what,
			     r.exit_code, r.timed_out ? ", timed out" : "", cmd, r.out, r.err);
	dt_run_release(&r);
}

void api_install(struct api_tree *t)
{
	memset(t, 0, sizeof(*t));
	char bin[PATH_MAX];
	if (!realpath(dt_test_dtrain_bin(), bin))
		dt_test_fail(__FILE__, __LINE__, "cannot find the dtrain binary '%s'", dt_test_dtrain_bin());
	char b1[PATH_MAX], b2[PATH_MAX];
	snprintf(b1, sizeof(b1), "%s", bin);
	char *build_dir = dirname(b1); /* .../build */
	snprintf(b2, sizeof(b2), "%s", build_dir);
	snprintf(t->build, sizeof(t->build), "%s", basename(b2));
	snprintf(t->repo, sizeof(t->repo), "%s", dirname(build_dir));
	snprintf(t->root, sizeof(t->root), "%s/root", dt_test_tmpdir());
	snprintf(t->libdir, sizeof(t->libdir), "%s/usr/lib", t->root);
	snprintf(t->ld_env, sizeof(t->ld_env), "LD_LIBRARY_PATH=%s", t->libdir);
	char cmd[2400];
	snprintf(cmd, sizeof(cmd),
		 "make --no-print-directory -s -C '%s' install NOBUILD=1 BUILD='%s' SANITIZE='%s' DESTDIR='%s' "
		 "PREFIX=/usr",
		 t->repo, t->build, DT_TEST_SANITIZE, t->root);
	sh_ok("make install", cmd, 120);
}

void api_compile(const struct api_tree *t, const char *src, const char *exe, char *out, size_t cap)
{
	char path[1024];
	if (src[0] == '/')
		snprintf(path, sizeof(path), "%s", src);
	else
		snprintf(path, sizeof(path), "%s/%s", t->repo, src);
	snprintf(out, cap, "%s/%s", dt_test_tmpdir(), exe);
	char san[160] = "";
	if (DT_TEST_SANITIZE[0])
		snprintf(san, sizeof(san), "-fsanitize=%s -fno-omit-frame-pointer", DT_TEST_SANITIZE);
	char cmd[8192];
	snprintf(cmd, sizeof(cmd),
		 "cc -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror %s '%s' -o '%s' "
		 "$(PKG_CONFIG_PATH='%s/pkgconfig' PKG_CONFIG_SYSROOT_DIR='%s' pkg-config --cflags --libs dtrain) -lm",
		 san, path, out, t->libdir, t->root);
	sh_ok("compiling against the installed library", cmd, 120);
}

void api_compile_text(const struct api_tree *t, const char *name, const char *text, char *out, size_t cap)
{
	char src[700];
	snprintf(src, sizeof(src), "%s/%s.c", dt_test_tmpdir(), name);
	dt_test_write_file(src, text, strlen(text));
	api_compile(t, src, name, out, cap);
}
