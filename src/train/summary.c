#include "train/summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/log.h"
#include "train/events.h"

struct dt_summary {
	struct dt_events *events;
	int64_t every, last_step;
	int batch_size;
	char problem[64];   /* "": no t2t tags */
	/* The window since the last record. */
	double loss_sum;
	int64_t correct, steps;
	int64_t counted, seqs, seqs_correct; /* text (dt_summary_text) */
	double nll_sum;
	double bleu_sum; /* translation: approx_bleu_score summed over bleu_batches batches */
	int64_t bleu_batches;
	int64_t start_ns;
	int64_t records;
	int64_t write_ns;   /* time spent building and writing records */
	int hparams;        /* the session-start summary was written: end it in dt_summary_free */
	int reached_last;   /* the last step's record was written */
};

/* One HParams plugin summary; a failure costs the summary, not the run. */
static int write_hparams(struct dt_summary *s, const char *tag, struct dt_pb *content)
{
	struct dt_err err = DT_ERR_INIT;
	if (dt_events_write_plugin(s->events, 0, tag, "hparams", content->data, content->len, &err)) {
		dt_warn("HParams summary '%s' lost (training goes on): %s", tag, err.msg);
		return 0;
	}
	return 1;
}

enum dt_status dt_summary_new(const struct dt_summary_config *cfg, struct dt_summary **out, struct dt_err *err)
{
	*out = NULL;
	DT_ASSERT(cfg->every > 0 && cfg->batch_size > 0);
	struct dt_events *ev;
	enum dt_status st = dt_events_open(cfg->dir, &ev, err);
	if (st)
		return dt_err_prefix(err, "cannot start training summaries");
	struct dt_summary *s = dt_xcalloc(1, sizeof(*s));
	s->events = ev;
	s->every = cfg->every;
	s->last_step = cfg->last_step;
	s->batch_size = cfg->batch_size;
	if (cfg->problem && strlen(cfg->problem) < sizeof(s->problem))
		snprintf(s->problem, sizeof(s->problem), "%s", cfg->problem);
	s->start_ns = dt_now_ns();
	if (cfg->hp) {
		struct dt_pb pd = { 0 };
		double now = dt_wall_seconds();
		dt__hparams_encode_experiment(&pd, cfg->hp, now);
		write_hparams(s, "_hparams_/experiment", &pd);
		pd.len = 0;
		dt__hparams_encode_session_start(&pd, cfg->hp, now);
		s->hparams = write_hparams(s, "_hparams_/session_start_info", &pd);
		dt_pb_release(&pd);
	}
	dt_debug("summaries: every %lld steps to '%s'", (long long)s->every, dt_events_path(ev));
	*out = s;
	return DT_OK;
}

void dt_summary_scalars(struct dt_summary *s, int64_t step, const char *const *tags, const float *values, int n)
{
	if (!s || n <= 0)
		return;
	struct dt_scalar *v = dt_xcalloc((size_t)n, sizeof(*v));
	for (int i = 0; i < n; i++)
		v[i] = (struct dt_scalar){ tags[i], values[i] };
	struct dt_err err = DT_ERR_INIT;
	if (dt_events_write_scalars(s->events, step, v, (size_t)n, &err))
		dt_warn("user summaries at step %lld lost (training goes on): %s", (long long)step, err.msg);
	else
		s->records++;
	free(v);
}

void dt_summary_t2t_tag(char tag[DT_SUMMARY_TAG_MAX], const char *problem, const char *metric)
{
	snprintf(tag, DT_SUMMARY_TAG_MAX, "metrics-%.64s/targets/%.40s", problem, metric);
}

static void write_window(struct dt_summary *s, int64_t step, float lr)
{
	int64_t now = dt_now_ns();
	double secs = (double)(now - s->start_ns) / 1e9;
	double steps_per_sec = secs > 0 ? (double)s->steps / secs : 0;
	const int text = s->counted > 0;
	const double secs_per_step = s->steps > 0 && secs > 0 ? secs / (double)s->steps : 0;
	struct dt_scalar v[12] = {
		{ "loss", (float)(s->loss_sum / (double)s->steps) },
		{ "accuracy", (float)(text ? (double)s->correct / (double)s->counted
				   : (double)s->correct / ((double)s->steps * s->batch_size)) },
		{ "learning_rate", lr },
		{ "global_step/sec", (float)steps_per_sec },
		{ "examples/sec", (float)(text ? (secs_per_step > 0 ? (double)s->seqs / secs : 0)
				      : steps_per_sec * s->batch_size) },
		{ "accuracy_per_sequence", (float)(text ? (double)s->seqs_correct / (double)s->seqs : 0) },
		{ "neg_log_perplexity", (float)(text ? -s->nll_sum / (double)s->counted : 0) },
		{ "approx_bleu_score", (float)(s->bleu_batches > 0 ? s->bleu_sum / (double)s->bleu_batches : 0) },
	};
	const size_t plain = !text ? 5 : s->bleu_batches > 0 ? 8 : 7;
	size_t n = plain;
	/* t2t's own tags for its metrics: accuracy (v[1]) and v[5 .. plain) */
	char tags[4][DT_SUMMARY_TAG_MAX];
	for (size_t i = 1; text && s->problem[0] && i < plain; i = i == 1 ? 5 : i + 1) {
		dt_summary_t2t_tag(tags[n - plain], s->problem, v[i].tag);
		v[n] = (struct dt_scalar){ tags[n - plain], v[i].value };
		n++;
	}
	struct dt_err err = DT_ERR_INIT;
	if (dt_events_write_scalars(s->events, step, v, n, &err))
		dt_warn("summaries at step %lld lost (training goes on): %s", (long long)step, err.msg);
	else
		s->records++;
	s->write_ns += dt_now_ns() - now;
	s->loss_sum = 0;
	s->correct = 0;
	s->counted = s->seqs = s->seqs_correct = 0;
	s->nll_sum = 0;
	s->bleu_sum = 0;
	s->bleu_batches = 0;
	s->steps = 0;
	s->start_ns = now;
}

void dt_summary_text(struct dt_summary *s, int counted, int seqs, int seqs_correct, double nll_sum, double bleu_sum,
		     int bleu_batches)
{
	if (!s || counted <= 0)
		return;
	s->counted += counted;
	s->seqs += seqs;
	s->seqs_correct += seqs_correct;
	s->nll_sum += nll_sum;
	s->bleu_sum += bleu_sum;
	s->bleu_batches += bleu_batches;
}

void dt_summary_step(struct dt_summary *s, int64_t step, float loss, int correct, float lr)
{
	if (!s)
		return;
	s->loss_sum += (double)loss;
	s->correct += correct;
	s->steps++;
	if (step % s->every == 0 || step == s->last_step)
		write_window(s, step, lr);
	if (step >= s->last_step)
		s->reached_last = 1;
}

const char *dt_summary_path(const struct dt_summary *s)
{
	return dt_events_path(s->events);
}

int64_t dt_summary_records(const struct dt_summary *s)
{
	return s->records;
}

void dt_summary_free(struct dt_summary *s)
{
	if (!s)
		return;
	if (s->hparams) {
		struct dt_pb pd = { 0 };
		dt__hparams_encode_session_end(&pd, s->reached_last, dt_wall_seconds());
		write_hparams(s, "_hparams_/session_end_info", &pd);
		dt_pb_release(&pd);
	}
	dt_debug("summaries: %lld records in '%s', %.3f ms spent writing them", (long long)s->records,
		 dt_events_path(s->events), (double)s->write_ns / 1e6);
	dt_events_free(s->events);
	free(s);
}

/* The shortest of %.15g / %.17g that reads back as the same double. */
static void format_double(double v, char *buf, size_t cap)
{
	snprintf(buf, cap, "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, cap, "%.17g", v);
}

char *dt_summary_format_flags(const struct dt_option *opts)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	DT_ASSERT(f != NULL);
	for (const struct dt_option *o = opts; o->type != DT_OPT_T_END; o++) {
		char num[40];
		switch (o->type) {
		case DT_OPT_T_BOOL:
			fprintf(f, "--%s%s\n", *(const int *)o->dest ? "" : "no", o->name);
			break;
		case DT_OPT_T_INT:
			fprintf(f, "--%s=%d\n", o->name, *(const int *)o->dest);
			break;
		case DT_OPT_T_INT64:
			fprintf(f, "--%s=%lld\n", o->name, (long long)*(const int64_t *)o->dest);
			break;
		case DT_OPT_T_DOUBLE:
			format_double(*(const double *)o->dest, num, sizeof(num));
			fprintf(f, "--%s=%s\n", o->name, num);
			break;
		case DT_OPT_T_STRING: {
			const char *v = *(const char *const *)o->dest;
			fprintf(f, "--%s=%s\n", o->name, v ? v : "");
			break;
		}
		case DT_OPT_T_GROUP:
		case DT_OPT_T_END:
			break;
		}
	}
	int closed = fclose(f); /* a memory stream: fails only without memory */
	DT_ASSERT(closed == 0);
	return text;
}

static enum dt_status write_text(const char *dir, const char *name, const char *text, struct dt_err *err)
{
	size_t cap = strlen(dir) + strlen(name) + 2;
	char *path = dt_xmalloc(cap);
	snprintf(path, cap, "%s/%s", dir, name);
	enum dt_status st = dt_write_file_atomic(path, text, strlen(text), err);
	free(path);
	return st;
}

enum dt_status dt_summary_write_run_files(const char *dir, const struct dt_hparams *hp, const char *flags_text,
					  struct dt_err *err)
{
	enum dt_status st = dt_events_make_dirs(dir, err);
	if (st)
		return st;
	char *json = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&json, &len);
	DT_ASSERT(f != NULL);
	dt_hparams_write_json(hp, f);
	int closed = fclose(f); /* a memory stream: fails only without memory */
	DT_ASSERT(closed == 0);
	st = write_text(dir, "hparams.json", json, err);
	free(json);
	if (st || !flags_text)
		return st;
	return write_text(dir, "flags.txt", flags_text, err);
}
