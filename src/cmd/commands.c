#include "cmd/cmd.h"
#include "cmd/secret.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"

const struct dt_command dt_commands[] = {
	{ "train", dt_cmd_train, "train a model (one process, or one task of a cluster)" },
	{ "evaluate", dt_cmd_evaluate,
	  "evaluate a checkpoint or a warm-start source once: `dtrain train --schedule=evaluate`" },
	{ "datagen", dt_cmd_datagen, "write a text problem as t2t's data files (TFRecord shards), as t2t-datagen" },
	{ "decode", dt_cmd_decode, "decode text with a trained transformer's newest checkpoint, as t2t-decoder" },
	{ "bleu", dt_cmd_bleu, "BLEU of a translation file against a reference, as t2t-bleu" },
	{ "config", dt_cmd_config, "print and check the cluster this process would join (starts nothing)" },
	{ "make-configs", dt_cmd_make_configs, "print TF_CONFIG and flags for every task, as t2t-make-tf-configs" },
	{ "launch", dt_cmd_launch, "start a whole cluster on this machine from a spec, or emit it for k8s/Slurm" },
	{ "status", dt_cmd_status, "list launched experiments, or one experiment's tasks" },
	{ "logs", dt_cmd_logs, "print (-f: follow) the output of a launched experiment's tasks" },
	{ "monitor", dt_cmd_monitor, "live CPU, memory and steps/s of a launched experiment's tasks" },
	{ "kill", dt_cmd_kill, "stop a launched experiment (-f: SIGKILL at once)" },
	{ "secret", dt_cmd_secret, "make a cluster secret: dtrain secret new PATH (docs/SECURITY.md)" },
	{ "export", dt_cmd_export, "write a checkpoint's variables for another program (Keras HDF5 weights)" },
	{ "report", dt_cmd_report_page, "one HTML page of runs' scalars over steps, final metrics and hparams" },
	{ "ckpt", dt_cmd_ckpt, "inspect or verify a checkpoint (a file, or an output dir's latest)" },
	{ "timeline", dt_cmd_timeline, "merge the tasks' --timeline files into one trace (Perfetto, chrome://tracing)" },
	{ "version", dt_cmd_version, "print the version and the libraries in use" },
	{ "help", dt_cmd_help, "show help for dtrain or one command" },
	{ NULL, NULL, NULL },
};

/* `dtrain evaluate ...` is `dtrain train --schedule=evaluate ...` (t2t's
 * schedule; a --schedule of the user's comes later and wins). */
int dt_cmd_evaluate(int argc, char **argv)
{
	char **args = dt_xcalloc((size_t)argc + 2, sizeof(*args));
	char schedule[] = "--schedule=evaluate";
	args[0] = argv[0];
	args[1] = schedule;
	for (int i = 1; i < argc; i++)
		args[i + 1] = argv[i];
	int rc = dt_cmd_train(argc + 1, args);
	free(args);
	return rc;
}

const struct dt_command *dt_command_find(const char *name)
{
	for (const struct dt_command *c = dt_commands; c->name; c++)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

int dt_cmd_report(const struct dt_err *err)
{
	fflush(stdout);
	fprintf(stderr, "error: %s\n", err->msg[0] ? err->msg : dt_status_message(err->status));
	return dt_status_exit_code(err->status);
}

int dt_cmd_parse(struct dt_option *opts, int argc, char **argv, const char *usage,
		 struct dt_args *args, int *exit_code)
{
	struct dt_err err = DT_ERR_INIT;
	if (dt_opts_parse(opts, argc, argv, 1, args, &err) != DT_OK) {
		fprintf(stderr, "error: %s\n", err.msg);
		fprintf(stderr, "usage: %s\n(see 'dtrain %s --help')\n", usage, argv[0]);
		dt_args_release(args);
		*exit_code = 2;
		return 0;
	}
	if (args->help) {
		printf("usage: %s\n", usage);
		dt_opts_print_help(stdout, opts);
		dt_args_release(args);
		*exit_code = 0;
		return 0;
	}
	return 1;
}
