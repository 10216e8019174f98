/*
 * main.c — dtrain's entry point: dispatches to a subcommand (cmd/).
 *
 *   dtrain <command> [options]      see `dtrain help` for the list
 *
 * Usage errors exit 2 with the message on stderr; --help prints to stdout
 * and exits 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/strutil.h"
#include "cmd/cmd.h"

int main(int argc, char **argv)
{
	const char *level = getenv("DTRAIN_LOG_LEVEL");
	enum dt_log_level lv;
	if (level && dt_log_parse_level(level, &lv, NULL) == DT_OK)
		dt_log_set_level(lv);

	if (argc < 2) {
		dt_cmd_print_usage(stderr);
		return 2;
	}
	const char *name = argv[1];
	if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
		return dt_cmd_help(1, argv + 1);
	if (strcmp(name, "--version") == 0)
		name = "version";
	const struct dt_command *cmd = dt_command_find(name);
	if (!cmd) {
		const char *names[64];
		size_t n = 0;
		for (const struct dt_command *c = dt_commands; c->name && n < 64; c++)
			names[n++] = c->name;
		const char *near = dt_nearest(name, names, n);
		if (near)
			fprintf(stderr, "error: unknown command '%s' (did you mean '%s'?)\n", name, near);
		else
			fprintf(stderr, "error: unknown command '%s'\n", name);
		fprintf(stderr, "(see 'dtrain --help' for the commands)\n");
		return 2;
	}
	return cmd->run(argc - 1, argv + 1);
}
