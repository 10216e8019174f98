/* libFuzzer target: the asynchronous trainers' data positions — ps:0's
 * position block and PS_POSITIONS reply (distribute/ps_positions.h), and the
 * checkpoint text of a units layout (data/units.h).
 *
 * Input: byte 0 picks the part (even: the wire, odd: the checkpoint text);
 * the rest is the payload, or three NUL-separated strings (layout, base,
 * positions). A block that is noted must be in range; a reply that decodes
 * must re-encode to the same bytes; a layout that parses must format back
 * to the same text, and a merge of it to 1..4 trainers must parse too.
 *
 *   make build-fuzz/fuzz_ps_positions && build-fuzz/fuzz_ps_positions -runs=20000 -seed=1 tests/fuzz/corpus/fuzz_ps_positions
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "data/units.h"
#include "distribute/ps_positions.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void wire(const uint8_t *p, size_t len)
{
	struct dt_ps_positions t = { 0 };
	if (dt_ps_positions_note(&t, p, len, 7, NULL) == DT_OK) {
		DT_ASSERT(len == DT_PS_POSITION_BLOCK && t.trainers >= 1);
		const uint32_t j = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
		DT_ASSERT(j < (uint32_t)t.trainers && t.at[j].epoch >= 0 && t.at[j].step == 7);
	}
	dt_ps_positions_release(&t);
	if (dt_ps_positions_decode(p, len, &t, NULL) == DT_OK) {
		size_t n;
		uint8_t *again = dt_ps_positions_encode(&t, &n);
		DT_ASSERT(n == len && memcmp(again, p, len) == 0);
		free(again);
	}
	dt_ps_positions_release(&t);
}

static void text(const char *s, size_t len)
{
	const char *parts[3] = { s, "", "" };
	for (int i = 1; i < 3; i++) {
		const char *nul = memchr(parts[i - 1], 0, len - (size_t)(parts[i - 1] - s));
		if (!nul || (size_t)(nul + 1 - s) >= len)
			return;
		parts[i] = nul + 1;
	}
	struct dt_units_layout l;
	struct dt_units_pos *pos;
	if (dt_units_parse(parts[0], parts[1], parts[2], &l, &pos, NULL) != DT_OK)
		return;
	if (l.nu > 4096) { /* the merge below walks every unit of each epoch */
		dt_units_release(&l);
		free(pos);
		return;
	}
	char *a, *b, *c;
	dt_units_format(&l, pos, &a, &b, &c);
	DT_ASSERT(strcmp(a, parts[0]) == 0 && strcmp(b, parts[1]) == 0);
	free(a), free(b), free(c);
	for (int m = 1; m <= 4 && m <= l.nu; m++) {
		struct dt_units_layout next;
		dt_units_merge(&l, pos, m, &next);
		struct dt_units_pos *none = calloc((size_t)m, sizeof(*none));
		for (int j = 0; j < m; j++)
			none[j].epoch = DT_UNITS_UNKNOWN;
		dt_units_format(&next, none, &a, &b, &c);
		struct dt_units_layout back;
		struct dt_units_pos *bpos;
		DT_ASSERT(dt_units_parse(a, b, c, &back, &bpos, NULL) == DT_OK);
		dt_units_release(&back);
		free(bpos);
		free(a), free(b), free(c);
		free(none);
		dt_units_release(&next);
	}
	dt_units_release(&l);
	free(pos);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1u << 16))
		return 0;
	if (data[0] % 2 == 0) {
		uint8_t *p = malloc(size);
		memcpy(p, data + 1, size - 1);
		wire(p, size - 1);
		free(p);
	} else {
		char *s = malloc(size);
		memcpy(s, data + 1, size - 1);
		s[size - 1] = 0;
		text(s, size);
		free(s);
	}
	return 0;
}
