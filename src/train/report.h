/*
 * report.h — one self-contained HTML page comparing training runs:
 * `dtrain report DIR... > report.html` (docs/REPORT.md).
 *
 * Input: the runs' scalars as events_read.h reads them from their output
 * directories, and each directory's hparams.json when there is one.
 * Output, in this order:
 *   1. a header: the title, the runs with their directories, and any
 *      notes from reading (a cut-short last record);
 *   2. one plot per tag, every run that has the tag overlaid in its own
 *      colour (the legend under the plot): the training tags first
 *      (loss, accuracy, learning_rate, global_step/sec, examples/sec,
 *      then the rest by name), then each subdirectory's (eval/loss,
 *      eval/accuracy, then the rest by name);
 *   3. the final metrics: each run's last value of every tag, with its step;
 *   4. the hparams: one row per name, one column per run, the rows whose
 *      values differ first and marked.
 *
 * Self-contained: inline CSS and inline SVG drawn here (polylines with
 * crisp edges, so a series' pixels carry exactly its colour, which the
 * tests check in a screenshot); no script, no font, image or link that a
 * browser would fetch. Every string from the input (tags, paths, hparam
 * names and values) is HTML-escaped.
 *
 * Colours: run i takes dt_report_colors[i % DT_REPORT_NCOLORS] (the
 * Tableau 10 palette, matplotlib's default cycle).
 */
#ifndef DT_TRAIN_REPORT_H
#define DT_TRAIN_REPORT_H

#include <stdio.h>

#include "base/err.h"
#include "train/events_read.h"

#define DT_REPORT_NCOLORS 10
/* 0xRRGGBB */
extern const unsigned dt_report_colors[DT_REPORT_NCOLORS];

/* One run of the report (all borrowed). */
struct dt_report_run {
	const char *label;             /* the legend's name (unique in a report) */
	const struct dt_ev_run *ev;    /* its scalars (ev->dir is shown beside the label) */
	const char *hparams_json;      /* the text of its hparams.json, or NULL when absent */
};

/* Writes the page to `out`. DT_IO when the stream fails (naming `out_name`);
 * DT_DATA when an hparams.json is not a JSON object (naming its run). */
enum dt_status dt_report_write_html(FILE *out, const char *out_name, const char *title,
				    const struct dt_report_run *runs, size_t n, struct dt_err *err) DT_MUST_CHECK;

#endif
