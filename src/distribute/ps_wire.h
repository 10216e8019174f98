/*
 * ps_wire.h — what the parameter-server messages carry, and who may talk.
 *
 * The message numbers live in net/messages.h; the payloads, byte by
 * byte (all integers little-endian, floats IEEE-754 binary32 little-endian;
 * docs/PROTOCOL.md §3.6 has the same table):
 *
 *   PS_STATUS request   empty
 *             reply     u32 flags (bit 0 initialized, bit 1 run ended), u32 zero, u64 global step
 *   PS_INIT   request   u64 offset, u64 count, then count f32: the initial values of one shard
 *             reply     empty
 *   PS_PULL   request   u64 offset, u64 count: one shard
 *             reply     count f32
 *   PS_PUSH   request   u64 offset, u64 count, f32 learning rate, u32 zero, then count f32 gradients
 *             reply     empty (sent after the update is applied)
 *   PS_STEP   request   u64 increment [, u64 last step] (ps 0 only)
 *             reply     u64 global step after the increment
 *   PS_END    request   empty (the chief only): the run is over
 *             reply     empty, then the ps closes every connection in order and exits
 *
 * Synchronous training through the ps (distribute/ps_sync.h):
 *
 *   PS_SYNC_CONFIG request u32 replicas to aggregate, u32 total replicas,
 *                          f64 step timeout s, f64 first-step timeout s
 *                  reply   empty (ERROR when it differs from what the ps has)
 *   PS_SYNC_PUSH   request u64 offset, u64 count, u64 step, f32 lr, u32 zero, then count f32
 *                  reply   u32 flags (bit 0: dropped as stale), u32 zero, u64 the ps's step
 *   PS_SYNC_PULL   request u64 offset, u64 count, i64 after (-1: now)
 *                  reply   held until the ps's step > after: u64 step, u64 ns held, then count f32
 *
 * t2t's in-graph sync (the std servers are compute replicas, train/sync_roles.h):
 *
 *   PS_REPLICA_SETUP request u32 replicas on this task, u32 first shard, u32 shards in all,
 *                            u32 batch size, u64 seed, f32 dropout, u32 problem length P (1..63),
 *                            P bytes problem name
 *                    reply   empty (after the task loaded its data)
 *   PS_REPLICA_STEP  request u64 step, u64 count, then count f32: the variables
 *                    reply   f64 sum of the replicas' mean losses, u32 correct, u32 examples,
 *                            u64 count, then count f32: the sum of the replicas' mean gradients
 *                    with text figures (both sides announce DT_PS_FEATURE_REPLICA_TEXT):
 *                            the same 24 bytes, then u32 tokens counted, u32 sequences right,
 *                            f64 summed unsmoothed loss, f64 summed approx_bleu_score,
 *                            u32 BLEU batches, u32 zero, then the count f32
 *
 * Row-sparse variables (TensorFlow's IndexedSlices; docs/DISTRIBUTED.md,
 * "Sparse rows"): a shard of R rows of W elements (count = R * W) moved by rows,
 * row indices r shard-local (the shard's first row is 0), u32, strictly ascending, < R:
 *
 *   PS_PUSH_ROWS request  u64 offset, u64 count, i64 step (-1: asynchronous, else the
 *                         trainer's synchronous step), f32 lr, u32 n, then n u32 rows,
 *                         then n * W f32: the gradient's rows
 *                reply    asynchronous: empty; synchronous: as PS_SYNC_PUSH's
 *   PS_PULL_ROWS request  u64 offset, u64 count, i64 after (-1: now; synchronous: held
 *                         until the ps's step > after), u32 n, u32 zero, then n u32 rows
 *                reply    u64 step, u64 ns held, then n * W f32: the rows' values
 *
 * A ps that serves them says so in its HELLO_OK (features bit
 * DT_PS_FEATURE_SPARSE_ROWS); a trainer sends them only to a ps that said so.
 *
 * A range (offset, count) must be exactly one shard of distribute/placement.h's map
 * held by the receiving ps; anything else is refused with an ERROR reply.
 * A push is applied only after its whole payload has arrived (the connection
 * layer delivers complete frames only), so a worker that dies mid-push leaves
 * no half-applied update.
 */
#ifndef DT_DIST_PS_WIRE_H
#define DT_DIST_PS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "net/messages.h"
#include "nn/model.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "parameter payloads are sent as host floats: a big-endian host needs byte swaps here");

#define DT_PS_RANGE_BYTES 16u     /* offset, count */
#define DT_PS_PUSH_HEADER 24u     /* offset, count, lr, zero */
#define DT_PS_STATUS_BYTES 16u
#define DT_PS_STATUS_INITIALIZED 0x1u
#define DT_PS_STATUS_ENDED 0x2u

/* ---- payload codecs: every decoder treats its input as hostile and checks
 * every length against the bytes there before use (the fuzz target
 * tests/fuzz/fuzz_ps_payloads.c runs them all) ---- */

struct dt_ps_range {
	uint64_t offset, count;  /* elements of the flat parameter buffer */
};

/* PS_PULL request and the start of PS_INIT: the range, then exactly
 * `values` f32 per element (0 for a pull, 1 for an init). */
enum dt_status dt_ps_range_decode(const uint8_t *p, size_t len, int values, struct dt_ps_range *out,
				  struct dt_err *err) DT_MUST_CHECK;

struct dt_ps_push {
	struct dt_ps_range range;
	float lr;
	int64_t step;            /* PS_SYNC_PUSH only */
	const float *grads;      /* (range.count), points into the payload */
};
/* PS_PUSH: 24-byte header, then count f32. */
enum dt_status dt_ps_push_decode(const uint8_t *p, size_t len, struct dt_ps_push *out,
				 struct dt_err *err) DT_MUST_CHECK;

struct dt_ps_status_msg {
	uint32_t flags;          /* DT_PS_STATUS_* */
	int64_t global_step;
};
void dt_ps_status_encode(const struct dt_ps_status_msg *m, uint8_t out[DT_PS_STATUS_BYTES]);
enum dt_status dt_ps_status_decode(const uint8_t *p, size_t len, struct dt_ps_status_msg *out,
				   struct dt_err *err) DT_MUST_CHECK;

/* PS_STEP request (increment <= 1e6) and reply (the step): one u64. */
enum dt_status dt_ps_u64_decode(const uint8_t *p, size_t len, uint64_t max, uint64_t *out,
				struct dt_err *err) DT_MUST_CHECK;

/* ---- synchronous training through the ps ---- */

#define DT_PS_SYNC_CONFIG_BYTES 24u
#define DT_PS_SYNC_PUSH_HEADER 32u      /* offset, count, step, lr, zero */
#define DT_PS_SYNC_PUSH_REPLY_BYTES 16u
#define DT_PS_SYNC_PUSH_DROPPED 0x1u
#define DT_PS_SYNC_PULL_BYTES 24u       /* offset, count, after */
#define DT_PS_SYNC_PULL_REPLY_HEADER 16u /* step, ns held */
#define DT_PS_SYNC_MAX_REPLICAS 65536u
#define DT_PS_SYNC_MAX_TIMEOUT_S 1e7

struct dt_ps_sync_config {
	uint32_t replicas_to_aggregate; /* 1 .. total_replicas */
	uint32_t total_replicas;        /* the trainers (chief/master + workers) */
	double step_timeout_s;          /* a step's gradients arrive within this of its first */
	double first_step_timeout_s;    /* the same for the first step, while trainers start */
};
void dt_ps_sync_config_encode(const struct dt_ps_sync_config *c, uint8_t out[DT_PS_SYNC_CONFIG_BYTES]);
enum dt_status dt_ps_sync_config_decode(const uint8_t *p, size_t len, struct dt_ps_sync_config *out,
					struct dt_err *err) DT_MUST_CHECK;

void dt_ps_sync_push_header_encode(const struct dt_ps_push *m, uint8_t out[DT_PS_SYNC_PUSH_HEADER]);
/* PS_SYNC_PUSH: 32-byte header, then exactly count f32. */
enum dt_status dt_ps_sync_push_decode(const uint8_t *p, size_t len, struct dt_ps_push *out,
				      struct dt_err *err) DT_MUST_CHECK;

struct dt_ps_sync_push_reply {
	uint32_t flags;          /* DT_PS_SYNC_PUSH_DROPPED */
	int64_t step;            /* the ps's step after the push */
};
void dt_ps_sync_push_reply_encode(const struct dt_ps_sync_push_reply *m, uint8_t out[DT_PS_SYNC_PUSH_REPLY_BYTES]);
enum dt_status dt_ps_sync_push_reply_decode(const uint8_t *p, size_t len, struct dt_ps_sync_push_reply *out,
					    struct dt_err *err) DT_MUST_CHECK;

struct dt_ps_sync_pull {
	struct dt_ps_range range;
	int64_t after;           /* answer once the ps's step > after; -1: now */
};
void dt_ps_sync_pull_encode(const struct dt_ps_sync_pull *m, uint8_t out[DT_PS_SYNC_PULL_BYTES]);
enum dt_status dt_ps_sync_pull_decode(const uint8_t *p, size_t len, struct dt_ps_sync_pull *out,
				      struct dt_err *err) DT_MUST_CHECK;

struct dt_ps_sync_pull_reply {
	int64_t step;            /* the ps's step the values are at */
	uint64_t held_ns;        /* how long the ps held the request at the barrier */
	const float *values;     /* (count) into the payload */
};
void dt_ps_sync_pull_reply_encode_header(int64_t step, uint64_t held_ns, uint8_t out[DT_PS_SYNC_PULL_REPLY_HEADER]);
/* The reply to a pull of `count` elements: header, then exactly count f32. */
enum dt_status dt_ps_sync_pull_reply_decode(const uint8_t *p, size_t len, uint64_t count,
					    struct dt_ps_sync_pull_reply *out, struct dt_err *err) DT_MUST_CHECK;

/* ---- t2t's in-graph sync: std servers as compute replicas ---- */

#define DT_PS_REPLICA_PROBLEM_MAX 63u
#define DT_PS_REPLICA_SETUP_HEADER 32u
#define DT_PS_REPLICA_SETUP_MAX (DT_PS_REPLICA_SETUP_HEADER + DT_PS_REPLICA_PROBLEM_MAX)
#define DT_PS_REPLICA_STEP_HEADER 16u   /* step, count */
#define DT_PS_REPLICA_REPLY_HEADER 24u  /* loss sum, correct, examples, count */
#define DT_PS_REPLICA_REPLY_TEXT_HEADER 56u /* ... then counted, seqs right, nll, bleu, bleu batches */
#define DT_PS_REPLICA_MAX_PER_TASK 64u

struct dt_ps_replica_setup {
	uint32_t replicas;       /* data shards this task computes, 1 .. DT_PS_REPLICA_MAX_PER_TASK */
	uint32_t first_shard;    /* its shards are first_shard .. first_shard + replicas - 1 */
	uint32_t total_shards;   /* of all tasks */
	uint32_t batch_size;     /* per replica */
	uint64_t seed;
	float dropout;
	char problem[DT_PS_REPLICA_PROBLEM_MAX + 1]; /* "": none, the program's own data (in_graph.h's source) */
};
/* Returns the payload size (at most DT_PS_REPLICA_SETUP_MAX). */
size_t dt_ps_replica_setup_encode(const struct dt_ps_replica_setup *m, uint8_t out[DT_PS_REPLICA_SETUP_MAX]);
enum dt_status dt_ps_replica_setup_decode(const uint8_t *p, size_t len, struct dt_ps_replica_setup *out,
					  struct dt_err *err) DT_MUST_CHECK;

/* A step's figures summed over the task's replicas (train/strategy.h's
 * dt_step_figures). Without text figures `correct` is out of `examples`;
 * with them, and counted > 0 (a padded sequence loss), it is out of the
 * `counted` non-pad tokens and seqs_correct of the `examples` sequences are
 * right in every token. */
struct dt_ps_replica_figures {
	double loss_sum;             /* of the replicas' mean batch losses */
	uint32_t correct, examples;
	uint32_t counted, seqs_correct; /* text figures only */
	double nll_sum, bleu_sum;    /* text figures only: t2t's neg_log_perplexity and approx_bleu_score sums */
	uint32_t bleu_batches;       /* text figures only: <= DT_PS_REPLICA_MAX_PER_TASK */
};

struct dt_ps_replica_step {
	int64_t step;
	uint64_t count;
	const float *values;     /* (count) into the payload: variables (request) or gradients (reply) */
	struct dt_ps_replica_figures fig; /* reply only */
};
void dt_ps_replica_step_encode_header(int64_t step, uint64_t count, uint8_t out[DT_PS_REPLICA_STEP_HEADER]);
/* The request; `count` must equal `want_count` (the model's parameters). */
enum dt_status dt_ps_replica_step_decode(const uint8_t *p, size_t len, uint64_t want_count,
					 struct dt_ps_replica_step *out, struct dt_err *err) DT_MUST_CHECK;
/* The reply's header, with the text figures when `text` (both sides
 * announced DT_PS_FEATURE_REPLICA_TEXT); returns its size,
 * DT_PS_REPLICA_REPLY_HEADER or DT_PS_REPLICA_REPLY_TEXT_HEADER. */
size_t dt_ps_replica_reply_encode_header(const struct dt_ps_replica_figures *f, uint64_t count, int text,
					 uint8_t out[DT_PS_REPLICA_REPLY_TEXT_HEADER]);
/* The reply of either layout (`text` as encoded); counts that cannot be
 * (more right than counted, more BLEU batches than replicas) are DT_PROTOCOL. */
enum dt_status dt_ps_replica_reply_decode(const uint8_t *p, size_t len, uint64_t want_count, int text,
					  struct dt_ps_replica_step *out, struct dt_err *err) DT_MUST_CHECK;

/* ---- row-sparse pushes and pulls ---- */

#define DT_PS_FEATURE_SPARSE_ROWS 0x1u  /* dt_hello.features: PS_PUSH_ROWS and PS_PULL_ROWS served */
/* dt_hello.features: PS_REPLICA_STEP replies with text figures, sent by a
 * std server (HELLO_OK) and understood by a master (HELLO) that announce it;
 * the older 24-byte header when either side does not. */
#define DT_PS_FEATURE_REPLICA_TEXT 0x2u
#define DT_PS_ROWS_HEADER 32u           /* either request: offset, count, step/after, lr/n, n/zero */
#define DT_PS_PULL_ROWS_REPLY_HEADER 16u /* step, ns held */

struct dt_ps_rows_msg {
	struct dt_ps_range range;
	int64_t step;            /* push: -1 asynchronous, else >= 0; pull: `after`, >= -1 */
	float lr;                /* push only */
	uint32_t n;              /* rows */
	uint64_t width;          /* elements per row: count / the shard's rows */
	const uint8_t *rows;     /* (n) u32 LE into the payload, strictly ascending */
	const float *values;     /* push: (n * width) into the payload; pull: NULL */
};
/* Encodes the 32-byte header of a PS_PUSH_ROWS (`push`) or PS_PULL_ROWS. */
void dt_ps_rows_header_encode(const struct dt_ps_rows_msg *m, int push, uint8_t out[DT_PS_ROWS_HEADER]);
/* Decodes either request for a shard of `shard_rows` rows (the receiver's
 * placement; 0 refuses everything): count a multiple of it, n <= shard_rows,
 * every row < shard_rows and above the one before, and the length exactly
 * header + 4 n (+ 4 n width for a push). */
enum dt_status dt_ps_rows_decode(const uint8_t *p, size_t len, int push, uint64_t shard_rows,
				 struct dt_ps_rows_msg *out, struct dt_err *err) DT_MUST_CHECK;
/* Row i of a decoded message. */
uint32_t dt_ps_rows_at(const struct dt_ps_rows_msg *m, uint32_t i);
/* The reply to a pull of n rows of `width`: header, then exactly n * width f32. */
enum dt_status dt_ps_pull_rows_reply_decode(const uint8_t *p, size_t len, uint64_t n, uint64_t width,
					    struct dt_ps_sync_pull_reply *out, struct dt_err *err) DT_MUST_CHECK;

/* A 64-bit fingerprint of the training cluster: every job but the evaluator,
 * with its addresses in order (FNV-1a). Tasks started from different cluster
 * specs get different fingerprints and the handshake refuses them. */
uint64_t dt_ps_cluster_fingerprint(const struct dt_cluster *cl);

/* Appends the model's variables (name, float32, shape) to `sig`. */
enum dt_status dt_ps_signature_add_vars(struct dt_signature *sig, const struct dt_variable *vars, int n,
					struct dt_err *err) DT_MUST_CHECK;

/* "ps", "worker", "chief", "master": the role a task announces in its hello. */
const char *dt_ps_role_name(enum dt_job job);

#endif
