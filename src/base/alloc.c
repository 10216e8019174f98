#include "base/alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Noreturn void out_of_memory(size_t size)
{
	char msg[128];
	int n = snprintf(msg, sizeof(msg), "fatal: out of memory allocating %zu bytes\n", size);
	if (n > 0) {
		ssize_t w = write(STDERR_FILENO, msg, (size_t)n);
		(void)w;
	}
	abort();
}

void *dt_xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);
	if (!p)
		out_of_memory(size);
	return p;
}

void *dt_xcalloc(size_t count, size_t size)
{
	void *p = calloc(count ? count : 1, size ? size : 1);
	if (!p)
		out_of_memory(count * size);
	return p;
}

void *dt_xmallocarray(size_t count, size_t size)
{
	if (size && count > SIZE_MAX / size)
		out_of_memory(SIZE_MAX);
	return dt_xmalloc(count * size);
}

void *dt_xrealloc(void *ptr, size_t size)
{
	void *p = realloc(ptr, size ? size : 1);
	if (!p)
		out_of_memory(size);
	return p;
}

char *dt_xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = dt_xmalloc(n);
	memcpy(p, s, n);
	return p;
}

void *dt_xalloc_aligned(size_t count, size_t size)
{
	if (size && count > SIZE_MAX / size)
		out_of_memory(SIZE_MAX);
	size_t bytes = count * size;
	size_t rounded = (bytes + 63) & ~(size_t)63;
	void *p = aligned_alloc(64, rounded ? rounded : 64);
	if (!p)
		out_of_memory(bytes);
	memset(p, 0, rounded ? rounded : 64);
	return p;
}

enum dt_status dt_try_malloc(void **out, size_t size, struct dt_err *err)
{
	*out = malloc(size ? size : 1);
	if (!*out)
		return dt_err_set(err, DT_NOMEM, "out of memory allocating %zu bytes", size);
	return DT_OK;
}

void dt__assert_fail(const char *expr, const char *file, int line, const char *func)
{
	fprintf(stderr, "BUG: %s:%d: %s: assertion failed: %s\n", file, line, func, expr);
	abort();
}
