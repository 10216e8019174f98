#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Process-wide logging settings: written once at start-up by cmd/, read by
 * every thread afterwards. */
static char log_prefix[64] = "[dtrain]";
static enum dt_log_level log_threshold = DT_LOG_INFO;

void dt_log_set_identity(const char *role, int index)
{
	if (index < 0)
		snprintf(log_prefix, sizeof(log_prefix), "[%s]", role);
	else
		snprintf(log_prefix, sizeof(log_prefix), "[%s:%d]", role, index);
}

void dt_log_set_level(enum dt_log_level level)
{
	log_threshold = level;
}

enum dt_log_level dt_log_get_level(void)
{
	return log_threshold;
}

enum dt_status dt_log_parse_level(const char *text, enum dt_log_level *out, struct dt_err *err)
{
	static const char *const names[] = { "debug", "info", "warn", "error", "off" };
	for (int i = 0; i <= DT_LOG_OFF; i++) {
		if (strcasecmp(text, names[i]) == 0) {
			*out = (enum dt_log_level)i;
			return DT_OK;
		}
	}
	return dt_err_set(err, DT_USAGE, "unknown log level '%s' (valid: debug, info, warn, error, off)", text);
}

void dt_log(enum dt_log_level level, const char *fmt, ...)
{
	if (level < log_threshold || level >= DT_LOG_OFF)
		return;
	static const char letters[] = { 'D', 'I', 'W', 'E' };
	char line[2048];
	int n = snprintf(line, sizeof(line), "%s %c ", log_prefix, letters[level]);
	if (n < 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	/* One write per line keeps lines whole when threads or tasks share stderr. */
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}
