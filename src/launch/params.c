/*
 * params.c — trials from parameters, and "{{ name }}" templates (params.h).
 * The YAML side of `parameters:` is read in spec.c with the rest of the spec.
 */
#include "launch/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"

void dt_launch_sweep_free(struct dt_launch_sweep *sw)
{
	if (!sw)
		return;
	for (int i = 0; i < sw->nparams; i++) {
		free(sw->params[i].name);
		for (int j = 0; j < sw->params[i].nvalues; j++)
			free(sw->params[i].values[j]);
		free(sw->params[i].values);
	}
	free(sw->params);
	free(sw->text);
	free(sw->metric);
	free(sw);
}

void dt_launch_values_free(char **values)
{
	for (int i = 0; values && values[i]; i++)
		free(values[i]);
	free(values);
}

/* A double in [0, 1) with 53 random bits. */
static double unit(struct dt_rng *rng)
{
	return (double)(dt_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

static char *draw(const struct dt_launch_param *p, struct dt_rng *rng)
{
	char buf[64];
	if (p->kind == DT_PARAM_VALUES)
		return dt_xstrdup(p->values[dt_rng_below(rng, (uint64_t)p->nvalues)]);
	if (p->integer) {
		long long lo = (long long)p->min, hi = (long long)p->max;
		snprintf(buf, sizeof(buf), "%lld", lo + (long long)dt_rng_below(rng, (uint64_t)(hi - lo) + 1));
		return dt_xstrdup(buf);
	}
	double u = unit(rng), v;
	if (p->log_scale)
		v = exp(log(p->min) + u * (log(p->max) - log(p->min)));
	else
		v = p->min + u * (p->max - p->min);
	snprintf(buf, sizeof(buf), "%.6g", v);
	return dt_xstrdup(buf);
}

char **dt_launch_trial_values(const struct dt_launch_sweep *sw, int64_t k)
{
	DT_ASSERT(k >= 1 && k <= sw->ntrials);
	char **out = dt_xcalloc((size_t)sw->nparams + 1, sizeof(char *));
	if (sw->search == DT_SEARCH_RANDOM) {
		for (int i = 0; i < sw->nparams; i++) {
			/* One generator per trial and parameter: adding a parameter
			 * does not move the others' draws. */
			struct dt_rng rng;
			char purpose[160];
			snprintf(purpose, sizeof(purpose), "sweep/%s", sw->params[i].name);
			dt_rng_derive(&rng, sw->seed, purpose, (uint64_t)k);
			out[i] = draw(&sw->params[i], &rng);
		}
		return out;
	}
	int64_t index = k - 1;
	for (int i = sw->nparams - 1; i >= 0; i--) { /* the last parameter varies fastest */
		const struct dt_launch_param *p = &sw->params[i];
		DT_ASSERT(p->kind == DT_PARAM_VALUES && p->nvalues > 0);
		out[i] = dt_xstrdup(p->values[index % p->nvalues]);
		index /= p->nvalues;
	}
	return out;
}

void dt_launch_values_line(const struct dt_launch_sweep *sw, char *const *values, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int i = 0; i < sw->nparams && used < cap; i++) {
		int n = snprintf(buf + used, cap - used, "%s%s=%s", i ? " " : "", sw->params[i].name, values[i]);
		if (n < 0)
			break;
		used += (size_t)n;
	}
}

static int name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
	       c == '.';
}

enum dt_status dt_launch_template_expand(const char *text, const struct dt_launch_sweep *sw, char *const *values,
					 unsigned char *used, char **out, size_t *where, struct dt_err *err)
{
	if (!strstr(text, "{{")) {
		*out = dt_xstrdup(text);
		return DT_OK;
	}
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	DT_ASSERT(f);
	const char *p = text;
	enum dt_status st = DT_OK;
	for (;;) {
		const char *open = strstr(p, "{{");
		if (!open) {
			fputs(p, f);
			break;
		}
		fwrite(p, 1, (size_t)(open - p), f);
		const char *q = open + 2;
		while (*q == ' ')
			q++;
		const char *name = q;
		while (name_char(*q))
			q++;
		size_t nlen = (size_t)(q - name);
		while (*q == ' ')
			q++;
		*where = (size_t)(open - text);
		if (nlen == 0 || q[0] != '}' || q[1] != '}') {
			st = dt_err_set(err, DT_CONFIG, "broken placeholder at '%.*s': write '{{ name }}' with a parameter's "
							"name", (int)strcspn(open, "\n") < 40 ? (int)strcspn(open, "\n") : 40, open);
			break;
		}
		int found = -1;
		for (int i = 0; sw && i < sw->nparams; i++)
			if (strlen(sw->params[i].name) == nlen && !strncmp(sw->params[i].name, name, nlen))
				found = i;
		if (found < 0) {
			char names[512] = "";
			size_t nused = 0;
			for (int i = 0; sw && i < sw->nparams && nused < sizeof(names); i++) {
				int n = snprintf(names + nused, sizeof(names) - nused, "%s%s", i ? ", " : "", sw->params[i].name);
				nused += n > 0 ? (size_t)n : 0;
			}
			if (sw && sw->nparams)
				st = dt_err_set(err, DT_CONFIG, "unknown parameter '%.*s' in '{{ %.*s }}'; parameters: %s",
						(int)nlen, name, (int)nlen, name, names);
			else
				st = dt_err_set(err, DT_CONFIG, "unknown parameter '%.*s' in '{{ %.*s }}': the spec has no "
								"'parameters:'", (int)nlen, name, (int)nlen, name);
			break;
		}
		if (used)
			used[found] = 1;
		fputs(values[found], f);
		p = q + 2;
	}
	fclose(f);
	if (st) {
		free(buf);
		return st;
	}
	*out = buf;
	return DT_OK;
}

/* Whether YAML reads `v` back as the number it looks like (then unquoted). */
static int plain_number(const char *v)
{
	char *end = NULL;
	if (!*v || strspn(v, "0123456789+-.eE") != strlen(v))
		return 0;
	(void)strtod(v, &end);
	return end && !*end && strcmp(v, ".") && strcmp(v, "-") && strcmp(v, "+");
}

void dt_launch_values_yaml(const struct dt_launch_sweep *sw, char *const *values, char **text, size_t *len)
{
	FILE *f = open_memstream(text, len);
	DT_ASSERT(f);
	for (int i = 0; i < sw->nparams; i++) {
		fprintf(f, "%s: ", sw->params[i].name);
		const char *v = values[i];
		if (plain_number(v)) {
			fprintf(f, "%s\n", v);
			continue;
		}
		fputc('"', f);
		for (; *v; v++) {
			if (*v == '"' || *v == '\\')
				fprintf(f, "\\%c", *v);
			else if ((unsigned char)*v < 0x20)
				fprintf(f, "\\x%02x", (unsigned char)*v);
			else
				fputc(*v, f);
		}
		fputs("\"\n", f);
	}
	fclose(f);
}
