/* libFuzzer target: every parameter-server payload decoder (distribute/ps_wire.h):
 * ranges, pushes, row pushes and pulls, status, step, and the synchronous and in-graph replica
 * payloads.
 *
 * Input: byte 0 is the element count the value decoders expect (0..255);
 * the rest is the payload, copied to an 8-byte aligned buffer as the
 * connection layer delivers it. Every decoder runs on it; a success must
 * describe exactly the bytes given (header + count values), and a decoded
 * payload re-encodes to the same header bytes.
 *
 *   make build-fuzz/fuzz_ps_payloads && build-fuzz/fuzz_ps_payloads -runs=20000 -seed=1 tests/fuzz/corpus/fuzz_ps_payloads
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "distribute/ps_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t aligned[(1u << 16) / 8 + 1];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1u << 16))
		return 0;
	const uint64_t count = data[0];
	const size_t len = size - 1;
	uint8_t *p = (uint8_t *)aligned;
	memcpy(p, data + 1, len);

	struct dt_ps_range rg;
	if (dt_ps_range_decode(p, len, 0, &rg, NULL) == DT_OK)
		DT_ASSERT(len == DT_PS_RANGE_BYTES);
	if (dt_ps_range_decode(p, len, 1, &rg, NULL) == DT_OK)
		DT_ASSERT(len == DT_PS_RANGE_BYTES + rg.count * 4);

	struct dt_ps_push push;
	if (dt_ps_push_decode(p, len, &push, NULL) == DT_OK)
		DT_ASSERT(len == DT_PS_PUSH_HEADER + push.range.count * 4 && push.lr >= 0.0f && push.lr < 1e6f);
	if (dt_ps_sync_push_decode(p, len, &push, NULL) == DT_OK) {
		DT_ASSERT(len == DT_PS_SYNC_PUSH_HEADER + push.range.count * 4 && push.step >= 0);
		uint8_t again[DT_PS_SYNC_PUSH_HEADER];
		dt_ps_sync_push_header_encode(&push, again);
		DT_ASSERT(memcmp(again, p, 28) == 0); /* all but the reserved word */
	}

	/* Row pushes and pulls for a shard of `count` rows (0 refuses all). */
	for (int push = 0; push < 2; push++) {
		struct dt_ps_rows_msg rm;
		if (dt_ps_rows_decode(p, len, push, count, &rm, NULL) == DT_OK) {
			DT_ASSERT(rm.n <= count && rm.range.count == rm.width * count && rm.step >= -1);
			DT_ASSERT(len == DT_PS_ROWS_HEADER + 4ull * rm.n + (push ? 4ull * rm.n * rm.width : 0));
			for (uint32_t i = 0; i < rm.n; i++)
				DT_ASSERT(dt_ps_rows_at(&rm, i) < count && (i == 0 || dt_ps_rows_at(&rm, i) > dt_ps_rows_at(&rm, i - 1)));
			uint8_t again[DT_PS_ROWS_HEADER];
			dt_ps_rows_header_encode(&rm, push, again);
			DT_ASSERT(memcmp(again, p, sizeof(again)) == 0);
		}
	}
	struct dt_ps_sync_pull_reply rr;
	if (dt_ps_pull_rows_reply_decode(p, len, count, count ? 3 : 0, &rr, NULL) == DT_OK)
		DT_ASSERT(len == DT_PS_PULL_ROWS_REPLY_HEADER + count * 3 * 4);

	struct dt_ps_status_msg sm;
	if (dt_ps_status_decode(p, len, &sm, NULL) == DT_OK)
		DT_ASSERT(len == DT_PS_STATUS_BYTES && sm.global_step >= 0);
	uint64_t u;
	if (dt_ps_u64_decode(p, len, 1000000, &u, NULL) == DT_OK)
		DT_ASSERT(len == 8 && u <= 1000000);

	struct dt_ps_sync_config cfg;
	if (dt_ps_sync_config_decode(p, len, &cfg, NULL) == DT_OK) {
		DT_ASSERT(cfg.replicas_to_aggregate >= 1 && cfg.replicas_to_aggregate <= cfg.total_replicas);
		uint8_t again[DT_PS_SYNC_CONFIG_BYTES];
		dt_ps_sync_config_encode(&cfg, again);
		DT_ASSERT(memcmp(again, p, sizeof(again)) == 0);
	}
	struct dt_ps_sync_push_reply pr;
	if (dt_ps_sync_push_reply_decode(p, len, &pr, NULL) == DT_OK)
		DT_ASSERT(len == DT_PS_SYNC_PUSH_REPLY_BYTES && pr.step >= 0);
	struct dt_ps_sync_pull pull;
	if (dt_ps_sync_pull_decode(p, len, &pull, NULL) == DT_OK) {
		DT_ASSERT(len == DT_PS_SYNC_PULL_BYTES && pull.after >= -1);
		uint8_t again[DT_PS_SYNC_PULL_BYTES];
		dt_ps_sync_pull_encode(&pull, again);
		DT_ASSERT(memcmp(again, p, sizeof(again)) == 0);
	}
	struct dt_ps_sync_pull_reply plr;
	if (dt_ps_sync_pull_reply_decode(p, len, count, &plr, NULL) == DT_OK)
		DT_ASSERT(len == DT_PS_SYNC_PULL_REPLY_HEADER + count * 4 && plr.step >= 0);

	struct dt_ps_replica_setup setup;
	if (dt_ps_replica_setup_decode(p, len, &setup, NULL) == DT_OK) {
		DT_ASSERT(setup.replicas >= 1 && setup.first_shard + setup.replicas <= setup.total_shards);
		uint8_t again[DT_PS_REPLICA_SETUP_MAX];
		size_t n = dt_ps_replica_setup_encode(&setup, again);
		DT_ASSERT(n == len && memcmp(again, p, n) == 0);
	}
	struct dt_ps_replica_step step;
	if (dt_ps_replica_step_decode(p, len, count, &step, NULL) == DT_OK)
		DT_ASSERT(len == DT_PS_REPLICA_STEP_HEADER + count * 4 && step.count == count);
	for (int text = 0; text <= 1; text++)
		if (dt_ps_replica_reply_decode(p, len, count, text, &step, NULL) == DT_OK)
			DT_ASSERT(len == (text ? DT_PS_REPLICA_REPLY_TEXT_HEADER : DT_PS_REPLICA_REPLY_HEADER) + count * 4 &&
				  step.fig.correct <= (step.fig.counted ? step.fig.counted : step.fig.examples) &&
				  step.fig.seqs_correct <= step.fig.examples);
	return 0;
}
