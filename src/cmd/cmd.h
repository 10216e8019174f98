/*
 * cmd.h — the subcommands of the dtrain program and what they share.
 *
 * Each subcommand lives in its own file (cmd/train.c, cmd/version.c, ...)
 * and is listed once in the table in cmd/commands.c, which main.c
 * dispatches on (git's commands[]). A command returns the process exit
 * code. cmd/ is the only layer that prints the final error and chooses the
 * exit code: library code returns a status and a message, and
 * dt_cmd_report() turns them into "error: <message>" on stderr and the
 * documented code (docs/EXIT_CODES.md).
 */
#ifndef DT_CMD_CMD_H
#define DT_CMD_CMD_H

#include <stdio.h>

#include "base/err.h"
#include "base/options.h"

struct dt_command {
	const char *name;
	int (*run)(int argc, char **argv); /* argv[0] is the command name */
	const char *summary;
};

/* The table, ended by an entry with name == NULL. */
extern const struct dt_command dt_commands[];

const struct dt_command *dt_command_find(const char *name);

/* Prints "error: <msg>" to stderr and returns the exit code of err->status. */
int dt_cmd_report(const struct dt_err *err);

/* Parses a command's options; on --help prints usage + options to stdout and
 * sets *exit_code = 0; on a usage error prints it with a pointer to --help
 * and sets *exit_code = 2. Returns 1 when the command should go on. */
int dt_cmd_parse(struct dt_option *opts, int argc, char **argv, const char *usage,
		 struct dt_args *args, int *exit_code);

/* The top-level usage: commands with summaries and the exit codes. */
void dt_cmd_print_usage(FILE *out);

int dt_cmd_train(int argc, char **argv);
int dt_cmd_evaluate(int argc, char **argv);
int dt_cmd_version(int argc, char **argv);
int dt_cmd_config(int argc, char **argv);
int dt_cmd_make_configs(int argc, char **argv);
int dt_cmd_launch(int argc, char **argv);
int dt_cmd_status(int argc, char **argv);
int dt_cmd_logs(int argc, char **argv);
int dt_cmd_monitor(int argc, char **argv);
int dt_cmd_kill(int argc, char **argv);
int dt_cmd_help(int argc, char **argv);
int dt_cmd_ckpt(int argc, char **argv);
int dt_cmd_timeline(int argc, char **argv);
int dt_cmd_export(int argc, char **argv);
int dt_cmd_decode(int argc, char **argv);
int dt_cmd_datagen(int argc, char **argv);
int dt_cmd_bleu(int argc, char **argv);
/* `dtrain report` (dt_cmd_report is the error printer above). */
int dt_cmd_report_page(int argc, char **argv);

#endif
