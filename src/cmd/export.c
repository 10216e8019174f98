/*
 * dtrain export — a trained model in another program's format.
 *
 *   dtrain export --format=keras_h5 --output_dir=DIR --to=FILE.h5 [--keras_model=PATH]
 *
 * keras_h5: the latest checkpoint of DIR (or the checkpoint file given as
 * --output_dir) as a Keras HDF5 weights file (train/keras_h5.h), which
 * model.load_weights("FILE.h5") reads. With --keras_model (the JSON the
 * model was trained from) the layers come in the model's order, as plain
 * load_weights needs; without it in name order, for
 * load_weights(..., by_name=True).
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/cmd.h"
#include "nn/keras.h"
#include "nn/model.h"
#include "train/checkpoint.h"
#include "train/keras_h5.h"

static const char usage[] = "dtrain export --format=keras_h5 --output_dir=DIR --to=FILE.h5 [--keras_model=PATH]";

int dt_cmd_export(int argc, char **argv)
{
	const char *format = "", *output_dir = "", *to = "", *keras_model = "";
	struct dt_option opts[] = {
		DT_OPT_STRING("format", &format, "FORMAT", "keras_h5: a Keras HDF5 weights file (model.load_weights)"),
		DT_OPT_STRING("output_dir", &output_dir, "DIR", "the training run's output dir (its latest checkpoint), "
			      "or one checkpoint file"),
		DT_OPT_STRING("to", &to, "FILE", "the file to write (replaced atomically)"),
		DT_OPT_STRING("keras_model", &keras_model, "PATH",
			      "the Keras JSON the model was trained from: layers in its order (plain load_weights); "
			      "without it, name order (load_weights(by_name=True))"),
		DT_OPT_END,
	};
	struct dt_args args;
	int code;
	if (!dt_cmd_parse(opts, argc, argv, usage, &args, &code))
		return code;
	struct dt_err err = DT_ERR_INIT;
	if (args.count > 0) {
		dt_err_set(&err, DT_USAGE, "unexpected argument '%s' (options are spelled --name=value)", args.items[0]);
		dt_args_release(&args);
		return dt_cmd_report(&err);
	}
	dt_args_release(&args);
	if (strcmp(format, "keras_h5") != 0) {
		dt_err_set(&err, DT_USAGE, "--format=%s: the formats are keras_h5", format);
		return dt_cmd_report(&err);
	}
	if (!*output_dir || !*to) {
		dt_err_set(&err, DT_USAGE, "export needs --output_dir and --to\nusage: %s", usage);
		return dt_cmd_report(&err);
	}
	char path[DT_CKPT_PATH_MAX];
	struct stat sb;
	if (stat(output_dir, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		enum dt_ckpt_poll res;
		int64_t step;
		if (dt_ckpt_latest_path(output_dir, path, sizeof(path), &step, &res, &err))
			return dt_cmd_report(&err);
		if (res != DT_CKPT_POLL_FOUND) {
			dt_err_set(&err, DT_CKPT, "no checkpoint in '%s' to export", output_dir);
			return dt_cmd_report(&err);
		}
	} else {
		snprintf(path, sizeof(path), "%s", output_dir);
	}
	struct dt_model *model = NULL;
	if (*keras_model) {
		struct dt_keras_info info;
		if (dt_keras_load(keras_model, 1, &model, &info, &err))
			return dt_cmd_report(&err);
	}
	int layers = 0, vars = 0;
	enum dt_status st = dt_keras_h5_export(path, model, to, &layers, &vars, &err);
	dt_model_free(model);
	if (st)
		return dt_cmd_report(&err);
	printf("exported %d variables of %d layers from '%s' to '%s' (Keras HDF5 weights, %s)\n", vars, layers, path,
	       to, *keras_model ? "model order" : "name order: load_weights(by_name=True)");
	return 0;
}
