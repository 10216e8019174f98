/*
 * dtrain decode — t2t-decoder: the newest checkpoint of --output_dir
 * decodes text of a text problem (data/text.h) with greedy or beam search
 * (train/decode.h).
 *
 *   --decode_from_file=F   one input per line; outputs one per line to
 *                          --decode_to_file (default: stdout)
 *   --decode_interactive   t2t's interactive mode (also without either
 *                          flag): each line read from stdin is decoded and
 *                          printed at once; t2t's commands `q` (quit) and
 *                          `dl=N` (decode length: extra_length) work, its
 *                          `ns=` and `it=` are refused as dtrain has no
 *                          sampling and no image input; end of input ends
 *                          it (exit 0); a line that cannot be decoded (a
 *                          symbol outside the vocabulary, too long) gets an
 *                          error line on stderr and the session goes on
 *   --decode_hparams='beam_size=4,alpha=0.6'   t2t's names; beam_size 1 is
 *                          greedy (the default), extra_length t2t's
 *                          decode_length (50), cache=0 the reference
 *                          decoder that reruns the graph over the prefix
 *                          (train/decode.h; for checks and timings)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "cmd/cmd.h"
#include "data/t2t_dir.h"
#include "data/text.h"
#include "models/builtin.h"
#include "nn/hparams.h"
#include "tensor/blas.h"
#include "train/checkpoint.h"
#include "train/common.h"
#include "train/decode.h"

static const char usage[] = "dtrain decode --problem=NAME --output_dir=DIR [--hparams_set=NAME] [--hparams='k=v,...'] "
			    "[--decode_from_file=F [--decode_to_file=G] | --decode_interactive] "
			    "[--decode_hparams='beam_size=4,alpha=0.6']";

#define MAX_IDS 4096

struct decode_args {
	const char *model, *hparams_set, *hparams, *problem, *data_dir, *output_dir, *vocab_file;
	const char *from_file, *to_file, *decode_hparams, *log_level;
	int threads, interactive;
};

static enum dt_status parse_decode_hparams(const char *text, struct dt_decode_config *c, struct dt_err *err)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", text);
	for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq)
			return dt_err_set(err, DT_USAGE, "--decode_hparams: '%s' is not name=value", kv);
		*eq = '\0';
		char *end;
		double v = strtod(eq + 1, &end);
		if (end == eq + 1 || *end)
			return dt_err_set(err, DT_USAGE, "--decode_hparams: %s='%s' is not a number", kv, eq + 1);
		if (strcmp(kv, "beam_size") == 0 && v >= 1 && v <= 64 && v == (int)v)
			c->beam_size = (int)v;
		else if (strcmp(kv, "alpha") == 0 && v >= 0)
			c->alpha = v;
		else if (strcmp(kv, "extra_length") == 0 && v >= 0 && v == (int)v)
			c->extra_length = (int)v;
		else if (strcmp(kv, "cache") == 0 && (v == 0 || v == 1))
			c->cache = (int)v;
		else
			return dt_err_set(err, DT_USAGE,
					  "--decode_hparams: '%s=%s' is not one of beam_size (1 to 64), alpha (>= 0), "
					  "extra_length (>= 0), cache (0 or 1)",
					  kv, eq + 1);
	}
	return DT_OK;
}

struct decoder {
	struct dt_dataset data;     /* the problem's vocabulary (its test split) */
	struct dt_model *model;
	struct dt_transformer_decoder *fast; /* NULL with cache=0 */
	struct dt_decode_config dc;
	int32_t in[MAX_IDS], out[MAX_IDS];
	char text[4 * MAX_IDS];
	long long tokens;           /* decoded so far, an EOS each */
	double seconds;             /* spent in dt_decode */
};

static enum dt_status setup(const struct decode_args *a, struct decoder *d, struct dt_err *err)
{
	struct dt_hparams hp;
	const char *set = *a->hparams_set ? a->hparams_set : dt_hparams_default_set(a->model);
	if (!set)
		return dt_err_set(err, DT_USAGE, "unknown model '%s'", a->model);
	enum dt_status st = dt_hparams_from_set(set, &hp, err);
	if (st)
		return st;
	snprintf(hp.model, sizeof(hp.model), "%s", a->model);
	if (*a->hparams && (st = dt_hparams_parse(&hp, a->hparams, err)))
		return dt_err_prefix(err, "--hparams");
	if ((st = dt_hparams_validate(&hp, err)))
		return st;
	/* a built-in text problem, or one whose t2t shards are in --data_dir (data/t2t_dir.h) */
	const int from_dir = *a->problem && !dt_text_problem_is(a->problem) && dt_t2t_dir_has(a->problem, a->data_dir);
	if (!*a->problem || (!dt_text_problem_is(a->problem) && !from_dir))
		return dt_err_set(err, DT_USAGE, "dtrain decode needs --problem, a text problem ('%s' is not one, and "
						 "--data_dir holds no t2t shards of it)", a->problem);
	if (!*a->output_dir)
		return dt_err_set(err, DT_USAGE, "dtrain decode needs --output_dir (the training run's)");
	d->dc = (struct dt_decode_config){ .beam_size = 1, .alpha = 0.6, .extra_length = 50, .cache = 1 };
	if ((st = parse_decode_hparams(a->decode_hparams, &d->dc, err)))
		return st;
	if ((st = dt_blas_load(a->threads, err)))
		return st;
	struct dt_data_options o;
	dt_data_options_init(&o);
	if (strlen(a->vocab_file) >= sizeof(o.vocab_file))
		return dt_err_set(err, DT_USAGE, "--vocab_file is longer than %zu bytes", sizeof(o.vocab_file) - 1);
	snprintf(o.vocab_file, sizeof(o.vocab_file), "%s", a->vocab_file);
	if ((st = dt_problem_load(a->problem, a->data_dir, &o, DT_SPLIT_TEST, 1, &d->data, err)))
		return st;
	if (!d->data.text)
		return dt_err_set(err, DT_USAGE, "problem '%s' holds images: dtrain decode decodes text problems",
				  a->problem);
	d->dc.positions = hp.max_length > d->data.text->max_len ? hp.max_length : d->data.text->max_len;
	/* the graph reruns all beams at once; the fast decoder keeps its own state */
	const int max_batch = d->dc.cache ? d->dc.positions : d->dc.beam_size * d->dc.positions;
	if ((st = dt_train_model_new(&dt_models_builtin, &hp, &d->data, max_batch, &d->model, err)))
		return st;
	if (d->dc.cache &&
	    (st = dt_transformer_decoder_new(d->model, d->dc.beam_size, d->dc.positions, &d->fast, err)))
		return st;
	struct dt_ckpt_contents c;
	dt_ckpt_contents_for_model(&c, d->model);
	int found = 0;
	char path[DT_CKPT_PATH_MAX] = "";
	if ((st = dt_ckpt_restore_latest(a->output_dir, &c, &found, path, sizeof(path), err)))
		return st;
	if (!found)
		return dt_err_set(err, DT_CKPT, "no checkpoint in '%s' to decode with: train first", a->output_dir);
	dt_info("decoding with '%s' (global step %lld), %s, %s", path, (long long)c.global_step,
		d->dc.beam_size > 1 ? "beam search" : "greedy",
		d->fast ? "cached keys and values" : "the whole graph per step (cache=0)");
	return DT_OK;
}

/* One line in, its decode into d->text. */
static enum dt_status decode_line(struct decoder *d, const char *line, struct dt_err *err)
{
	int n_in = 0, n_out = 0;
	enum dt_status st = dt_text_encode(d->data.text, 1, line, d->in, MAX_IDS, &n_in, err);
	const double t0 = dt_wall_seconds();
	if (!st)
		st = dt_decode(d->model, d->fast, d->data.text, &d->dc, d->in, n_in, d->out, MAX_IDS, &n_out, err);
	d->seconds += dt_wall_seconds() - t0;
	d->tokens += st ? 0 : n_out + 1;
	if (!st)
		dt_text_decode(d->data.text, d->out, n_out, d->text, sizeof(d->text));
	return st;
}

/* t2t's interactive commands (decoding.py's _interactive_input_fn): 1 when
 * `line` was one (done, or refused on stderr), *quit set by `q`; 0 when it
 * is text to decode. */
static int interactive_command(struct decoder *d, const char *line, long lineno, int *quit)
{
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "%.*s", (int)strcspn(line, "\r\n"), line);
	if (strcmp(cmd, "q") == 0) {
		*quit = 1;
		return 1;
	}
	if (strncmp(cmd, "dl=", 3) == 0) {
		char *end;
		long v = strtol(cmd + 3, &end, 10);
		if (end == cmd + 3 || *end || v < 0 || v > MAX_IDS)
			fprintf(stderr, "error: line %ld: 'dl=%s': the decode length is a whole number of tokens, 0 to %d\n",
				lineno, cmd + 3, MAX_IDS);
		else
			d->dc.extra_length = (int)v;
		return 1;
	}
	if (strncmp(cmd, "ns=", 3) == 0 || strncmp(cmd, "it=", 3) == 0) {
		fprintf(stderr, "error: line %ld: '%s': dtrain decodes text by %s, one output per line (t2t's ns= and it= "
				"are for sampling and images)\n", lineno, cmd, d->dc.beam_size > 1 ? "beam search" : "greedy search");
		return 1;
	}
	return 0;
}

static int run(const struct decode_args *a)
{
	struct dt_err err = DT_ERR_INIT;
	struct decoder *d = dt_xcalloc(1, sizeof(*d));
	FILE *in = NULL, *out = stdout;
	const int interactive = a->interactive || !*a->from_file;
	enum dt_status st = a->interactive && (*a->from_file || *a->to_file)
		? dt_err_set(&err, DT_USAGE, "--decode_interactive reads stdin and writes stdout: drop --decode_%s_file",
			     *a->from_file ? "from" : "to")
		: setup(a, d, &err);
	if (!st && !interactive && !(in = fopen(a->from_file, "r")))
		st = dt_err_set(&err, DT_IO, "cannot open --decode_from_file '%s'", a->from_file);
	if (!st && *a->to_file && !(out = fopen(a->to_file, "w")))
		st = dt_err_set(&err, DT_IO, "cannot create --decode_to_file '%s'", a->to_file);
	if (!st && interactive)
		in = stdin;
	char *line = NULL;
	size_t cap = 0;
	long lines = 0;
	const int prompt = interactive && isatty(STDIN_FILENO);
	if (!st && prompt)
		fprintf(stderr, "interactive decoding (%s): one %s per line; q quits, dl=N sets the decode length (%d)\n",
			d->dc.beam_size > 1 ? "beam search" : "greedy", d->data.text->has_inputs ? "input" : "prompt",
			d->dc.extra_length);
	for (int quit = 0; !st && !quit;) {
		if (prompt)
			fputs("> ", stderr);
		if (getline(&line, &cap, in) < 0)
			break;
		lines++;
		if (interactive && interactive_command(d, line, lines, &quit))
			continue;
		if ((st = decode_line(d, line, &err))) {
			if (interactive && st == DT_USAGE) { /* a typo costs the line, not the session */
				fprintf(stderr, "error: line %ld: %s\n", lines, err.msg);
				err = (struct dt_err)DT_ERR_INIT;
				st = DT_OK;
				continue;
			}
			dt_err_prefix(&err, "line %ld", lines);
			break;
		}
		fprintf(out, "%s\n", d->text);
		fflush(out);
	}
	free(line);
	if (in && in != stdin)
		fclose(in);
	if (out != stdout && fclose(out) != 0 && !st)
		st = dt_err_set(&err, DT_IO, "cannot write --decode_to_file '%s'", a->to_file);
	if (!st && !interactive)
		dt_info("decoded %ld line(s) of '%s'%s%s: %lld tokens in %.2f s (%.0f tokens/s)", lines, a->from_file,
			*a->to_file ? " into " : "", a->to_file, d->tokens, d->seconds,
			d->seconds > 0 ? (double)d->tokens / d->seconds : 0.0);
	dt_transformer_decoder_free(d->fast);
	dt_model_free(d->model);
	dt_dataset_release(&d->data);
	free(d);
	return st ? dt_cmd_report(&err) : 0;
}

int dt_cmd_decode(int argc, char **argv)
{
	struct decode_args a = { .model = "transformer", .hparams_set = "", .hparams = "", .problem = "",
				 .data_dir = "", .output_dir = "", .vocab_file = "", .from_file = "", .to_file = "",
				 .decode_hparams = "", .log_level = "info", .threads = 1 };
	struct dt_option opts[] = {
		DT_OPT_STRING("model", &a.model, "NAME", "the trained model [default: transformer]"),
		DT_OPT_STRING("hparams_set", &a.hparams_set, "NAME", "the training run's hparams set"),
		DT_OPT_STRING("hparams", &a.hparams, "K=V,...", "the training run's overrides"),
		DT_OPT_STRING("problem", &a.problem, "NAME", "the text problem (its vocabulary)"),
		DT_OPT_STRING("data_dir", &a.data_dir, "DIR",
			      "the problem's files (text2text_tmpdir, a t2t data dir's shards and vocabulary)"),
		DT_OPT_STRING("vocab_file", &a.vocab_file, "PATH",
			      "a t2t data dir's text problem: its SubwordTextEncoder file [default: found by t2t's names]"),
		DT_OPT_STRING("output_dir", &a.output_dir, "DIR", "the training run's directory: its newest checkpoint"),
		DT_OPT_STRING("decode_from_file", &a.from_file, "FILE", "inputs, one per line [default: stdin, interactive]"),
		DT_OPT_STRING("decode_to_file", &a.to_file, "FILE", "outputs, one per line [default: stdout]"),
		DT_OPT_BOOL("decode_interactive", &a.interactive,
			    "t2t's interactive mode: a line of stdin in, its decode out; q quits, dl=N sets the decode "
			    "length [also without --decode_from_file]"),
		DT_OPT_STRING("decode_hparams", &a.decode_hparams, "K=V,...",
			      "beam_size (1: greedy), alpha (length penalty), extra_length, cache [default: 1, 0.6, 50, 1]"),
		DT_OPT_INT("threads", &a.threads, "N", "compute threads (OpenBLAS's pool)"),
		DT_OPT_STRING("log_level", &a.log_level, "LEVEL", "debug, info, warn or error"),
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
	if (dt_log_parse_level(a.log_level, &level, &err))
		return dt_cmd_report(&err);
	dt_log_set_level(level);
	return run(&a);
}
