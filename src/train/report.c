#include "train/report.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

const unsigned dt_report_colors[DT_REPORT_NCOLORS] = {
	0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf,
};

/* Plot geometry in SVG pixels: the plot area is [L, L+W] x [T, T+H]. */
enum { SVG_W = 640, SVG_H = 300, PLOT_L = 70, PLOT_R = 16, PLOT_T = 30, PLOT_B = 40 };
#define PLOT_W (SVG_W - PLOT_L - PLOT_R)
#define PLOT_H (SVG_H - PLOT_T - PLOT_B)
/* Series with at most this many points also get a marker at each point. */
#define MARKERS_MAX 40

static void esc(FILE *o, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", o); break;
		case '<': fputs("&lt;", o); break;
		case '>': fputs("&gt;", o); break;
		case '"': fputs("&quot;", o); break;
		case '\'': fputs("&#39;", o); break;
		default: fputc(*s, o);
		}
	}
}

/* ---- the order of the plots ---- */

/* Where a tag goes among its group's: the known tags in this order, then the rest by name. */
static int known_rank(const char *name, int eval)
{
	static const char *const train[] = { "loss", "accuracy", "learning_rate", "global_step/sec", "examples/sec" };
	static const char *const other[] = { "loss", "accuracy" };
	const char *const *k = eval ? other : train;
	int n = eval ? (int)DT_ARRAY_LEN(other) : (int)DT_ARRAY_LEN(train);
	for (int i = 0; i < n; i++)
		if (strcmp(name, k[i]) == 0)
			return i;
	return n;
}

static int cmp_series(const void *a, const void *b)
{
	const struct dt_ev_series *x = *(const struct dt_ev_series *const *)a;
	const struct dt_ev_series *y = *(const struct dt_ev_series *const *)b;
	/* the run's own tags first, then each subdirectory's, subdirectories by name */
	if ((x->prefix_len == 0) != (y->prefix_len == 0))
		return x->prefix_len == 0 ? -1 : 1;
	size_t px = x->prefix_len, py = y->prefix_len;
	int c = strncmp(x->tag, y->tag, px < py ? px : py);
	if (c || px != py)
		return c ? c : (px < py ? -1 : 1);
	int rx = known_rank(x->tag + px, px != 0), ry = known_rank(y->tag + py, py != 0);
	if (rx != ry)
		return rx < ry ? -1 : 1;
	return strcmp(x->tag, y->tag);
}

/* One series per distinct tag over all runs (pointers into the runs), sorted. */
static const struct dt_ev_series **tags_of(const struct dt_report_run *runs, size_t n, size_t *count)
{
	size_t total = 0, k = 0;
	for (size_t r = 0; r < n; r++)
		total += runs[r].ev->n_series;
	const struct dt_ev_series **out = dt_xmallocarray(total ? total : 1, sizeof(*out));
	for (size_t r = 0; r < n; r++)
		for (size_t i = 0; i < runs[r].ev->n_series; i++) {
			const struct dt_ev_series *s = &runs[r].ev->series[i];
			int seen = 0;
			for (size_t j = 0; j < k && !seen; j++)
				seen = strcmp(out[j]->tag, s->tag) == 0;
			if (!seen)
				out[k++] = s;
		}
	if (k)
		qsort(out, k, sizeof(*out), cmp_series);
	*count = k;
	return out;
}

/* ---- plots ---- */

/* A tick spacing of 1, 2 or 5 times a power of ten giving about `target` intervals. */
static double nice_step(double range, int target)
{
	double raw = range / target;
	double mag = pow(10.0, floor(log10(raw)));
	double f = raw / mag;
	return (f < 1.5 ? 1.0 : f < 3.0 ? 2.0 : f < 7.0 ? 5.0 : 10.0) * mag;
}

struct axis {
	double lo, hi, step;
};

static struct axis make_axis(double lo, double hi, int integer)
{
	if (!(hi > lo)) {
		double pad = fabs(lo) > 0 ? fabs(lo) * 0.05 : 1.0;
		lo -= pad;
		hi += pad;
	}
	double step = nice_step(hi - lo, 5);
	if (integer && step < 1)
		step = 1;
	struct axis a = { floor(lo / step) * step, ceil(hi / step) * step, step };
	if (!(a.hi > a.lo))
		a.hi = a.lo + step;
	return a;
}

static double px_x(const struct axis *a, double v)
{
	return PLOT_L + (v - a->lo) / (a->hi - a->lo) * PLOT_W;
}

static double px_y(const struct axis *a, double v)
{
	return PLOT_T + (1.0 - (v - a->lo) / (a->hi - a->lo)) * PLOT_H;
}

static void axes(FILE *o, const struct axis *xa, const struct axis *ya)
{
	fprintf(o, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fff\" stroke=\"#999\"/>\n", PLOT_L,
		PLOT_T, PLOT_W, PLOT_H);
	for (int i = 0; i <= 40; i++) {
		double v = ya->lo + i * ya->step;
		if (v > ya->hi + ya->step * 1e-9)
			break;
		double y = px_y(ya, v);
		fprintf(o, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>", PLOT_L, PLOT_L + PLOT_W,
			y, y);
		fprintf(o, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">%.4g</text>\n",
			PLOT_L - 6, y, fabs(v) < ya->step * 1e-9 ? 0.0 : v);
	}
	for (int i = 0; i <= 40; i++) {
		double v = xa->lo + i * xa->step;
		if (v > xa->hi + xa->step * 1e-9)
			break;
		double x = px_x(xa, v);
		fprintf(o, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#e5e5e5\"/>", x, x, PLOT_T,
			PLOT_T + PLOT_H);
		fprintf(o, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.10g</text>\n", x, PLOT_T + PLOT_H + 16, v);
	}
	fprintf(o, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", PLOT_L + PLOT_W / 2, SVG_H - 6);
}

/* The run's series as polylines broken at non-finite values, and markers when few. */
static void draw_series(FILE *o, const struct dt_ev_series *s, unsigned color, const struct axis *xa,
			const struct axis *ya)
{
	int open = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (!isfinite(s->value[i])) {
			if (open)
				fputs("\"/>\n", o);
			open = 0;
			continue;
		}
		if (!open)
			fprintf(o, "<polyline fill=\"none\" stroke=\"#%06x\" stroke-width=\"2\" points=\"", color);
		fprintf(o, "%s%.1f,%.1f", open ? " " : "", px_x(xa, (double)s->step[i]), px_y(ya, s->value[i]));
		open = 1;
	}
	if (open)
		fputs("\"/>\n", o);
	if (s->n > MARKERS_MAX)
		return;
	for (size_t i = 0; i < s->n; i++)
		if (isfinite(s->value[i]))
			fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#%06x\"/>", px_x(xa, (double)s->step[i]),
				px_y(ya, s->value[i]), color);
	fputc('\n', o);
}

static void plot(FILE *o, const char *tag, const struct dt_report_run *runs, size_t n)
{
	double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
	size_t skipped = 0;
	for (size_t r = 0; r < n; r++) {
		const struct dt_ev_series *s = dt_ev_find(runs[r].ev, tag);
		for (size_t i = 0; s && i < s->n; i++) {
			if (!isfinite(s->value[i])) {
				skipped++;
				continue;
			}
			xlo = fmin(xlo, (double)s->step[i]);
			xhi = fmax(xhi, (double)s->step[i]);
			ylo = fmin(ylo, s->value[i]);
			yhi = fmax(yhi, s->value[i]);
		}
	}
	fputs("<figure class=\"plot\"><figcaption>", o);
	esc(o, tag);
	fputs("</figcaption>\n", o);
	if (!(xhi >= xlo)) {
		fputs("<p class=\"note\">no finite value to plot</p></figure>\n", o);
		return;
	}
	struct axis xa = make_axis(xlo, xhi, 1), ya = make_axis(ylo, yhi, 0);
	fprintf(o, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"", SVG_W, SVG_H,
		SVG_W, SVG_H);
	esc(o, tag);
	fputs("\">\n", o);
	axes(o, &xa, &ya);
	fputs("<g shape-rendering=\"crispEdges\">\n", o);
	for (size_t r = 0; r < n; r++) {
		const struct dt_ev_series *s = dt_ev_find(runs[r].ev, tag);
		if (s)
			draw_series(o, s, dt_report_colors[r % DT_REPORT_NCOLORS], &xa, &ya);
	}
	fputs("</g></svg>\n<div class=\"legend\">", o);
	for (size_t r = 0; r < n; r++) {
		if (!dt_ev_find(runs[r].ev, tag))
			continue;
		fprintf(o, "<span><i style=\"background:#%06x\"></i>", dt_report_colors[r % DT_REPORT_NCOLORS]);
		esc(o, runs[r].label);
		fputs("</span>", o);
	}
	if (skipped)
		fprintf(o, "<span class=\"note\">%zu non-finite value(s) not drawn</span>", skipped);
	fputs("</div></figure>\n", o);
}

/* ---- tables ---- */

static void run_headers(FILE *o, const struct dt_report_run *runs, size_t n)
{
	for (size_t r = 0; r < n; r++) {
		fprintf(o, "<th><i style=\"background:#%06x\"></i>", dt_report_colors[r % DT_REPORT_NCOLORS]);
		esc(o, runs[r].label);
		fputs("</th>", o);
	}
	fputs("</tr>\n", o);
}

static void final_metrics(FILE *o, const struct dt_ev_series **tags, size_t ntags, const struct dt_report_run *runs,
			  size_t n)
{
	fputs("<h2>Final metrics</h2>\n<div class=\"scroll\"><table><tr><th>tag</th>", o);
	run_headers(o, runs, n);
	for (size_t t = 0; t < ntags; t++) {
		fputs("<tr><td>", o);
		esc(o, tags[t]->tag);
		fputs("</td>", o);
		for (size_t r = 0; r < n; r++) {
			const struct dt_ev_series *s = dt_ev_find(runs[r].ev, tags[t]->tag);
			if (!s || s->n == 0)
				fputs("<td class=\"none\">—</td>", o);
			else
				fprintf(o, "<td>%.6g <small>at step %lld</small></td>", s->value[s->n - 1],
					(long long)s->step[s->n - 1]);
		}
		fputs("</tr>\n", o);
	}
	fputs("</table></div>\n", o);
}

/* A JSON value as a table cell shows it: strings without quotes. Owned by the caller. */
static char *json_text(json_t *v)
{
	if (!v)
		return NULL;
	if (json_is_string(v))
		return dt_xstrdup(json_string_value(v));
	if (json_is_real(v)) { /* 0.05, not jansson's 17 digits 0.050000000000000003 */
		char buf[64];
		snprintf(buf, sizeof(buf), "%.10g", json_real_value(v));
		return dt_xstrdup(buf);
	}
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	char *out = dt_xstrdup(s ? s : "?");
	free(s);
	return out;
}

struct hp_row {
	const char *name;
	char **values; /* (n runs) NULL where the run lacks it */
	int differs;
};

static int cmp_rows(const void *a, const void *b)
{
	const struct hp_row *x = a, *y = b;
	if (x->differs != y->differs)
		return x->differs ? -1 : 1;
	return strcmp(x->name, y->name);
}

static enum dt_status hparams_table(FILE *o, const struct dt_report_run *runs, size_t n, struct dt_err *err)
{
	json_t **docs = dt_xcalloc(n ? n : 1, sizeof(*docs));
	enum dt_status st = DT_OK;
	int any = 0;
	for (size_t r = 0; r < n && !st; r++) {
		if (!runs[r].hparams_json)
			continue;
		json_error_t je;
		docs[r] = json_loads(runs[r].hparams_json, 0, &je);
		if (!docs[r] || !json_is_object(docs[r]))
			st = dt_err_set(err, DT_DATA, "'%s/hparams.json' is not a JSON object%s%s", runs[r].ev->dir,
					docs[r] ? "" : ": ", docs[r] ? "" : je.text);
		any = 1;
	}
	struct hp_row *rows = NULL;
	size_t nrows = 0, cap = 0;
	for (size_t r = 0; r < n && !st; r++) {
		const char *key;
		json_t *v;
		json_object_foreach(docs[r], key, v) {
			int seen = 0;
			for (size_t i = 0; i < nrows && !seen; i++)
				seen = strcmp(rows[i].name, key) == 0;
			if (seen)
				continue;
			if (nrows == cap) {
				cap = cap ? 2 * cap : 32;
				rows = dt_xrealloc(rows, cap * sizeof(*rows));
			}
			struct hp_row *row = &rows[nrows++];
			row->name = key;
			row->values = dt_xcalloc(n, sizeof(*row->values));
			row->differs = 0;
			for (size_t k = 0; k < n; k++) {
				row->values[k] = json_text(docs[k] ? json_object_get(docs[k], key) : NULL);
				if (k > 0 && (!row->values[k] != !row->values[0] ||
					      (row->values[k] && strcmp(row->values[k], row->values[0]) != 0)))
					row->differs = 1;
			}
		}
	}
	if (!st) {
		fputs("<h2>Hyper-parameters</h2>\n", o);
		if (!any)
			fputs("<p class=\"note\">no run has an hparams.json</p>\n", o);
		if (nrows)
			qsort(rows, nrows, sizeof(*rows), cmp_rows);
		if (nrows) {
			fputs("<div class=\"scroll\"><table><tr><th>hparam</th>", o);
			run_headers(o, runs, n);
		}
		for (size_t i = 0; i < nrows; i++) {
			fprintf(o, "<tr%s><td>", rows[i].differs ? " class=\"differs\"" : "");
			esc(o, rows[i].name);
			fputs("</td>", o);
			for (size_t k = 0; k < n; k++) {
				if (!rows[i].values[k]) {
					fputs("<td class=\"none\">—</td>", o);
					continue;
				}
				fputs("<td>", o);
				esc(o, rows[i].values[k]);
				fputs("</td>", o);
			}
			fputs("</tr>\n", o);
		}
		if (nrows)
			fputs("</table></div>\n", o);
	}
	for (size_t i = 0; i < nrows; i++) {
		for (size_t k = 0; k < n; k++)
			free(rows[i].values[k]);
		free(rows[i].values);
	}
	free(rows); /* row names point into docs: freed after */
	for (size_t r = 0; r < n; r++)
		json_decref(docs[r]);
	free(docs);
	return st;
}

/* ---- the page ---- */

static const char style[] =
	"body{font-family:sans-serif;margin:16px 24px;color:#222;background:#fff}"
	"h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
	".plots{display:flex;flex-wrap:wrap;gap:16px}"
	"figure.plot{margin:0;border:1px solid #ddd;padding:6px}"
	"figcaption{font-weight:bold;font-size:13px;margin-bottom:2px}"
	"svg text{font-size:11px;fill:#333;font-family:sans-serif}"
	".legend{font-size:12px;max-width:640px}.legend span{margin-right:14px;white-space:nowrap}"
	"i{display:inline-block;width:14px;height:4px;margin:0 5px 3px 0;vertical-align:middle}"
	"table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}"
	"tr.differs td{background:#fff4d6;font-weight:bold}td.none{color:#999}"
	".scroll{overflow-x:auto}.note{color:#8a5a00;font-size:12px}small{color:#777}";

static void head(FILE *o, const char *title, const struct dt_report_run *runs, size_t n)
{
	fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n", o);
	/* Nothing may be fetched: the policy forbids any load the page might make by accident. */
	fputs("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
	      "img-src data:\">\n<title>", o);
	esc(o, title);
	fprintf(o, "</title>\n<style>%s</style></head>\n<body>\n<h1>", style);
	esc(o, title);
	fputs("</h1>\n<table><tr><th>run</th><th>directory</th><th>event files</th><th>records</th>"
	      "<th>last step</th><th>wall time</th></tr>\n", o);
	for (size_t r = 0; r < n; r++) {
		const struct dt_ev_run *ev = runs[r].ev;
		int64_t last = 0;
		double t0 = INFINITY, t1 = -INFINITY;
		for (size_t i = 0; i < ev->n_series; i++) {
			const struct dt_ev_series *s = &ev->series[i];
			for (size_t k = 0; k < s->n; k++) {
				last = s->step[k] > last ? s->step[k] : last;
				t0 = fmin(t0, s->wall_time[k]);
				t1 = fmax(t1, s->wall_time[k]);
			}
		}
		fprintf(o, "<tr><td><i style=\"background:#%06x\"></i>", dt_report_colors[r % DT_REPORT_NCOLORS]);
		esc(o, runs[r].label);
		fputs("</td><td>", o);
		esc(o, ev->dir ? ev->dir : "");
		fprintf(o, "</td><td>%d</td><td>%lld</td><td>%lld</td><td>%.1f s</td></tr>\n", ev->files,
			(long long)ev->records, (long long)last, t1 >= t0 ? t1 - t0 : 0.0);
	}
	fputs("</table>\n", o);
	for (size_t r = 0; r < n; r++)
		for (size_t i = 0; i < runs[r].ev->n_notes; i++) {
			fputs("<p class=\"note\">note: ", o);
			esc(o, runs[r].ev->notes[i]);
			fputs("</p>\n", o);
		}
}

enum dt_status dt_report_write_html(FILE *out, const char *out_name, const char *title,
				    const struct dt_report_run *runs, size_t n, struct dt_err *err)
{
	head(out, title, runs, n);
	size_t ntags;
	const struct dt_ev_series **tags = tags_of(runs, n, &ntags);
	fputs("<h2>Scalars over steps</h2>\n<div class=\"plots\">\n", out);
	if (ntags == 0)
		fputs("<p class=\"note\">no scalar in these runs' event files</p>\n", out);
	for (size_t t = 0; t < ntags; t++)
		plot(out, tags[t]->tag, runs, n);
	fputs("</div>\n", out);
	final_metrics(out, tags, ntags, runs, n);
	free(tags);
	enum dt_status st = hparams_table(out, runs, n, err);
	if (st)
		return st;
	fputs("</body></html>\n", out);
	if (fflush(out) != 0 || ferror(out))
		return dt_err_set(err, DT_IO, "cannot write the report to %s", out_name);
	return DT_OK;
}
