/*
 * status.h — the one list of dtrain's status codes.
 *
 * Every fallible function returns an `enum dt_status`; DT_OK is zero so
 * `if (st) return st;` reads naturally. The list is written once, as the
 * X-macro below, and expands into the enum, the names, the messages and the
 * process exit codes, so the four can never drift apart (libuv's
 * UV_ERRNO_MAP idea).
 *
 * Exit codes (documented for users in docs/EXIT_CODES.md):
 *   0 ok · 1 runtime failure · 2 usage or configuration ·
 *   3 peer failure or timeout (retryable) · 4 checkpoint or data I/O
 */
#ifndef DT_BASE_STATUS_H
#define DT_BASE_STATUS_H

/* X(NAME, exit code, message) */
#define DT_STATUS_MAP(X)                                              \
	X(OK,        0, "success")                                    \
	X(USAGE,     2, "usage error")                                \
	X(CONFIG,    2, "invalid configuration")                      \
	X(NOMEM,     1, "out of memory")                              \
	X(IO,        4, "input/output error")                         \
	X(DATA,      4, "bad data file")                              \
	X(CKPT,      4, "bad checkpoint")                             \
	X(PEER,      3, "peer failure")                               \
	X(TIMEOUT,   3, "deadline exceeded")                          \
	X(PROTOCOL,  3, "protocol violation")                         \
	X(RUNTIME,   1, "runtime failure")                            \
	X(INTERNAL,  1, "internal error")

enum dt_status {
#define DT__STATUS_ENUM(name, code, msg) DT_##name,
	DT_STATUS_MAP(DT__STATUS_ENUM)
#undef DT__STATUS_ENUM
	DT_STATUS_COUNT
};

/* "DT_CONFIG"-style name without the prefix ("CONFIG"); never NULL. */
const char *dt_status_name(enum dt_status st);
/* A short human message ("invalid configuration"); never NULL. */
const char *dt_status_message(enum dt_status st);
/* The process exit code this status maps to (0..4). */
int dt_status_exit_code(enum dt_status st);

/* Marks fallible functions: ignoring their status is a compile warning. */
#define DT_MUST_CHECK __attribute__((warn_unused_result))

#endif
