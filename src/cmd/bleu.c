/*
 * dtrain bleu — t2t-bleu: the BLEU of a translation file against a
 * reference file, one segment a line, tokenized and scored as t2t's
 * bleu_hook.bleu_wrapper (data/bleu_text.h, nn/bleu.h), printed as t2t-bleu
 * prints it (100 × BLEU, uncased then cased).
 *
 *   dtrain decode ... --decode_from_file=SRC --decode_to_file=OURS
 *   dtrain bleu --translation=OURS --reference=REF [--bleu_variant=both]
 */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "data/bleu_text.h"

static const char usage[] = "dtrain bleu --translation=FILE --reference=FILE [--bleu_variant=cased|uncased|both]";

int dt_cmd_bleu(int argc, char **argv)
{
	const char *translation = "", *reference = "", *variant = "both";
	struct dt_option opts[] = {
		DT_OPT_STRING("translation", &translation, "FILE", "the system's output, one segment a line"),
		DT_OPT_STRING("reference", &reference, "FILE", "the reference translation, line for line"),
		DT_OPT_STRING("bleu_variant", &variant, "V", "cased (case-sensitive), uncased or both [default: both]"),
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
	if (!*translation || !*reference) {
		dt_err_set(&err, DT_USAGE, "--translation and --reference are both needed (usage: %s)", usage);
		return dt_cmd_report(&err);
	}
	const int uncased = !strcmp(variant, "uncased") || !strcmp(variant, "both");
	const int cased = !strcmp(variant, "cased") || !strcmp(variant, "both");
	if (!uncased && !cased) {
		dt_err_set(&err, DT_USAGE, "--bleu_variant=%s: cased, uncased or both", variant);
		return dt_cmd_report(&err);
	}
	for (int pass = 0; pass < 2; pass++) { /* t2t-bleu's order: uncased, then cased */
		if (pass == 0 ? !uncased : !cased)
			continue;
		struct dt_bleu_counts c;
		if (dt_bleu_text_files(reference, translation, pass == 1, &c, &err))
			return dt_cmd_report(&err);
		printf("BLEU_%s = %6.2f\n", pass == 0 ? "uncased" : "cased", 100.0 * dt_bleu_score(&c, NULL));
	}
	return 0;
}
