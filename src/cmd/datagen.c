/*
 * dtrain datagen — t2t-datagen: writes a text problem's examples as t2t's
 * data files (TFRecord shards of tf.train.Example, data/text.h), which
 * `dtrain train --data_dir` then reads, as t2t-trainer does.
 *
 *   dtrain datagen --problem=algorithmic_reverse_binary40 --data_dir=D
 *   dtrain datagen --problem=text2text_tmpdir --data_dir=D --tmp_dir=T
 *   dtrain datagen --problem=translate_ende_wmt32k --data_dir=D --tmp_dir=T
 *     (T holds t2t's WMT archives, data/wmt.h)
 */
#include <stdint.h>
#include <stdio.h>

#include "base/log.h"
#include "cmd/cmd.h"
#include "data/text.h"
#include "data/wmt.h"

static const char usage[] = "dtrain datagen --problem=NAME --data_dir=DIR [--tmp_dir=DIR] [--num_shards=N] [--seed=N]";

int dt_cmd_datagen(int argc, char **argv)
{
	const char *problem = "", *data_dir = "", *tmp_dir = "", *log_level = "info";
	int num_shards = 0;
	int64_t seed = 1;
	struct dt_option opts[] = {
		DT_OPT_STRING("problem", &problem, "NAME", "the text problem (t2t's name)"),
		DT_OPT_STRING("data_dir", &data_dir, "DIR", "where the TFRecord files go (created if missing)"),
		DT_OPT_STRING("tmp_dir", &tmp_dir, "DIR", "the source files (text2text_tmpdir's *.train.txt, *.eval.txt; the WMT problems' archives)"),
		DT_OPT_INT("num_shards", &num_shards, "N", "training files [default: the problem's, t2t's: 10 or 100]"),
		DT_OPT_INT64("seed", &seed, "N", "the generators' seed (algorithmic problems) [default: 1]"),
		DT_OPT_STRING("log_level", &log_level, "LEVEL", "debug, info, warn or error"),
		DT_OPT_END,
	};
	struct dt_args args;
	int code;
	if (!dt_cmd_parse(opts, argc, argv, usage, &args, &code))
		return code;
	const int extra = args.count;
	dt_args_release(&args);
	if (extra) {
		fprintf(stderr, "error: unexpected argument(s)\nusage: %s\n", usage);
		return 2;
	}
	struct dt_err err = DT_ERR_INIT;
	enum dt_log_level level;
	if (dt_log_parse_level(log_level, &level, &err))
		return dt_cmd_report(&err);
	dt_log_set_level(level);
	if (*problem && dt_wmt_problem_is(problem)) {
		if (num_shards < 0 || num_shards > 99999) {
			dt_err_set(&err, DT_USAGE, "--num_shards=%d: 1 to 99999 (0: the problem's)", num_shards);
			return dt_cmd_report(&err);
		}
		if (dt_wmt_datagen(problem, data_dir, tmp_dir, num_shards, &err))
			return dt_cmd_report(&err);
		return 0;
	}
	if (!*problem || !dt_text_problem_is(problem)) {
		size_t n;
		const char *const *names = dt_text_problem_names(&n);
		char list[1024] = "";
		size_t used = 0;
		for (size_t i = 0; i < n && used < sizeof(list); i++) {
			int w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", names[i]);
			if (w > 0)
				used += (size_t)w;
		}
		size_t nw;
		const char *const *wmt = dt_wmt_problem_names(&nw);
		for (size_t i = 0; i < nw && used < sizeof(list); i++) {
			int w = snprintf(list + used, sizeof(list) - used, ", %s", wmt[i]);
			if (w > 0)
				used += (size_t)w;
		}
		dt_err_set(&err, DT_USAGE, "--problem '%s' is not a text problem (datagen writes: %s)", problem, list);
		return dt_cmd_report(&err);
	}
	if (num_shards < 0 || num_shards > 99999) {
		dt_err_set(&err, DT_USAGE, "--num_shards=%d: 1 to 99999 (0: the problem's)", num_shards);
		return dt_cmd_report(&err);
	}
	if (dt_text_datagen(problem, data_dir, tmp_dir, num_shards, (uint64_t)seed, &err))
		return dt_cmd_report(&err);
	return 0;
}
