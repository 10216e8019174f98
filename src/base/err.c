#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/strutil.h"

enum dt_status dt_err_set(struct dt_err *err, enum dt_status st, const char *fmt, ...)
{
	if (!err)
		return st;
	va_list ap;
	va_start(ap, fmt);
	dt_vfmt(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	err->status = st;
	return st;
}

enum dt_status dt_err_prefix(struct dt_err *err, const char *fmt, ...)
{
	if (!err)
		return DT_INTERNAL;
	char prefix[DT_ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	size_t plen = dt_vfmt(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);

	/* Shift the old message right and put "<prefix>: " in front; truncate at
	 * the cap, on UTF-8 character boundaries. */
	size_t mlen = strlen(err->msg);
	if (plen + 2 >= sizeof(err->msg))
		plen = dt_utf8_prefix_len(prefix, sizeof(err->msg) - 3);
	if (plen + 2 + mlen >= sizeof(err->msg))
		mlen = dt_utf8_prefix_len(err->msg, sizeof(err->msg) - plen - 3);
	memmove(err->msg + plen + 2, err->msg, mlen);
	err->msg[plen + 2 + mlen] = '\0';
	memcpy(err->msg, prefix, plen);
	err->msg[plen] = ':';
	err->msg[plen + 1] = ' ';
	if (err->status == DT_OK)
		err->status = DT_INTERNAL;
	return err->status;
}

void dt_err_hint(struct dt_err *err, const char *fmt, ...)
{
	if (!err)
		return;
	size_t used = strlen(err->msg);
	if (used + 8 >= sizeof(err->msg))
		return;
	int n = snprintf(err->msg + used, sizeof(err->msg) - used, "\nhint: ");
	if (n < 0)
		return;
	used += (size_t)n;
	va_list ap;
	va_start(ap, fmt);
	dt_vfmt(err->msg + used, sizeof(err->msg) - used, fmt, ap);
	va_end(ap);
}

void dt_err_clear(struct dt_err *err)
{
	if (!err)
		return;
	err->status = DT_OK;
	err->msg[0] = '\0';
}
