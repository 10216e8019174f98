#include "base/status.h"

static const char *const status_names[] = {
#define DT__STATUS_NAME(name, code, msg) #name,
	DT_STATUS_MAP(DT__STATUS_NAME)
#undef DT__STATUS_NAME
};

static const char *const status_messages[] = {
#define DT__STATUS_MSG(name, code, msg) msg,
	DT_STATUS_MAP(DT__STATUS_MSG)
#undef DT__STATUS_MSG
};

static const int status_exit_codes[] = {
#define DT__STATUS_CODE(name, code, msg) code,
	DT_STATUS_MAP(DT__STATUS_CODE)
#undef DT__STATUS_CODE
};

static int in_range(enum dt_status st)
{
	return (int)st >= 0 && st < DT_STATUS_COUNT;
}

const char *dt_status_name(enum dt_status st)
{
	return in_range(st) ? status_names[st] : "UNKNOWN";
}

const char *dt_status_message(enum dt_status st)
{
	return in_range(st) ? status_messages[st] : "unknown status";
}

int dt_status_exit_code(enum dt_status st)
{
	return in_range(st) ? status_exit_codes[st] : 1;
}
