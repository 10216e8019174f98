#include "tensor/tensor.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

struct dt_tensor dt_tensor_view(float *data, int ndim, const int64_t *shape)
{
	DT_ASSERT(ndim >= 0 && ndim <= DT_TENSOR_MAX_DIMS);
	struct dt_tensor t;
	memset(&t, 0, sizeof(t));
	t.data = data;
	t.ndim = ndim;
	for (int i = 0; i < ndim; i++) {
		DT_ASSERT(shape[i] >= 0);
		t.shape[i] = shape[i];
	}
	return t;
}

size_t dt_shape_count(int ndim, const int64_t *shape)
{
	size_t n = 1;
	for (int i = 0; i < ndim; i++)
		n *= (size_t)shape[i];
	return n;
}

size_t dt_tensor_count(const struct dt_tensor *t)
{
	return dt_shape_count(t->ndim, t->shape);
}

void dt_shape_format(char *buf, size_t cap, int ndim, const int64_t *shape)
{
	if (cap == 0)
		return;
	size_t used = 0;
	buf[0] = '\0';
	if (ndim == 0) {
		snprintf(buf, cap, "()");
		return;
	}
	for (int i = 0; i <= ndim && used < cap; i++) {
		int n;
		if (i == ndim)
			n = snprintf(buf + used, cap - used, ")");
		else
			n = snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "(", (long long)shape[i]);
		if (n < 0)
			return;
		used += (size_t)n;
	}
}

struct dt_fp_mode dt_fp_flush_denormals(void)
{
	struct dt_fp_mode mode = { 0 };
#if defined(__SSE__)
	mode.saved = _mm_getcsr();
	_mm_setcsr(mode.saved | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
#endif
	return mode;
}

void dt_fp_restore(struct dt_fp_mode mode)
{
#if defined(__SSE__)
	_mm_setcsr(mode.saved);
#else
	(void)mode;
#endif
}

const char *dt_dtype_name(enum dt_dtype t)
{
	return t == DT_INT32 ? "int32" : "float32";
}
