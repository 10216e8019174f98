/*
 * summary.h — the chief's TensorBoard scalars and its run files.
 *
 * A `struct dt_summary` turns the per-step figures of the training loop into
 * one events record (train/events.h) every `every` steps and at the last
 * step, in the output dir (TensorFlow Estimator's layout: training scalars in
 * the model dir itself, the evaluator's in eval/ beside them). Tags, as
 * Estimator and t2t name them where they have the scalar:
 *
 *   loss             mean training loss over the steps since the last record
 *   accuracy         training-batch accuracy over the same steps (an eval/
 *                    run carries the same tag, so TensorBoard overlays them)
 *   learning_rate    the rate the optimizer used at the recorded step
 *   global_step/sec  steps per second of wall time since the last record
 *                    (StepCounterHook's tag; checkpoint saves and in-process
 *                    evaluation count, as they do in TensorFlow)
 *   examples/sec     global_step/sec × batch size
 *
 * A text problem's records add t2t's metrics: accuracy_per_sequence,
 * neg_log_perplexity and (translation) approx_bleu_score, and, when the
 * config names the problem, each of accuracy, accuracy_per_sequence,
 * neg_log_perplexity and approx_bleu_score again under t2t's own tag,
 * "metrics-<problem>/targets/<metric>" (t2t's metrics.py
 * create_evaluation_metrics), so a t2t user's TensorBoard layouts find them;
 * the evaluator's eval/ records carry the same tags (train/evaluator.h).
 *
 * The per-step call is a few additions and a modulo; a record costs one
 * write(2) of ~240 bytes every `every` steps. A failed write is logged as a
 * warning and training goes on (the writer keeps the file to whole records;
 * the next record is tried again), because losing a summary must not cost a
 * training run.
 *
 * TensorBoard's HParams tab (hparams_summary.c): when cfg->hp is given,
 * dt_summary_new also writes the HParams plugin's experiment summary
 * (every hparam with its type; the metrics loss and accuracy of this run
 * and of eval/) and its session-start summary (every resolved hparam's
 * value), and dt_summary_free the session-end summary: STATUS_SUCCESS when
 * the record of the last step (train_steps) was written, else
 * STATUS_FAILURE. A set of runs then compares in the HParams tab, with the
 * final metrics taken from the runs' scalars as TensorBoard does. A trial
 * of a `dtrain launch` sweep (launch/sweep.h) adds its parameters: each
 * key of the JSON object in $DTRAIN_TRIAL_PARAMS that is not an hparam's
 * name becomes one more hparam of the session (a number when its value
 * reads as one, else a string), so the HParams tab over the sweep's output
 * dir compares the trials by their parameters too.
 *
 * Run files (t2t's trainer writes them at start): hparams.json, the
 * resolved hyper-parameters as one JSON object; flags.txt, every option of
 * the command with its effective value, one `--name=value` per line (absl's
 * flags_into_string form). Both are written atomically (base/atomic_file.h).
 */
#ifndef DT_TRAIN_SUMMARY_H
#define DT_TRAIN_SUMMARY_H

#include <stdint.h>
#include "base/err.h"
#include "base/options.h"
#include "nn/hparams.h"

struct dt_summary_config {
	const char *dir;    /* the output dir; the event file goes here (created if needed) */
	int64_t every;      /* save_summary_steps, > 0 */
	int64_t last_step;  /* train_steps: a record is also written at this step */
	int batch_size;     /* examples per step, for examples/sec */
	const struct dt_hparams *hp; /* NULL: no HParams summaries; else borrowed for dt_summary_new only */
	const char *problem; /* t2t's tags for a text problem (copied); NULL or "": the plain tags only */
};

#define DT_SUMMARY_TAG_MAX 128
/* t2t's tag of `metric` for `problem`, "metrics-<problem>/targets/<metric>", into tag. */
void dt_summary_t2t_tag(char tag[DT_SUMMARY_TAG_MAX], const char *problem, const char *metric);

struct dt_summary;

/* Opens a new event file in cfg->dir. `*out` is owned by the caller (dt_summary_free). */
enum dt_status dt_summary_new(const struct dt_summary_config *cfg, struct dt_summary **out,
			      struct dt_err *err) DT_MUST_CHECK;
/* Accounts one finished step (global step `step`, its training loss, correct
 * predictions in its batch, its learning rate) and writes the record when
 * `step` is a multiple of `every` or the last step. `s` may be NULL (no-op). */
void dt_summary_step(struct dt_summary *s, int64_t step, float loss, int correct, float lr);
/* Before dt_summary_step, for a text problem's step: the tokens `correct`
 * is out of, its sequences and those right in every token, the summed
 * unsmoothed loss; the record then says t2t's accuracy (per token),
 * accuracy_per_sequence and neg_log_perplexity. counted 0: no-op. */
void dt_summary_text(struct dt_summary *s, int counted, int seqs, int seqs_correct, double nll_sum, double bleu_sum,
		     int bleu_batches);
/* Writes `n` scalars named `tags` at `step` as one record (a user's figures
 * beside the built-in ones); a failed write is a warning. `s` may be NULL. */
void dt_summary_scalars(struct dt_summary *s, int64_t step, const char *const *tags, const float *values, int n);
/* Event file path (owned by `s`). */
const char *dt_summary_path(const struct dt_summary *s);
/* Records written so far (for tests and logs). */
int64_t dt_summary_records(const struct dt_summary *s);
/* Closes the event file; accepts NULL. */
void dt_summary_free(struct dt_summary *s);

/* Writes <dir>/hparams.json and, with flags_text (dt_summary_format_flags
 * of the command's option table), <dir>/flags.txt (creating dir if needed). */
enum dt_status dt_summary_write_run_files(const char *dir, const struct dt_hparams *hp, const char *flags_text,
					  struct dt_err *err) DT_MUST_CHECK;

/* Writes `opts` as "--name=value\n" lines into a heap string (caller frees);
 * booleans as --name / --noname, groups skipped. */
char *dt_summary_format_flags(const struct dt_option *opts);

/* Module-shared (hparams_summary.c): the HParamsPluginData message of each
 * summary, appended to `out`. */
struct dt_pb;
void dt__hparams_encode_experiment(struct dt_pb *out, const struct dt_hparams *hp, double now);
void dt__hparams_encode_session_start(struct dt_pb *out, const struct dt_hparams *hp, double now);
void dt__hparams_encode_session_end(struct dt_pb *out, int success, double now);

#endif
