/* `dtrain report` end to end: the event-file reader against the independent
 * protobuf writer and reader (tests/tools/write_events.py, read_events.py:
 * Google's runtime, protoc-compiled event.proto); two tiny synthetic runs
 * rendered into one page (every plot, the legend, hparams that differ);
 * bad input and its exit codes; and headless Chromium (Debian's
 * `chromium`) rendering the page with the network off: no console message
 * from the page, while a control page with a fetch and a script is caught,
 * and the screenshot's pixels carry a 4-trial sweep's colours across the plots. */
#include <jansson.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"
#include "dt_test.h"
#include "train/events_read.h"
#include "train/report.h"

static void run(struct dt_run *r, const char *const *argv, double timeout_s)
{
	dt_test_run(r, argv, NULL, timeout_s);
	DT_CHECK(!r->timed_out);
}

/* The directory holding event_pb2.py (protoc at test time); skips without protoc. */
static const char *event_pb_dir(void)
{
	static char dir[512];
	if (dir[0])
		return dir;
	struct dt_run r;
	run(&r, (const char *[]){ "/bin/sh", "-c",
				  "command -v protoc >/dev/null && /usr/bin/python3 -c 'import google.protobuf'", NULL },
	    30);
	int have = r.exit_code == 0;
	dt_run_release(&r);
	if (!have)
		DT_SKIP("protoc or python3-protobuf missing (scripts/install-deps.sh installs them)");
	dt_test_path(dir, sizeof(dir), "pb");
	DT_CHECK(mkdir(dir, 0755) == 0);
	char out_flag[600];
	snprintf(out_flag, sizeof(out_flag), "--python_out=%s", dir);
	run(&r, (const char *[]){ "protoc", "-Itests/tools", out_flag, "tests/tools/event.proto", "tests/tools/hparams.proto",
				  NULL }, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	return dir;
}

DT_TEST_TIMEOUT(report, reader_reads_the_independent_writers_file, 30)
{
	char path[512];
	dt_test_path(path, sizeof(path), "events.out.tfevents.1.py");
	struct dt_run r;
	run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/write_events.py", event_pb_dir(), path, NULL }, 20);
	if (r.exit_code != 0)
		fprintf(stderr, "write_events.py: %s\n", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	json_error_t je;
	json_t *want = json_loads(r.out, 0, &je);
	DT_CHECK(want != NULL);
	dt_run_release(&r);

	struct dt_ev_run ev;
	dt_ev_run_init(&ev);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_ev_read_file(&ev, path, "", &err), &err);
	DT_CHECK_INT_EQ(ev.records, 5);
	DT_CHECK_INT_EQ(ev.n_series, 4);
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(want, "scalars"), i, v) {
		const char *tag = json_string_value(json_object_get(v, "tag"));
		int64_t step = json_integer_value(json_object_get(v, "step"));
		const struct dt_ev_series *s = dt_ev_find(&ev, tag);
		if (!s)
			dt_test_fail(__FILE__, __LINE__, "no series '%s'", tag);
		DT_CHECK(step >= 1 && (size_t)step <= s->n);
		DT_CHECK_INT_EQ(s->step[step - 1], step);
		DT_CHECK_NEAR(s->value[step - 1], json_number_value(json_object_get(v, "value")), 1e-6);
	}
	json_array_foreach(json_object_get(want, "skipped"), i, v)
		DT_CHECK(dt_ev_find(&ev, json_string_value(v)) == NULL);
	dt_ev_run_release(&ev);
	json_decref(want);
}

/* Trains a tiny synthetic run into "<tmpdir>/<name>" (with evaluations when `eval`). */
static void train_run(char *dir, size_t cap, const char *name, const char *lr, int eval)
{
	dt_test_path(dir, cap, name);
	char out[600], hp[64];
	snprintf(out, sizeof(out), "--output_dir=%s", dir);
	snprintf(hp, sizeof(hp), "--hparams=learning_rate=%s", lr);
	struct dt_run r;
	const char *argv[] = { "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=30",
			       "--save_summary_steps=5", out, hp, eval ? "--schedule=train_and_evaluate" : "--noeval",
			       NULL };
	run(&r, argv, 60);
	if (r.exit_code != 0)
		fprintf(stderr, "train %s: %s\n", name, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(report, reader_agrees_with_the_independent_reader_on_a_trained_run, 30)
{
	char dir[512], eval[600];
	train_run(dir, sizeof(dir), "run", "0.05", 1);
	snprintf(eval, sizeof(eval), "%s/eval", dir);
	struct dt_run r;
	run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/read_events.py", event_pb_dir(), dir, eval, NULL },
	    20);
	if (r.exit_code != 0)
		fprintf(stderr, "read_events.py: %s\n", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	json_error_t je;
	json_t *theirs = json_loads(r.out, 0, &je);
	DT_CHECK(theirs != NULL);
	dt_run_release(&r);

	struct dt_ev_run ev;
	dt_ev_run_init(&ev);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_ev_read_run(&ev, dir, &err), &err);
	size_t i, points = 0, seen = 0;
	json_t *v;
	for (size_t k = 0; k < ev.n_series; k++)
		points += ev.series[k].n;
	json_array_foreach(json_object_get(theirs, "scalars"), i, v) {
		const char *path = json_string_value(json_object_get(v, "path"));
		char tag[256];
		snprintf(tag, sizeof(tag), "%s%s", strstr(path, "/eval/") ? "eval/" : "",
			 json_string_value(json_object_get(v, "tag")));
		int64_t step = json_integer_value(json_object_get(v, "step"));
		const struct dt_ev_series *s = dt_ev_find(&ev, tag);
		if (!s)
			dt_test_fail(__FILE__, __LINE__, "our reader has no '%s'", tag);
		size_t k = 0;
		while (k < s->n && s->step[k] != step)
			k++;
		if (k == s->n)
			dt_test_fail(__FILE__, __LINE__, "our reader has no '%s' at step %lld", tag, (long long)step);
		DT_CHECK_NEAR(s->value[k], json_number_value(json_object_get(v, "value")), 0);
		DT_CHECK_NEAR(s->wall_time[k], json_number_value(json_object_get(v, "wall_time")), 0);
		seen++;
	}
	DT_CHECK_INT_EQ(seen, points);
	DT_CHECK(dt_ev_find(&ev, "eval/accuracy") != NULL);
	DT_CHECK_INT_EQ(dt_ev_find(&ev, "loss")->n, 6);
	dt_ev_run_release(&ev);
	json_decref(theirs);
}

/* Runs `dtrain report` on the dirs (NULL-terminated, at most 6); the page is r->out. */
static void report(struct dt_run *r, const char *const *dirs)
{
	const char *argv[10] = { "dtrain", "report" };
	int n = 2;
	for (; *dirs && n < 9; dirs++)
		argv[n++] = *dirs;
	argv[n] = NULL;
	run(r, argv, 20);
}

/* Fails when the page could make a browser fetch anything. */
static void check_self_contained(const char *html)
{
	static const char *const banned[] = { "src=", "href=", "url(", "@import", "<script", "<link", "<iframe",
					      "<object", "<embed", "http:", "https:" };
	for (size_t i = 0; i < sizeof(banned) / sizeof(banned[0]); i++)
		if (strstr(html, banned[i]))
			dt_test_fail(__FILE__, __LINE__, "the page holds '%s'", banned[i]);
}

DT_TEST_TIMEOUT(report, two_runs_render_into_one_self_contained_page, 30)
{
	char a[512], b[512];
	train_run(a, sizeof(a), "runA", "0.05", 0);
	train_run(b, sizeof(b), "runB", "0.01", 1);
	struct dt_run r;
	report(&r, (const char *[]){ a, b, NULL });
	if (r.exit_code != 0)
		fprintf(stderr, "report: %s\n", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_STR_EQ(r.err, "");
	const char *h = r.out;
	DT_CHECK(strncmp(h, "<!DOCTYPE html>", 15) == 0);
	DT_CHECK_CONTAINS(h, "</html>\n");
	static const char *const plots[] = { "loss", "accuracy", "learning_rate", "global_step/sec", "examples/sec",
					     "eval/loss", "eval/accuracy" };
	const char *prev = h;
	for (size_t i = 0; i < sizeof(plots) / sizeof(plots[0]); i++) { /* each plot, in this order */
		char cap[64];
		snprintf(cap, sizeof(cap), "<figcaption>%s</figcaption>", plots[i]);
		const char *at = strstr(h, cap);
		if (!at || at < prev)
			dt_test_fail(__FILE__, __LINE__, "no plot '%s' after the previous one", plots[i]);
		prev = at;
	}
	/* Both runs drawn in their colours, named in the legend; eval/ only runB's. */
	DT_CHECK_CONTAINS(h, "<polyline fill=\"none\" stroke=\"#1f77b4\"");
	DT_CHECK_CONTAINS(h, "<polyline fill=\"none\" stroke=\"#ff7f0e\"");
	DT_CHECK_CONTAINS(h, "<i style=\"background:#1f77b4\"></i>runA</span>");
	DT_CHECK_CONTAINS(h, "<i style=\"background:#ff7f0e\"></i>runB</span>");
	const char *ev = strstr(h, "<figcaption>eval/loss</figcaption>");
	DT_CHECK(strstr(ev, "#1f77b4") == NULL || strstr(ev, "#1f77b4") > strstr(ev, "<h2>Final metrics"));
	/* The tables: final metrics per tag, the hparams that differ first and marked. */
	DT_CHECK_CONTAINS(h, "<h2>Final metrics</h2>");
	DT_CHECK_CONTAINS(h, "<tr><td>loss</td><td>");
	DT_CHECK_CONTAINS(h, "at step 30</small>");
	DT_CHECK_CONTAINS(h, "<h2>Hyper-parameters</h2>");
	DT_CHECK_CONTAINS(h, "<tr class=\"differs\"><td>learning_rate</td><td>0.05</td><td>0.01</td></tr>");
	DT_CHECK_CONTAINS(h, "<tr><td>batch_size</td>");
	check_self_contained(h);
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(report, bad_input_exits_with_the_documented_codes, 30)
{
	char a[512], path[700], empty[512], name[700];
	struct dt_run r;
	cli_run(&r, (const char *[]){ "report", NULL }, 10);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: expected at least one OUTPUT_DIR");
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "report", "--bogus", NULL }, 10);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "report", "--help", NULL }, 10);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "usage: dtrain report");
	DT_CHECK_CONTAINS(r.out, "--title=TEXT");
	dt_run_release(&r);

	report(&r, (const char *[]){ dt_test_path(path, sizeof(path), "missing"), NULL });
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "error: cannot read run directory '");
	DT_CHECK_STR_EQ(r.out, "");
	dt_run_release(&r);

	dt_test_path(empty, sizeof(empty), "empty");
	DT_CHECK(mkdir(empty, 0755) == 0);
	report(&r, (const char *[]){ empty, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "error: no event file in '");
	DT_CHECK_CONTAINS(r.err, "hint: ");
	dt_run_release(&r);

	/* A run whose file ends inside a record (its writer still running): read up to it, with a note. */
	train_run(a, sizeof(a), "run", "0.05", 0);
	char *file = NULL;
	struct dt_run ls;
	char cmd[800];
	snprintf(cmd, sizeof(cmd), "ls %s/events.out.tfevents.*", a);
	run(&ls, (const char *[]){ "/bin/sh", "-c", cmd, NULL }, 10);
	DT_CHECK_INT_EQ(ls.exit_code, 0);
	ls.out[strcspn(ls.out, "\n")] = '\0';
	file = strdup(ls.out);
	dt_run_release(&ls);
	struct stat sb;
	DT_CHECK(stat(file, &sb) == 0);
	DT_CHECK(truncate(file, sb.st_size - 7) == 0);
	report(&r, (const char *[]){ a, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "note: '");
	DT_CHECK_CONTAINS(r.err, "read up to it (is its writer still running?)");
	DT_CHECK_CONTAINS(r.out, "<p class=\"note\">note: ");
	DT_CHECK_CONTAINS(r.out, "<figcaption>loss</figcaption>");
	dt_run_release(&r);

	/* A flipped byte inside the first record: corrupt, exit 4 naming the file. */
	FILE *f = fopen(file, "r+b");
	DT_CHECK(f != NULL);
	DT_CHECK(fseek(f, 20, SEEK_SET) == 0);
	int c = fgetc(f);
	DT_CHECK(fseek(f, 20, SEEK_SET) == 0);
	fputc(c ^ 0x40, f);
	fclose(f);
	report(&r, (const char *[]){ a, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 4);
	snprintf(name, sizeof(name), "error: corrupt event file '%s': record 0 at offset 0: data crc mismatch", file);
	DT_CHECK_CONTAINS(r.err, name);
	dt_run_release(&r);
	free(file);

	/* An hparams.json that is no JSON object. */
	char b[512], hp[700];
	train_run(b, sizeof(b), "runB", "0.05", 0);
	snprintf(hp, sizeof(hp), "%s/hparams.json", b);
	dt_test_write_file(hp, "[1, 2", 5);
	report(&r, (const char *[]){ b, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "hparams.json' is not a JSON object");
	dt_run_release(&r);
}

/* ---- headless Chromium ---- */

/* The browser's path, or NULL. */
static const char *chromium_path(void)
{
	static const char *const paths[] = { "/usr/bin/chromium", "/usr/bin/chromium-browser" };
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	return NULL;
}

/* How to run a command with no network: a new network namespace (only
 * loopback, down) as root or in a user namespace; "" when neither works,
 * and then only Chromium's own switches below keep it off the network. */
static const char *no_network_prefix(void)
{
	static const char *const tries[] = { "unshare -n", "unshare -rn" };
	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		char cmd[64];
		snprintf(cmd, sizeof(cmd), "%s true 2>/dev/null", tries[i]);
		struct dt_run r;
		run(&r, (const char *[]){ "/bin/sh", "-c", cmd, NULL }, 10);
		int ok = r.exit_code == 0;
		dt_run_release(&r);
		if (ok)
			return tries[i];
	}
	fprintf(stderr, "note: no network namespace available; Chromium runs with its proxy and resolver switched off\n");
	return "";
}

/* Renders `html` to `png` (1400x1800); returns the page's console lines
 * (":CONSOLE" lines whose source is this file), malloc'd. */
static char *render(const char *browser, const char *html, const char *png)
{
	char profile[512], cmd[3000];
	dt_test_path(profile, sizeof(profile), "chrome-profile");
	snprintf(cmd, sizeof(cmd),
		 "HOME=%s %s %s --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run "
		 "--user-data-dir=%s --proxy-server=127.0.0.1:9 --host-resolver-rules='MAP * ~NOTFOUND' "
		 "--force-device-scale-factor=1 --window-size=1400,1800 --enable-logging=stderr --log-level=0 "
		 "--screenshot=%s file://%s",
		 profile, no_network_prefix(), browser, profile, png, html);
	struct dt_run r;
	run(&r, (const char *[]){ "/bin/sh", "-c", cmd, NULL }, 60);
	struct stat sb;
	if (r.exit_code != 0 || stat(png, &sb) != 0 || sb.st_size == 0)
		dt_test_fail(__FILE__, __LINE__, "chromium wrote no screenshot (exit %d):\n%s", r.exit_code, r.err);
	char src[600];
	snprintf(src, sizeof(src), "source: file://%s", html);
	size_t cap = strlen(r.err) + 1, at = 0;
	char *out = calloc(1, cap);
	for (char *line = strtok(r.err, "\n"); line; line = strtok(NULL, "\n"))
		if (strstr(line, ":CONSOLE") && strstr(line, src))
			at += (size_t)snprintf(out + at, cap - at, "%s\n", line);
	dt_run_release(&r);
	return out;
}

struct color_hits {
	long pixels;
	int columns; /* distinct x holding the colour */
};

static struct color_hits count_color(const uint8_t *rgb, int w, int h, unsigned color)
{
	int R = (int)(color >> 16), G = (int)(color >> 8 & 0xff), B = (int)(color & 0xff);
	struct color_hits c = { 0, 0 };
	for (int x = 0; x < w; x++) {
		int hit = 0;
		for (int y = 0; y < h; y++) {
			const uint8_t *p = rgb + ((size_t)y * (size_t)w + (size_t)x) * 3;
			if (abs(p[0] - R) <= 2 && abs(p[1] - G) <= 2 && abs(p[2] - B) <= 2) {
				c.pixels++;
				hit = 1;
			}
		}
		c.columns += hit;
	}
	return c;
}

DT_TEST_TIMEOUT(report, chromium_renders_a_sweep_offline_and_the_curves_show, 60)
{
	const char *browser = chromium_path();
	if (!browser)
		DT_SKIP("chromium is not installed (scripts/install-deps.sh installs Debian's chromium)");
	/* A 4-trial sweep of the learning rate, one with evaluations. */
	char a[512], b[512], c[512], d[512], html[512], control[512], png[512], cpng[512];
	train_run(a, sizeof(a), "lr-0.05", "0.05", 0);
	train_run(b, sizeof(b), "lr-0.02", "0.02", 1);
	train_run(c, sizeof(c), "lr-0.01", "0.01", 0);
	train_run(d, sizeof(d), "lr-0.005", "0.005", 0);
	struct dt_run r;
	report(&r, (const char *[]){ a, b, c, d, NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_test_write_file(dt_test_path(html, sizeof(html), "report.html"), r.out, strlen(r.out));
	/* The control: the same page trying a fetch and a script, which the page's policy refuses. */
	char *bad = malloc(strlen(r.out) + 256);
	const char *body = strstr(r.out, "<body>\n");
	DT_CHECK(body != NULL);
	size_t head = (size_t)(body - r.out) + 7;
	int n = sprintf(bad, "%.*s<img src=\"http://example.com/x.png\"><script>console.error('dt-control')</script>%s",
			(int)head, r.out, r.out + head);
	dt_test_write_file(dt_test_path(control, sizeof(control), "control.html"), bad, (size_t)n);
	free(bad);
	dt_run_release(&r);

	char *lines = render(browser, control, dt_test_path(cpng, sizeof(cpng), "control.png"));
	if (!strstr(lines, "Content Security Policy") || !strstr(lines, "example.com"))
		dt_test_fail(__FILE__, __LINE__, "the control page's refused loads were not logged:\n%s", lines);
	free(lines);
	lines = render(browser, html, dt_test_path(png, sizeof(png), "report.png"));
	if (lines[0])
		dt_test_fail(__FILE__, __LINE__, "the page logged to the console:\n%s", lines);
	free(lines);

	png_image img;
	memset(&img, 0, sizeof(img));
	img.version = PNG_IMAGE_VERSION;
	DT_CHECK(png_image_begin_read_from_file(&img, png));
	img.format = PNG_FORMAT_RGB;
	uint8_t *rgb = malloc(PNG_IMAGE_SIZE(img));
	DT_CHECK(png_image_finish_read(&img, NULL, rgb, 0, NULL));
	int w = (int)img.width, h = (int)img.height;
	DT_CHECK_INT_EQ(w, 1400);
	/* Legend and table swatches hold ~600 pixels of a colour over ~150
	 * columns; curves across the plots hold thousands over most of the width
	 * (each run's learning-rate and throughput curves differ from the others',
	 * so none is hidden under a later one). */
	for (int run_i = 0; run_i < 4; run_i++) {
		struct color_hits hits = count_color(rgb, w, h, dt_report_colors[run_i]);
		if (hits.pixels < 2000 || hits.columns < 300)
			dt_test_fail(__FILE__, __LINE__, "run %d's colour #%06x: %ld pixels over %d columns, want >= 2000 over "
				     ">= 300", run_i, dt_report_colors[run_i], hits.pixels, hits.columns);
	}
	struct color_hits none = count_color(rgb, w, h, dt_report_colors[4]); /* no fifth run */
	DT_CHECK(none.pixels < 20);
	free(rgb);
	png_image_free(&img);
}
