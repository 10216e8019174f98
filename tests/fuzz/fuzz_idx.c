/* libFuzzer target for the IDX parser (src/data/idx.c).
 *
 * Any input must either parse, with a header and data that agree with the
 * input bytes, or fail with DT_DATA and a non-empty message; it must never
 * crash, read out of bounds, leak, or allocate more than the input holds.
 * Run: make build-fuzz/fuzz_idx && build-fuzz/fuzz_idx tests/fuzz/corpus/fuzz_idx */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "data/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A small cap too, so the cap check is exercised on tiny inputs. */
	const size_t caps[2] = { DT_IDX_DEFAULT_MAX_BYTES, 64 };
	for (int c = 0; c < 2; c++) {
		struct dt_idx idx;
		struct dt_err err = DT_ERR_INIT;
		enum dt_status st = dt_idx_parse(data, size, caps[c], &idx, &err);
		if (st == DT_OK) {
			DT_ASSERT(idx.ndims >= 1 && idx.ndims <= DT_IDX_MAX_DIMS);
			size_t header = 4 + 4 * (size_t)idx.ndims;
			DT_ASSERT(idx.data_bytes <= caps[c]);
			DT_ASSERT(header + idx.data_bytes == size);
			DT_ASSERT(idx.count * idx.elem_size == idx.data_bytes);
			DT_ASSERT(idx.data_bytes == 0 || memcmp(idx.data, data + header, idx.data_bytes) == 0);
			dt_idx_release(&idx);
		} else {
			DT_ASSERT(st == DT_DATA || st == DT_NOMEM);
			DT_ASSERT(err.msg[0] != '\0');
			DT_ASSERT(idx.data == NULL);
		}
	}
	return 0;
}
