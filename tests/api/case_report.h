/*
 * case_report.h — the line the outside test programs (misuse.c, builtin.c)
 * print for each case, which tests/cli/test_api_*.c read back:
 *
 *   CASE <name>: <STATUS>: <message>
 *
 * the message's own lines (its hint) joined by "|"; err is cleared after.
 */
#ifndef API_CASE_REPORT_H
#define API_CASE_REPORT_H

#include <dtrain.h>

#include <stdio.h>

static void case_report(dtrain_error *err, const char *name, dtrain_status st)
{
	char msg[2048];
	snprintf(msg, sizeof(msg), "%s", st ? dtrain_error_message(err) : "");
	for (char *p = msg; *p; p++)
		if (*p == '\n')
			*p = '|';
	printf("CASE %s: %s: %s\n", name, dtrain_status_name(st), msg);
	fflush(stdout);
	dtrain_error_clear(err);
}

#endif
