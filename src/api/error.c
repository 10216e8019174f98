/*
 * error.c — the public error object and statuses (include/dtrain.h).
 *
 * A dtrain_error wraps the internal struct dt_err, so the library fills it
 * by passing &err->e down, and dtrain_status is enum dt_status under its
 * public names: the asserts below keep the two lists equal.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/internal.h"

#define DT__SAME(name, code, msg) \
	_Static_assert((int)DTRAIN_##name == (int)DT_##name, "dtrain_status and dt_status differ at " #name);
DT_STATUS_MAP(DT__SAME)
#undef DT__SAME
_Static_assert((int)DTRAIN_INTERNAL + 1 == (int)DT_STATUS_COUNT, "dtrain_status misses a status of base/status.h");

const char *dtrain_version(void)
{
	return DTRAIN_VERSION;
}

dtrain_error *dtrain_error_new(void)
{
	dtrain_error *e = calloc(1, sizeof(*e));
	if (e)
		dt_err_clear(&e->e);
	return e;
}

void dtrain_error_free(dtrain_error *err)
{
	free(err);
}

dtrain_status dtrain_error_status(const dtrain_error *err)
{
	return err ? (dtrain_status)err->e.status : DTRAIN_OK;
}

const char *dtrain_error_message(const dtrain_error *err)
{
	return err ? err->e.msg : "";
}

void dtrain_error_clear(dtrain_error *err)
{
	if (err)
		dt_err_clear(&err->e);
}

dtrain_status dtrain_error_set(dtrain_error *err, dtrain_status st, const char *fmt, ...)
{
	if (!err)
		return st;
	err->e.status = (enum dt_status)st;
	err->e.msg[0] = '\0';
	if (!fmt)
		return st;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->e.msg, sizeof(err->e.msg), fmt, ap);
	va_end(ap);
	return st;
}

static int known(dtrain_status st)
{
	return (int)st >= 0 && (int)st < DT_STATUS_COUNT;
}

const char *dtrain_status_name(dtrain_status st)
{
	return known(st) ? dt_status_name((enum dt_status)st) : "UNKNOWN";
}

const char *dtrain_status_message(dtrain_status st)
{
	return known(st) ? dt_status_message((enum dt_status)st) : "unknown status";
}

int dtrain_status_exit_code(dtrain_status st)
{
	return known(st) ? dt_status_exit_code((enum dt_status)st) : 1;
}

struct dt_err *dt__api_err(dtrain_error *err)
{
	return err ? &err->e : NULL;
}
