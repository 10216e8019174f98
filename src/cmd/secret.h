/*
 * secret.h — the options every command that starts a cluster task takes for
 * its secret, and the rule they enforce (docs/SECURITY.md): a task of a
 * cluster that reaches beyond loopback runs with a secret, or with
 * --insecure said out loud, as Redis's protected mode.
 */
#ifndef DT_CMD_SECRET_H
#define DT_CMD_SECRET_H

#include <stddef.h>

#include "dtrain.h"
#include "base/err.h"
#include "net/auth.h"

struct dt_secret_flags {
	const char *secret_file;   /* --cluster_secret_file; "" = DTRAIN_CLUSTER_SECRET_FILE, else none */
	const char *wire_security; /* --wire_security: "" (auth with a secret), auth, encrypt, none */
	int insecure;              /* --insecure: no secret on a network */
};

#define DT_SECRET_OPTIONS(f)                                                                                    \
	DT_OPT_GROUP("Security (docs/SECURITY.md)"),                                                           \
	DT_OPT_STRING("cluster_secret_file", &(f)->secret_file, "PATH",                                        \
		      "the cluster's shared secret, mode 0600 [default: $" DT_AUTH_ENV "]"),                    \
	DT_OPT_STRING("wire_security", &(f)->wire_security, "MODE",                                             \
		      "auth: every frame authenticated (default with a secret); encrypt: also encrypted"),       \
	DT_OPT_BOOL("insecure", &(f)->insecure, "run a cluster on a network without a secret (trusted networks only)")

/* Finds the secret the flags or the environment name: *path (NULL: none)
 * and *mode, for dtrain_session_set_secret, which reads it. Without one,
 * that is allowed only when every address in addrs (naddrs, NULLs skipped)
 * is loopback or f->insecure: otherwise DT_CONFIG saying how to make a
 * secret. A bad --wire_security or one without a secret is DT_USAGE. */
enum dt_status dt_cmd_cluster_secret(const struct dt_secret_flags *f, const char *const *addrs, size_t naddrs,
				     const char **path, dtrain_wire_security *mode, struct dt_err *err) DT_MUST_CHECK;

/* Whether "host:port" names a loopback host (127.*, localhost, ::1). */
int dt_cmd_addr_is_loopback(const char *addr);

int dt_cmd_secret(int argc, char **argv);

#endif
