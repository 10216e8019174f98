/* dtrain help [COMMAND] — the command list, or one command's --help. */
#include <stdio.h>

#include "cmd/cmd.h"

void dt_cmd_print_usage(FILE *out)
{
	fprintf(out, "usage: dtrain <command> [options]\n\ncommands:\n");
	for (const struct dt_command *c = dt_commands; c->name; c++)
		fprintf(out, "  %-14s %s\n", c->name, c->summary);
	fprintf(out, "\nRun 'dtrain <command> --help' for a command's options.\n"
		     "Exit codes: 0 ok, 1 runtime failure, 2 usage or configuration,\n"
		     "3 peer failure or timeout (retryable), 4 checkpoint or data I/O.\n");
}

int dt_cmd_help(int argc, char **argv)
{
	if (argc >= 2 && argv[1][0] != '-') {
		const struct dt_command *c = dt_command_find(argv[1]);
		if (!c) {
			fprintf(stderr, "error: unknown command '%s'\n", argv[1]);
			return 2;
		}
		char help_flag[] = "--help";
		char *sub[] = { argv[1], help_flag, NULL };
		return c->run(2, sub);
	}
	dt_cmd_print_usage(stdout);
	return 0;
}

