/* libFuzzer target for the safetensors reader (src/train/checkpoint_st.c).
 *
 * Any input must either parse, with tensors that tile the byte buffer exactly
 * (sorted, no holes, sizes matching shape x dtype) and metadata that are all
 * strings, or fail with DT_CKPT and a non-empty message; the dtrain-level
 * check (format keys, header checksum, model signature, CRC-32C) must then
 * also return cleanly, and the header checksum the parser noted must equal
 * the writer's (dt_st_header_crc). It must never
 * crash, read out of bounds, leak, or allocate more than the input implies.
 * Run: make build-fuzz/fuzz_safetensors &&
 *      build-fuzz/fuzz_safetensors tests/fuzz/corpus/fuzz_safetensors */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "train/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dt_st_file *f = NULL;
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st = dt_st_parse(data, size, &f, &err);
	if (st != DT_OK) {
		DT_ASSERT(st == DT_CKPT && err.msg[0] != '\0' && f == NULL);
		return 0;
	}
	DT_ASSERT(f->data_start == 8 + f->header_len && f->data_start <= size);
	uint64_t at = 0;
	for (int i = 0; i < f->num_tensors; i++) {
		const struct dt_st_tensor_info *t = &f->tensors[i];
		DT_ASSERT(t->begin == at && t->end >= t->begin);
		DT_ASSERT(dt_st_dtype_bits(t->dtype) % 8 == 0);
		DT_ASSERT(dt_st_find(f, t->name) != NULL);
		at = t->end;
	}
	DT_ASSERT(at == size - f->data_start);
	for (int i = 0; i < f->num_meta; i++)
		DT_ASSERT(dt_st_meta(f, f->meta_keys[i]) != NULL);
	/* The header checksum the parser noted is the one the writer's primitive computes. */
	int found;
	size_t value_at;
	uint32_t crc;
	dt_st_header_crc(data, (size_t)f->data_start, &found, &value_at, &crc);
	DT_ASSERT(found == f->header_crc_found);
	DT_ASSERT(!found || (crc == f->header_crc_computed && value_at + 9 <= f->data_start));
	st = dt_ckpt_check_header(f, &err);
	DT_ASSERT(st == DT_OK || (st == DT_CKPT && err.msg[0] != '\0'));
	st = dt_ckpt_verify(f, data, &err);
	DT_ASSERT(st == DT_OK || (st == DT_CKPT && err.msg[0] != '\0'));
	dt_st_free(f);
	return 0;
}
