/* The README's tour as written (issue 42): every command line of the ```sh
 * blocks that README.md, docs/DATA.md and docs/MODELS.md mark with
 * "<!-- tour" runs, in order, in a fresh folder standing for a clone after
 * `make run`, with fewer steps (tests/tools/readme_tour.sh says exactly what
 * it changes); a line that no longer runs fails the test, named with its file
 * and line. And the runner itself fails on a broken line. */
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"
#include "dt_test.h"

/* The repository (the folder above the binary's build folder) and the build folder. */
static void where(char *repo, char *bin_dir)
{
	char bin[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
	if (!realpath(dt_test_dtrain_bin(), bin))
		dt_test_fail(__FILE__, __LINE__, "cannot find the dtrain binary '%s'", dt_test_dtrain_bin());
	snprintf(a, sizeof(a), "%s", bin);
	snprintf(bin_dir, PATH_MAX, "%s", dirname(a));
	snprintf(b, sizeof(b), "%s", bin_dir);
	snprintf(repo, PATH_MAX, "%s", dirname(b));
}

/* Runs the tour of `repo` in the test's temp dir; returns its result. */
static void tour(struct dt_run *r, const char *repo, const char *bin_dir)
{
	char script[PATH_MAX + 32], work[PATH_MAX];
	snprintf(script, sizeof(script), "%s/tests/tools/readme_tour.sh", repo);
	snprintf(work, sizeof(work), "%s/clone", dt_test_tmpdir());
	dt_test_run(r, (const char *[]){ "/bin/bash", script, repo, bin_dir, work, NULL }, NULL, 540);
}

DT_TEST_TIMEOUT(readme_tour, every_tour_line_runs_as_written, 600)
{
	char repo[PATH_MAX], bin_dir[PATH_MAX];
	where(repo, bin_dir);
	struct dt_run r;
	tour(&r, repo, bin_dir);
	if (r.exit_code != 0)
		dt_test_fail(__FILE__, __LINE__, "the tour exited %d%s:\n%s\n%s", r.exit_code,
			     r.timed_out ? " (timed out)" : "", r.out, r.err);
	int lines = 0;
	const char *end = strstr(r.out, " lines ran");
	for (const char *q = end; q && q > r.out && q[-1] != '\n'; q--)
		if (sscanf(q - 1, "tour: %d lines ran", &lines) == 1)
			break;
	fprintf(stderr, "%d tour lines ran in %.0f s\n", lines, r.seconds);
	DT_CHECK(lines >= 20);
	/* the lines the issue named: Keras's MobileNetV2 from examples/keras/ and the Iris CSV */
	DT_CHECK_CONTAINS(r.out, "--keras_model=examples/keras/mobilenet_v2.json");
	DT_CHECK_CONTAINS(r.out, "--data_dir=examples/data/iris.csv");
	dt_run_release(&r);
}

/* A tour line broken on purpose (an option that does not exist) fails the
 * runner, which names the file, the line and what it printed; the lines
 * after it do not run. */
DT_TEST(readme_tour, a_broken_line_fails_the_tour_naming_it)
{
	char repo[PATH_MAX], bin_dir[PATH_MAX], fake[PATH_MAX], path[PATH_MAX + 32];
	where(repo, bin_dir);
	snprintf(fake, sizeof(fake), "%s/repo", dt_test_tmpdir());
	DT_CHECK(mkdir(fake, 0755) == 0);
	snprintf(path, sizeof(path), "%s/docs", fake);
	DT_CHECK(mkdir(path, 0755) == 0);
	snprintf(path, sizeof(path), "%s/examples", fake);
	DT_CHECK(mkdir(path, 0755) == 0);
	snprintf(path, sizeof(path), "%s/examples/fashion_mnist.yaml", fake);
	dt_test_write_file(path, "train_steps: 2400\n", 18);
	static const char readme[] = "# x\n\n<!-- tour: -->\n```sh\nbuild/dtrain --version\n"
				     "build/dtrain train --problem=synthetic --no_such_flag   # broken\n"
				     "touch ran-after-the-break\n```\n";
	snprintf(path, sizeof(path), "%s/README.md", fake);
	dt_test_write_file(path, readme, strlen(readme));
	snprintf(path, sizeof(path), "%s/docs/DATA.md", fake);
	dt_test_write_file(path, "", 0);
	snprintf(path, sizeof(path), "%s/docs/MODELS.md", fake);
	dt_test_write_file(path, "", 0);
	char script[PATH_MAX + 32], work[PATH_MAX];
	snprintf(script, sizeof(script), "%s/tests/tools/readme_tour.sh", repo);
	snprintf(work, sizeof(work), "%s/clone", dt_test_tmpdir());
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/bin/bash", script, fake, bin_dir, work, NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 1);
	DT_CHECK_CONTAINS(r.out, "tour: README.md:6 exited 2: build/dtrain train --problem=synthetic --no_such_flag");
	DT_CHECK_CONTAINS(r.out, "no_such_flag");
	snprintf(path, sizeof(path), "%s/ran-after-the-break", work);
	DT_CHECK(access(path, F_OK) != 0);
	dt_run_release(&r);
}
