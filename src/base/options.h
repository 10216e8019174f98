/*
 * options.h — command-line option tables that drive both parsing and --help.
 *
 * A command declares its options once, as an array of `struct dt_option`
 * pointing at the variables they fill, ending with DT_OPT_END. The same table
 * parses argv and prints the help text, so the two cannot disagree.
 *
 *     int steps = 1000; const char *model = "cnn";
 *     struct dt_option opts[] = {
 *         DT_OPT_GROUP("Training"),
 *         DT_OPT_INT("train_steps", &steps, "N", "global steps to train"),
 *         DT_OPT_STRING("model", &model, "NAME", "model to train (mlp, lenet, cnn)"),
 *         DT_OPT_END,
 *     };
 *
 * Accepted spellings: --name=value, --name value, and for booleans --name,
 * --noname (TensorFlow's flags) and --name=true|false. Dashes and
 * underscores in names are interchangeable (--train-steps = --train_steps).
 * "--" ends the options. Positional arguments are collected in order into
 * the caller's array; argv is never modified. An unknown option is a usage
 * error that suggests the nearest known one. Each option records whether the
 * command line set it (`was_set`), so later checks can tell a default from
 * an explicit choice.
 */
#ifndef DT_BASE_OPTIONS_H
#define DT_BASE_OPTIONS_H

#include <stdint.h>
#include <stdio.h>
#include "base/err.h"

enum dt_opt_type {
	DT_OPT_T_END,
	DT_OPT_T_GROUP,  /* a heading in --help, parses nothing */
	DT_OPT_T_BOOL,   /* int *: 0 or 1 */
	DT_OPT_T_INT,    /* int * */
	DT_OPT_T_INT64,  /* int64_t * */
	DT_OPT_T_DOUBLE, /* double * */
	DT_OPT_T_STRING, /* const char **: points into argv, never copied */
};

struct dt_option {
	enum dt_opt_type type;
	const char *name;
	void *dest;
	const char *arg;  /* placeholder in help: "N", "PATH" */
	const char *help;
	int was_set;
};

#define DT_OPT_GROUP(title) { DT_OPT_T_GROUP, (title), NULL, NULL, NULL, 0 }
#define DT_OPT_BOOL(n, d, h) { DT_OPT_T_BOOL, (n), (d), NULL, (h), 0 }
#define DT_OPT_INT(n, d, a, h) { DT_OPT_T_INT, (n), (d), (a), (h), 0 }
#define DT_OPT_INT64(n, d, a, h) { DT_OPT_T_INT64, (n), (d), (a), (h), 0 }
#define DT_OPT_DOUBLE(n, d, a, h) { DT_OPT_T_DOUBLE, (n), (d), (a), (h), 0 }
#define DT_OPT_STRING(n, d, a, h) { DT_OPT_T_STRING, (n), (d), (a), (h), 0 }
#define DT_OPT_END { DT_OPT_T_END, NULL, NULL, NULL, NULL, 0 }

struct dt_args {
	int count;          /* positional arguments found */
	const char **items; /* points into argv; owned array, see dt_args_release */
	int help;           /* -h or --help was given */
};

/* Parses argv[first..argc) against `opts`. Fills dest variables and `args`.
 * On error returns DT_USAGE with a message naming the option. */
enum dt_status dt_opts_parse(struct dt_option *opts, int argc, char **argv, int first,
			     struct dt_args *args, struct dt_err *err) DT_MUST_CHECK;
void dt_args_release(struct dt_args *args);

/* Prints the option list ("  --name=ARG   help [default]") under its groups. */
void dt_opts_print_help(FILE *out, const struct dt_option *opts);

/* Looks up an option by name (dashes or underscores); NULL if absent. */
const struct dt_option *dt_opts_find(const struct dt_option *opts, const char *name);

#endif
