/* libFuzzer target for the --warm_start_from readers (src/train/warm_start.c,
 * warm_start_h5.c): any bytes go through the same recognition as a file
 * (HDF5 → Keras 2 save_weights, full-model .h5 or Keras 3 .weights.h5;
 * safetensors → a dtrain checkpoint, verified, or any safetensors file),
 * except JSON: an input beginning with '{' is a TF.js model.json up to its
 * first NUL byte, and every weight shard it names is the bytes after it.
 *
 * Any input must either open, with tensors whose shapes have at most
 * DT_WARM_MAX_DIMS non-negative dimensions and whose data then read
 * cleanly (DT_OK) or fail with DT_CKPT and a message, or fail with DT_CKPT
 * or DT_USAGE and a non-empty message. It must never crash, read out of
 * bounds, leak, or allocate more than the shapes it reads (capped here).
 * The HDF5 library itself is not built with sanitizers: its own reads are
 * checked only by its own checks. Leaks allocated inside libhdf5 are
 * suppressed: after some sequences of damaged files (2 of 20,000 inputs
 * here) LeakSanitizer finds blocks of HDF5's own free lists unreferenced,
 * though the file is closed with H5F_CLOSE_STRONG and no object of ours is
 * left open in it (H5Fget_obj_count says 1, the file); any input alone
 * leaks nothing. Our own allocations are still checked. And libhdf5 asks
 * malloc for whatever size a damaged header claims (2^57 bytes for one
 * input): malloc's NULL is its error path, which `dtrain` takes (exit 4),
 * so the target lets the allocator return NULL instead of aborting.
 * Run: make build-fuzz/fuzz_warm_start &&
 *      build-fuzz/fuzz_warm_start tests/fuzz/corpus/fuzz_warm_start */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "train/warm_start.h"

#define MAX_READ (1 << 20) /* elements read per tensor */

struct blob {
	const uint8_t *p;
	size_t n;
};

static enum dt_status shard(void *ctx, const char *rel, unsigned char **bytes, size_t *len, struct dt_err *err)
{
	(void)rel;
	(void)err;
	const struct blob *b = ctx;
	*bytes = dt_xmalloc(b->n + 1);
	memcpy(*bytes, b->p, b->n);
	*len = b->n;
	return DT_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__lsan_default_suppressions(void);
const char *__asan_default_options(void);

const char *__asan_default_options(void)
{
	return "allocator_may_return_null=1";
}

const char *__lsan_default_suppressions(void)
{
	return "leak:libhdf5_serial.so\n";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dt__warm_source s;
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st;
	if (size > 0 && data[0] == '{') {
		const uint8_t *nul = memchr(data, 0, size);
		size_t jlen = nul ? (size_t)(nul - data) : size;
		struct blob b = { nul ? nul + 1 : data + size, nul ? size - jlen - 1 : 0 };
		st = dt__warm_tfjs_open(data, jlen, "<fuzz>", shard, &b, &s, &err);
	} else {
		st = dt__warm_open_bytes(data, size, "<fuzz>", &s, &err);
	}
	if (st != DT_OK) {
		DT_ASSERT((st == DT_CKPT || st == DT_USAGE) && err.msg[0] != '\0');
		return 0;
	}
	for (int i = 0; i < s.num; i++) {
		const struct dt__warm_tensor *t = &s.t[i];
		DT_ASSERT(t->name && t->ndim >= 0 && t->ndim <= DT_WARM_MAX_DIMS);
		for (int k = 0; k < t->ndim; k++)
			DT_ASSERT(t->shape[k] >= 0);
		if (t->count < 0 || t->count > MAX_READ)
			continue;
		float *buf = dt_xmallocarray(t->count ? (size_t)t->count : 1, sizeof(float));
		struct dt_err rerr = DT_ERR_INIT;
		enum dt_status rs = s.read(&s, i, buf, &rerr);
		DT_ASSERT(rs == DT_OK || (rs == DT_CKPT && rerr.msg[0] != '\0'));
		free(buf);
	}
	dt__warm_source_release(&s);
	return 0;
}
