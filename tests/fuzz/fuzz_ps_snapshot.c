/* libFuzzer target: the snapshot and restore payloads of the parameter
 * server (distribute/ps_snapshot.h), which a ps decodes from any peer that passed
 * the handshake.
 *
 * Input: byte 0 picks the decoder (even: PS_SNAPSHOT/PS_RESTORE's snapshot,
 * odd: PS_SET_STEP's step); the rest is the payload. A snapshot that decodes
 * must describe exactly the bytes given, and is then applied to a small
 * Adam optimizer's state when its range fits, as the ps would.
 *
 *   make build-fuzz/fuzz_ps_snapshot && build-fuzz/fuzz_ps_snapshot -runs=20000 -seed=1 tests/fuzz/corpus/fuzz_ps_snapshot
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "distribute/ps_snapshot.h"
#include "nn/hparams.h"
#include "nn/optimizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PARAMS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1u << 16))
		return 0;
	const uint8_t *p = data + 1;
	size_t len = size - 1;
	/* A copy of exactly len bytes, so reading past it is caught. */
	uint8_t *copy = malloc(len ? len : 1);
	memcpy(copy, p, len);
	if (data[0] & 1) {
		int64_t step;
		if (dt_ps_set_step_decode(copy, len, &step, NULL) == DT_OK && step < 0)
			abort();
		free(copy);
		return 0;
	}
	struct dt_ps_snapshot m;
	if (dt_ps_snapshot_decode(copy, len, &m, NULL) == DT_OK) {
		if (dt_ps_snapshot_bytes(m.range.count, m.num_slots) != len || m.num_slots > DT_PS_SNAPSHOT_MAX_SLOTS)
			abort();
		struct dt_hparams hp;
		struct dt_optimizer opt;
		if (dt_hparams_from_set("mlp_base", &hp, NULL) == DT_OK) {
			strcpy(hp.optimizer, m.num_slots == 2 ? "adam" : m.num_slots == 1 ? "momentum" : "sgd");
			if (dt_optimizer_init(&opt, &hp, PARAMS, NULL) == DT_OK) {
				float params[PARAMS] = { 0 };
				/* Out-of-range and mismatched restores are refused, never written. */
				(void)dt_ps_snapshot_apply(&m, params, &opt, NULL);
				dt_optimizer_release(&opt);
			}
		}
	}
	free(copy);
	return 0;
}
