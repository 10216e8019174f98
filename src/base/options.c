#include "base/options.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"

/* Compares an option name with the text typed, treating '-' and '_' alike;
 * `len` bounds the typed text (it may continue with "=value"). */
static int name_matches(const char *name, const char *typed, size_t len)
{
	size_t i = 0;
	for (; i < len && name[i]; i++) {
		char a = name[i] == '-' ? '_' : name[i];
		char b = typed[i] == '-' ? '_' : typed[i];
		if (a != b)
			return 0;
	}
	return i == len && name[i] == '\0';
}

static struct dt_option *find_mut(struct dt_option *opts, const char *typed, size_t len)
{
	for (struct dt_option *o = opts; o->type != DT_OPT_T_END; o++)
		if (o->type != DT_OPT_T_GROUP && name_matches(o->name, typed, len))
			return o;
	return NULL;
}

const struct dt_option *dt_opts_find(const struct dt_option *opts, const char *name)
{
	return find_mut((struct dt_option *)(uintptr_t)opts, name, strlen(name));
}

static enum dt_status unknown_option(const struct dt_option *opts, const char *typed, size_t len,
				     struct dt_err *err)
{
	char word[128];
	snprintf(word, sizeof(word), "%.*s", (int)(len < 120 ? len : 120), typed);
	for (char *p = word; *p; p++)
		if (*p == '-')
			*p = '_';
	const char *names[256];
	size_t n = 0;
	for (const struct dt_option *o = opts; o->type != DT_OPT_T_END && n < 256; o++)
		if (o->type != DT_OPT_T_GROUP)
			names[n++] = o->name;
	const char *near = dt_nearest(word, names, n);
	if (near)
		return dt_err_set(err, DT_USAGE, "unknown option '--%.*s' (did you mean '--%s'?)", (int)len, typed, near);
	return dt_err_set(err, DT_USAGE, "unknown option '--%.*s' (see --help for the options)", (int)len, typed);
}

static enum dt_status store_value(struct dt_option *o, const char *value, struct dt_err *err)
{
	char what[96];
	snprintf(what, sizeof(what), "--%s", o->name);
	enum dt_status st = DT_OK;
	int64_t i64;
	switch (o->type) {
	case DT_OPT_T_BOOL:
		st = dt_parse_bool(value, (int *)o->dest, what, err);
		break;
	case DT_OPT_T_INT:
		st = dt_parse_i64(value, INT32_MIN, INT32_MAX, &i64, what, err);
		if (!st)
			*(int *)o->dest = (int)i64;
		break;
	case DT_OPT_T_INT64:
		st = dt_parse_i64(value, INT64_MIN, INT64_MAX, &i64, what, err);
		if (!st)
			*(int64_t *)o->dest = i64;
		break;
	case DT_OPT_T_DOUBLE:
		st = dt_parse_double(value, (double *)o->dest, what, err);
		break;
	case DT_OPT_T_STRING:
		*(const char **)o->dest = value;
		break;
	case DT_OPT_T_END:
	case DT_OPT_T_GROUP:
		DT_ASSERT(!"not a value option");
	}
	if (!st)
		o->was_set = 1;
	return st;
}

/* Two options with one name would make the second unreachable: our bug. */
static void assert_unique_names(const struct dt_option *opts)
{
	for (const struct dt_option *a = opts; a->type != DT_OPT_T_END; a++) {
		if (a->type == DT_OPT_T_GROUP)
			continue;
		for (const struct dt_option *b = a + 1; b->type != DT_OPT_T_END; b++)
			DT_ASSERT(b->type == DT_OPT_T_GROUP || !name_matches(a->name, b->name, strlen(b->name)));
	}
}

enum dt_status dt_opts_parse(struct dt_option *opts, int argc, char **argv, int first,
			     struct dt_args *args, struct dt_err *err)
{
	assert_unique_names(opts);
	args->count = 0;
	args->help = 0;
	args->items = dt_xcalloc((size_t)(argc > 0 ? argc : 1), sizeof(*args->items));
	int only_positional = 0;
	for (int i = first; i < argc; i++) {
		const char *a = argv[i];
		if (only_positional || a[0] != '-' || a[1] == '\0') {
			args->items[args->count++] = a;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			only_positional = 1;
			continue;
		}
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			args->help = 1;
			continue;
		}
		if (a[1] != '-')
			return dt_err_set(err, DT_USAGE, "unknown option '%s' (options are spelled --name=value)", a);
		const char *name = a + 2;
		const char *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		struct dt_option *o = find_mut(opts, name, len);
		if (!o && !eq && len > 2 && strncmp(name, "no", 2) == 0) {
			/* TensorFlow's --noflag spelling of a false boolean. */
			struct dt_option *neg = find_mut(opts, name + 2, len - 2);
			if (neg && neg->type == DT_OPT_T_BOOL) {
				*(int *)neg->dest = 0;
				neg->was_set = 1;
				continue;
			}
		}
		if (!o)
			return unknown_option(opts, name, len, err);
		const char *value;
		if (eq) {
			value = eq + 1;
		} else if (o->type == DT_OPT_T_BOOL) {
			value = "true";
		} else if (i + 1 < argc) {
			value = argv[++i];
		} else {
			return dt_err_set(err, DT_USAGE, "option '--%s' needs a value (--%s=%s)", o->name, o->name,
					  o->arg ? o->arg : "VALUE");
		}
		enum dt_status st = store_value(o, value, err);
		if (st)
			return st;
	}
	return DT_OK;
}

void dt_args_release(struct dt_args *args)
{
	if (!args)
		return;
	free(args->items);
	args->items = NULL;
	args->count = 0;
}

static void format_default(const struct dt_option *o, char *buf, size_t cap)
{
	buf[0] = '\0';
	switch (o->type) {
	case DT_OPT_T_BOOL:
		if (*(const int *)o->dest)
			snprintf(buf, cap, " [default: true]");
		break;
	case DT_OPT_T_INT:
		snprintf(buf, cap, " [default: %d]", *(const int *)o->dest);
		break;
	case DT_OPT_T_INT64:
		snprintf(buf, cap, " [default: %lld]", (long long)*(const int64_t *)o->dest);
		break;
	case DT_OPT_T_DOUBLE:
		snprintf(buf, cap, " [default: %g]", *(const double *)o->dest);
		break;
	case DT_OPT_T_STRING: {
		const char *s = *(const char *const *)o->dest;
		if (s && *s)
			snprintf(buf, cap, " [default: %s]", s);
		break;
	}
	case DT_OPT_T_END:
	case DT_OPT_T_GROUP:
		break;
	}
}

void dt_opts_print_help(FILE *out, const struct dt_option *opts)
{
	for (const struct dt_option *o = opts; o->type != DT_OPT_T_END; o++) {
		if (o->type == DT_OPT_T_GROUP) {
			fprintf(out, "\n%s:\n", o->name);
			continue;
		}
		char left[96];
		if (o->type == DT_OPT_T_BOOL)
			snprintf(left, sizeof(left), "--%s", o->name);
		else
			snprintf(left, sizeof(left), "--%s=%s", o->name, o->arg ? o->arg : "VALUE");
		char def[160];
		format_default(o, def, sizeof(def));
		if (strlen(left) > 26)
			fprintf(out, "  %s\n  %-26s  %s%s\n", left, "", o->help, def);
		else
			fprintf(out, "  %-26s  %s%s\n", left, o->help, def);
	}
}
