/*
 * api_util.h — building programs against the INSTALLED libdtrain, as an
 * outside user builds them, for the API tests (tests/cli/test_api_*.c).
 *
 * api_install runs `make install NOBUILD=1 DESTDIR=<tmpdir>/root PREFIX=/usr`
 * in the repository of the dtrain binary under test (the build directory
 * beside it: build/ or build-san/), so the test sees exactly what a package
 * would ship; api_compile compiles one C file with
 * `cc prog.c $(pkg-config --cflags --libs dtrain)` against that tree
 * (PKG_CONFIG_PATH and PKG_CONFIG_SYSROOT_DIR pointing into it) and no other
 * include path, so a program that needs an internal header fails to build.
 * Programs run with LD_LIBRARY_PATH=<root>/usr/lib (api_env). Every step
 * has a deadline and fails the test on error, printing the tool's output.
 */
#ifndef DT_TEST_API_UTIL_H
#define DT_TEST_API_UTIL_H

#include <stddef.h>

#include "cli_util.h"

struct api_tree {
	char root[600];     /* the DESTDIR: <tmpdir>/root */
	char libdir[700];   /* <root>/usr/lib */
	char ld_env[760];   /* "LD_LIBRARY_PATH=<libdir>" */
	char repo[600];     /* the repository the binary under test was built in */
	char build[64];     /* its build directory's name: "build" or "build-san" */
};

/* Installs into <tmpdir>/root (see above). */
void api_install(struct api_tree *t);
/* Compiles `src` (a path; relative paths are taken from the repository) to
 * "<tmpdir>/<exe>" with -std=c11 -Wall -Wextra -Werror and the sanitizers
 * of this build; the output path goes into out (cap bytes). */
void api_compile(const struct api_tree *t, const char *src, const char *exe, char *out, size_t cap);
/* Writes `text` to "<tmpdir>/<name>.c" and compiles it as api_compile does. */
void api_compile_text(const struct api_tree *t, const char *name, const char *text, char *out, size_t cap);

#endif
