/*
 * report.c — `dtrain report DIR... > report.html`: one self-contained HTML
 * page with every run's scalars over steps (training loss, learning rate,
 * throughput, each evaluation metric), the runs overlaid, and tables of
 * their final metrics and hparams (train/report.h; docs/REPORT.md).
 *
 * Each DIR is a training run's --output_dir: its event files, those of its
 * subdirectories (eval/, eval_train/) and its hparams.json. A run still
 * writing (a cut-short last record) is read up to that record and a note
 * goes to stderr and into the page. Exit codes (docs/EXIT_CODES.md): 2 for
 * a usage error, 4 when a DIR does not exist, holds no event file, or one
 * is corrupt, or the page cannot be written.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "cmd/cmd.h"
#include "train/events_read.h"
#include "train/report.h"

static const char usage[] = "dtrain report [--title=TEXT] OUTPUT_DIR [more dirs] > report.html";

/* hparams.json caps at this size (one JSON object of a few hundred names). */
#define HPARAMS_MAX ((long)16 << 20)

/* The text of DIR/hparams.json, or NULL when there is none. */
static enum dt_status read_hparams(const char *dir, char **out, struct dt_err *err)
{
	*out = NULL;
	char path[4096];
	snprintf(path, sizeof(path), "%s/hparams.json", dir);
	FILE *f = fopen(path, "re");
	if (!f) {
		if (errno == ENOENT)
			return DT_OK;
		return dt_err_set(err, DT_IO, "cannot open '%s': %s", path, strerror(errno));
	}
	char *buf = NULL;
	size_t len = 0;
	enum dt_status st = DT_OK;
	if (fseek(f, 0, SEEK_END) != 0 || ftell(f) < 0 || ftell(f) > HPARAMS_MAX) {
		st = dt_err_set(err, DT_DATA, "cannot read '%s': not a regular file of at most %ld bytes", path,
				HPARAMS_MAX);
	} else {
		len = (size_t)ftell(f);
		rewind(f);
		buf = dt_xmalloc(len + 1);
		if (fread(buf, 1, len, f) != len)
			st = dt_err_set(err, DT_IO, "cannot read '%s': %s", path, ferror(f) ? strerror(errno) : "short read");
		buf[len] = '\0';
	}
	fclose(f);
	if (st)
		free(buf);
	else
		*out = buf;
	return st;
}

/* The last component of `dir` without trailing slashes, into buf. */
static void base_name(const char *dir, char *buf, size_t cap)
{
	size_t n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	size_t start = n;
	while (start > 0 && dir[start - 1] != '/')
		start--;
	snprintf(buf, cap, "%.*s", (int)(n - start), dir + start);
}

int dt_cmd_report_page(int argc, char **argv)
{
	const char *title = "dtrain report";
	struct dt_option opts[] = {
		DT_OPT_STRING("title", &title, "TEXT", "the page's title and heading"),
		DT_OPT_END,
	};
	struct dt_args args;
	int code;
	if (!dt_cmd_parse(opts, argc, argv, usage, &args, &code))
		return code;
	if (args.count == 0) {
		fprintf(stderr, "error: expected at least one OUTPUT_DIR\nusage: %s\n", usage);
		dt_args_release(&args);
		return 2;
	}
	size_t n = (size_t)args.count;
	struct dt_ev_run *ev = dt_xcalloc(n, sizeof(*ev));
	struct dt_report_run *runs = dt_xcalloc(n, sizeof(*runs));
	char **labels = dt_xcalloc(n, sizeof(*labels));
	char **hparams = dt_xcalloc(n, sizeof(*hparams));
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st = DT_OK;
	for (size_t i = 0; i < n && !st; i++) {
		dt_ev_run_init(&ev[i]);
		st = dt_ev_read_run(&ev[i], args.items[i], &err);
		if (!st)
			st = read_hparams(args.items[i], &hparams[i], &err);
		for (size_t k = 0; k < ev[i].n_notes; k++)
			fprintf(stderr, "note: %s\n", ev[i].notes[k]);
	}
	for (size_t i = 0; i < n && !st; i++) {
		char name[1024];
		base_name(args.items[i], name, sizeof(name));
		int dup = 0;
		for (size_t k = 0; k < n; k++) {
			char other[1024];
			base_name(args.items[k], other, sizeof(other));
			dup |= k != i && strcmp(name, other) == 0;
		}
		labels[i] = dt_xstrdup(dup || !name[0] ? args.items[i] : name);
		runs[i] = (struct dt_report_run){ labels[i], &ev[i], hparams[i] };
	}
	if (!st)
		st = dt_report_write_html(stdout, "stdout", title, runs, n, &err);
	for (size_t i = 0; i < n; i++) {
		dt_ev_run_release(&ev[i]);
		free(labels[i]);
		free(hparams[i]);
	}
	free(ev);
	free(runs);
	free(labels);
	free(hparams);
	dt_args_release(&args);
	return st ? dt_cmd_report(&err) : 0;
}
