/*
 * text_model.c — what a session needs for t2t's text problems: the
 * transformer for a text dataset, the input that batches it, and its
 * evaluation with t2t's metrics (common.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "data/text.h"
#include "nn/transformer.h"
#include "train/common.h"
#include "train/input_text.h"

static enum dt_status text_model_new(const struct dt_hparams *hp, const struct dt_text_set *t, int max_batch,
				     struct dt_model **out, struct dt_err *err)
{
	if (strcmp(hp->model, "transformer") != 0)
		return dt_err_set(err, DT_CONFIG, "model '%s' reads images, and this problem is text: use --model=transformer",
				  hp->model);
	/* Positions: the training max_length, or the split's longest example
	 * when it is longer (t2t's dev lengths: the timing signal is not a
	 * variable, so the same checkpoint evaluates them). */
	const int positions = hp->max_length > t->max_len ? hp->max_length : t->max_len;
	struct dt_transformer_config c = {
		.has_inputs = t->has_inputs, .input_vocab = t->input_vocab, .target_vocab = t->target_vocab,
		.max_length = positions, .hidden_size = hp->hidden_size, .filter_size = hp->filter_size,
		.num_heads = hp->num_heads,
		.num_encoder_layers = hp->num_encoder_layers > 0 ? hp->num_encoder_layers : hp->num_hidden_layers,
		.num_decoder_layers = hp->num_decoder_layers > 0 ? hp->num_decoder_layers : hp->num_hidden_layers,
		.layer_prepostprocess_dropout = (float)hp->layer_prepostprocess_dropout,
		.attention_dropout = (float)hp->attention_dropout, .relu_dropout = (float)hp->relu_dropout,
		.label_smoothing = (float)hp->label_smoothing,
		.shared_embedding_and_softmax_weights = hp->shared_embedding_and_softmax_weights,
		.shared_embedding = hp->shared_embedding,
		.post_norm = strcmp(hp->layer_postprocess_sequence, "dan") == 0,
	};
	struct dt_graph *g = NULL;
	enum dt_status st = dt_transformer_graph(&c, &g, err);
	if (!st)
		st = dt_model_from_graph(g, "transformer", max_batch > positions ? max_batch : positions, out, err);
	dt_graph_free(g);
	return st ? dt_err_prefix(err, "cannot build the transformer") : DT_OK;
}

enum dt_status dt_train_model_new(const struct dt_model_zoo *zoo, const struct dt_hparams *hp, const struct dt_dataset *d,
				  int max_batch, struct dt_model **out, struct dt_err *err)
{
	if (d->text)
		return text_model_new(hp, d->text, max_batch, out, err);
	return dt_model_new(zoo, hp, d->height, d->width, d->channels, d->num_classes, max_batch, out, err);
}

int dt_train_max_batch(const struct dt_hparams *hp, const struct dt_dataset *d)
{
	return d->text ? dt_text_max_tokens(hp) : hp->batch_size;
}

struct dt_input *dt_train_input_new(const struct dt_dataset *d, const struct dt_hparams *hp, uint64_t seed,
				    int prefetch)
{
	if (d->text)
		return dt_input_text_new(d->text, hp, seed);
	return dt_input_dataset_new(d, hp->batch_size, seed, prefetch);
}

/* Shard `shard` of `count` of a text split, in order, in batches of
 * consecutive examples holding at most the model's max_batch tokens. */
enum dt_status dt__train_evaluate_text(struct dt_model *model, const struct dt_text_set *t, int shard, int count,
				       double sums[DT_EVAL_SUMS], struct dt_err *err)
{
	const int cap = dt_model_max_batch(model);
	int32_t *in = dt_xmallocarray((size_t)cap, sizeof(int32_t)), *tg = dt_xmallocarray((size_t)cap, sizeof(int32_t));
	int64_t *ids = dt_xmallocarray((size_t)cap, sizeof(int64_t));
	memset(sums, 0, DT_EVAL_SUMS * sizeof(double));
	enum dt_status st = DT_OK;
	int64_t i = shard;
	while (i < t->count && !st) {
		int B = 0, L = 0;
		while (i < t->count && B < cap) {
			const int l = dt_text_len(t, i);
			const int nl = l > L ? l : L;
			if (B > 0 && (int64_t)(B + 1) * nl > cap)
				break;
			if (l > cap) {
				st = dt_err_set(err, DT_DATA, "example %lld has %d tokens, more than a batch's %d", (long long)i,
						l, cap);
				break;
			}
			ids[B++] = i;
			L = nl;
			i += count;
		}
		if (st)
			break;
		memset(in, 0, (size_t)B * (size_t)L * sizeof(*in));
		memset(tg, 0, (size_t)B * (size_t)L * sizeof(*tg));
		for (int b = 0; b < B; b++) {
			if (t->has_inputs)
				memcpy(in + (size_t)b * L, t->in_tok + t->in_off[ids[b]],
				       (size_t)dt_text_in_len(t, ids[b]) * sizeof(int32_t));
			memcpy(tg + (size_t)b * L, t->tg_tok + t->tg_off[ids[b]],
			       (size_t)dt_text_tg_len(t, ids[b]) * sizeof(int32_t));
		}
		struct dt_model_batch mb;
		dt_text_batch_set(&mb, t->has_inputs, B, L, in, tg);
		mb.bleu = t->text2text;
		struct dt_step_result r;
		if ((st = dt_model_evaluate(model, &mb, &r, err)))
			break;
		sums[0] += (double)r.loss * r.counted;
		sums[1] += r.correct;
		sums[2] += r.counted;
		sums[3] += r.seqs;
		sums[4] += r.seqs_correct;
		sums[5] += r.nll_sum;
		sums[6] += r.bleu;
		sums[7] += r.bleu_batches;
	}
	free(in);
	free(tg);
	free(ids);
	return st ? dt_err_prefix(err, "cannot evaluate") : DT_OK;
}
