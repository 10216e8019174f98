/* libFuzzer target: the command-line option parser (base/options.c).
 * The input is split at NUL bytes into argv entries. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char *copy = malloc(size + 1);
	memcpy(copy, data, size);
	copy[size] = '\0';
	char *argv[66];
	int argc = 0;
	argv[argc++] = (char *)"cmd";
	for (size_t i = 0; i < size && argc < 64;) {
		argv[argc++] = copy + i;
		i += strlen(copy + i) + 1;
	}
	argv[argc] = NULL;

	int steps = 0, flag = 0;
	int64_t big = 0;
	double lr = 0;
	const char *name = "";
	struct dt_option opts[] = {
		DT_OPT_GROUP("g"),
		DT_OPT_INT("train_steps", &steps, "N", "steps"),
		DT_OPT_INT64("seed", &big, "N", "seed"),
		DT_OPT_DOUBLE("learning_rate", &lr, "LR", "lr"),
		DT_OPT_STRING("model", &name, "NAME", "model"),
		DT_OPT_BOOL("sync", &flag, "sync"),
		DT_OPT_END,
	};
	struct dt_args args;
	struct dt_err err = DT_ERR_INIT;
	if (dt_opts_parse(opts, argc, argv, 1, &args, &err) == DT_OK) {
		for (int i = 0; i < args.count; i++)
			(void)strlen(args.items[i]);
	}
	dt_args_release(&args);
	free(copy);
	return 0;
}
