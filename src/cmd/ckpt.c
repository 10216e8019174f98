/*
 * dtrain ckpt — look at checkpoints (train/checkpoint.h).
 *
 *   dtrain ckpt inspect PATH   step, tensors (name, dtype, shape, kind, bytes),
 *                              metadata, size, and whether the CRCs match
 *   dtrain ckpt verify PATH    exit 0 when the checkpoint is intact (header
 *                              checksum, model_signature, data CRC), else 4
 *                              with the reason
 *
 * PATH is a .safetensors file or an output directory (then its latest
 * checkpoint, from the state file).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "cmd/cmd.h"
#include "train/checkpoint.h"

static const char usage_inspect[] = "dtrain ckpt inspect PATH  (a checkpoint file, or an output dir: its latest)";
static const char usage_verify[] = "dtrain ckpt verify PATH  (a checkpoint file, or an output dir: its latest)";
static const char usage[] = "dtrain ckpt inspect|verify PATH";

/* PATH as given, or the latest checkpoint of the directory PATH. */
static enum dt_status resolve_path(const char *arg, char *buf, size_t cap, struct dt_err *err)
{
	struct stat sb;
	if (stat(arg, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		snprintf(buf, cap, "%s", arg);
		return DT_OK;
	}
	enum dt_ckpt_poll res;
	int64_t step;
	enum dt_status st = dt_ckpt_latest_path(arg, buf, cap, &step, &res, err);
	if (st)
		return st;
	if (res == DT_CKPT_POLL_NONE)
		return dt_err_set(err, DT_CKPT, "no checkpoint in '%s' (no state file and no model.ckpt-*.safetensors)",
				  arg);
	if (res == DT_CKPT_POLL_RETRY)
		return dt_err_set(err, DT_CKPT, "the state file of '%s' names '%s', which does not exist", arg, buf);
	return DT_OK;
}

/* Parses "ckpt <action> [options] PATH"; returns 1 with *path set to go on. */
static int parse(int argc, char **argv, const char *use, const char **path, int *code)
{
	struct dt_option opts[] = { DT_OPT_END };
	struct dt_args args;
	if (!dt_cmd_parse(opts, argc, argv, use, &args, code))
		return 0;
	if (args.count != 1) {
		fprintf(stderr, "error: expected one PATH, got %d argument(s)\nusage: %s\n", args.count, use);
		dt_args_release(&args);
		*code = 2;
		return 0;
	}
	*path = args.items[0];
	dt_args_release(&args);
	return 1;
}

static void print_shape(const struct dt_st_tensor_info *t, char *buf, size_t cap)
{
	size_t at = (size_t)snprintf(buf, cap, "[");
	for (int d = 0; d < t->ndim && at < cap; d++)
		at += (size_t)snprintf(buf + at, cap - at, "%s%" PRId64, d ? ", " : "", t->shape[d]);
	if (at < cap)
		snprintf(buf + at, cap - at, "]");
}

static int inspect(const char *arg)
{
	struct dt_err err = DT_ERR_INIT;
	char path[DT_CKPT_PATH_MAX];
	struct dt_st_file *f;
	if (resolve_path(arg, path, sizeof(path), &err) || dt_st_open(path, &f, &err))
		return dt_cmd_report(&err);
	const char *step = dt_st_meta(f, "global_step");
	printf("checkpoint: %s\n", path);
	printf("global_step: %s\n", step ? step : "(none)");
	printf("size: %" PRIu64 " bytes (%.2f MiB): header %" PRIu64 " bytes, %d tensor(s), %" PRIu64 " data bytes\n",
	       f->file_size, (double)f->file_size / (1024.0 * 1024.0), f->header_len, f->num_tensors,
	       f->file_size - f->data_start);
	int w = 4;
	for (int i = 0; i < f->num_tensors; i++) {
		int n = (int)strlen(f->tensors[i].name);
		w = n > w ? n : w;
	}
	printf("tensors:\n  %-*s  %-5s  %-20s  %-14s  %s\n", w, "name", "dtype", "shape", "kind", "bytes");
	uint64_t params = 0;
	for (int i = 0; i < f->num_tensors; i++) {
		const struct dt_st_tensor_info *t = &f->tensors[i];
		char shape[128];
		print_shape(t, shape, sizeof(shape));
		printf("  %-*s  %-5s  %-20s  %-14s  %" PRIu64 "\n", w, t->name, dt_st_dtype_name(t->dtype), shape,
		       dt_ckpt_tensor_kind(f, t->name), t->end - t->begin);
		params += t->end - t->begin;
	}
	printf("metadata:\n");
	for (int i = 0; i < f->num_meta; i++)
		printf("  %s: %s\n", f->meta_keys[i], f->meta_values[i]);
	if (!dt_st_meta(f, "format")) {
		/* Another writer's safetensors file: its layout is valid, there is no CRC to check. */
		printf("verify: not a dtrain checkpoint (no \"format\" in __metadata__): layout valid, no checksum\n");
		dt_st_free(f);
		return 0;
	}
	struct dt_err verr = DT_ERR_INIT;
	int ok = dt_ckpt_verify(f, NULL, &verr) == DT_OK;
	printf("verify: %s%s\n", ok ? "ok" : "FAILED: ", ok ? "" : verr.msg);
	fflush(stdout);
	dt_st_free(f);
	if (!ok)
		return dt_cmd_report(&verr);
	return 0;
}

static int verify(const char *arg)
{
	struct dt_err err = DT_ERR_INIT;
	char path[DT_CKPT_PATH_MAX];
	struct dt_st_file *f;
	if (resolve_path(arg, path, sizeof(path), &err) || dt_st_open(path, &f, &err))
		return dt_cmd_report(&err);
	enum dt_status st = dt_ckpt_verify(f, NULL, &err);
	if (!st) {
		const char *hcrc = dt_st_meta(f, "header_crc32c");
		printf("ok: %s (step %s, %d tensors, crc32c %s, %s%s)\n", path, dt_st_meta(f, "global_step"),
		       f->num_tensors, dt_st_meta(f, "crc32c"), hcrc ? "header_crc32c " : "",
		       hcrc ? hcrc : "format " DT_CKPT_FORMAT_V1 ": no header checksum, header checked against its "
				     "own tensors only");
	}
	dt_st_free(f);
	return st ? dt_cmd_report(&err) : 0;
}

int dt_cmd_ckpt(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		FILE *out = argc < 2 ? stderr : stdout;
		fprintf(out, "usage: %s\n\n  inspect PATH   step, tensors, shapes, dtypes, metadata, size, CRC check\n"
			     "  verify PATH    exit 0 if the checkpoint is intact, else 4 with the reason\n\n"
			     "PATH is a checkpoint file or an output dir (then its latest checkpoint).\n", usage);
		return argc < 2 ? 2 : 0;
	}
	const char *action = argv[1];
	int is_inspect = strcmp(action, "inspect") == 0;
	if (!is_inspect && strcmp(action, "verify") != 0) {
		fprintf(stderr, "error: unknown ckpt action '%s'; valid: inspect, verify\nusage: %s\n", action, usage);
		return 2;
	}
	/* argv for the action: "ckpt inspect" names it in usage errors. */
	char name[32];
	snprintf(name, sizeof(name), "ckpt %s", action);
	char **sub = dt_xcalloc((size_t)argc, sizeof(char *));
	sub[0] = name;
	for (int i = 2; i < argc; i++)
		sub[i - 1] = argv[i];
	const char *path;
	int code;
	int go = parse(argc - 1, sub, is_inspect ? usage_inspect : usage_verify, &path, &code);
	if (go)
		code = is_inspect ? inspect(path) : verify(path);
	free(sub);
	return code;
}
