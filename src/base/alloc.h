/*
 * alloc.h — checked allocation and the always-on assertion.
 *
 * dt_xmalloc and friends never return NULL: running out of memory on a
 * normal allocation is treated like git's xmalloc does, as a fatal condition
 * reported with the size that failed. Allocations whose size comes from
 * untrusted input (a frame length, a file header) must be checked against a
 * cap first, and may use dt_try_malloc to turn failure into DT_NOMEM.
 *
 * Sizes are multiplied with overflow checks (dt_xmallocarray).
 * Every allocation here is released with free(); dt_free_aligned is free().
 */
#ifndef DT_BASE_ALLOC_H
#define DT_BASE_ALLOC_H

#include <stddef.h>
#include "base/err.h"

void *dt_xmalloc(size_t size);
void *dt_xcalloc(size_t count, size_t size);
void *dt_xmallocarray(size_t count, size_t size);
void *dt_xrealloc(void *ptr, size_t size);
char *dt_xstrdup(const char *s);
/* 64-byte aligned, zero-filled; for flat parameter and activation buffers. */
void *dt_xalloc_aligned(size_t count, size_t size);

/* Fallible variant for sizes that come from outside; fills err on failure. */
enum dt_status dt_try_malloc(void **out, size_t size, struct dt_err *err) DT_MUST_CHECK;

/* Reports our own bug and aborts; stays on in release builds. */
_Noreturn void dt__assert_fail(const char *expr, const char *file, int line, const char *func);

#define DT_ASSERT(expr) \
	((expr) ? (void)0 : dt__assert_fail(#expr, __FILE__, __LINE__, __func__))

#define DT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
