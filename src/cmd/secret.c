/*
 * secret.c — `dtrain secret new PATH`, and how the commands that start a
 * cluster task find its secret (docs/SECURITY.md).
 */
#include "cmd/secret.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "cmd/cmd.h"

static const char usage[] = "dtrain secret new PATH";

int dt_cmd_secret(int argc, char **argv)
{
	struct dt_option opts[] = { DT_OPT_END };
	struct dt_args args;
	int code;
	if (!dt_cmd_parse(opts, argc, argv, usage, &args, &code))
		return code;
	struct dt_err err = DT_ERR_INIT;
	if (args.count != 2 || strcmp(args.items[0], "new") != 0) {
		dt_args_release(&args);
		fprintf(stderr, "usage: %s\n(see 'dtrain secret --help')\n", usage);
		return 2;
	}
	enum dt_status st = dt_auth_secret_new(args.items[1], &err);
	if (!st)
		printf("wrote a new cluster secret to %s (mode 0600); give every task of the cluster the same file "
		       "with --cluster_secret_file=%s or %s\n",
		       args.items[1], args.items[1], DT_AUTH_ENV);
	dt_args_release(&args);
	return st ? dt_cmd_report(&err) : 0;
}

static int is_loopback(const char *host)
{
	return strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 ||
	       strcmp(host, "[::1]") == 0;
}

int dt_cmd_addr_is_loopback(const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
	snprintf(host, sizeof(host), "%.*s", (int)(n < sizeof(host) ? n : sizeof(host) - 1), addr);
	return is_loopback(host);
}

enum dt_status dt_cmd_cluster_secret(const struct dt_secret_flags *f, const char *const *addrs, size_t naddrs,
				     const char **path_out, dtrain_wire_security *mode_out, struct dt_err *err)
{
	*path_out = NULL;
	const char *path = f->secret_file && f->secret_file[0] ? f->secret_file : getenv(DT_AUTH_ENV);
	enum dt_wire_security mode = DT_WIRE_AUTH;
	int mode_given = f->wire_security && f->wire_security[0];
	if (mode_given && dt_wire_security_parse(f->wire_security, &mode) != 0)
		return dt_err_set(err, DT_USAGE, "--wire_security must be auth or encrypt (none: no secret), not '%s'",
				  f->wire_security);
	if (path && path[0]) {
		if (mode == DT_WIRE_NONE)
			return dt_err_set(err, DT_USAGE, "--wire_security=none contradicts the cluster secret '%s' "
							 "(every connection of a cluster with a secret is authenticated)", path);
		*path_out = path;
		*mode_out = mode == DT_WIRE_ENCRYPT ? DTRAIN_WIRE_ENCRYPT : DTRAIN_WIRE_AUTH;
		return DT_OK;
	}
	if (mode_given && mode != DT_WIRE_NONE)
		return dt_err_set(err, DT_USAGE, "--wire_security=%s needs a cluster secret: --cluster_secret_file=PATH "
						 "or %s (make one with `dtrain secret new PATH`)", f->wire_security, DT_AUTH_ENV);
	if (f->insecure)
		return DT_OK;
	for (size_t i = 0; i < naddrs; i++) {
		if (!addrs[i] || dt_cmd_addr_is_loopback(addrs[i]))
			continue;
		dt_err_set(err, DT_CONFIG,
			   "this cluster's task address %s is not a loopback address, and no cluster secret was given: "
			   "anyone who can reach its port could join, push, pull or end the run",
			   addrs[i]);
		dt_err_hint(err, "make a secret with `dtrain secret new PATH` and start every task with "
				 "--cluster_secret_file=PATH (or %s=PATH); or pass --insecure if this network is trusted",
			    DT_AUTH_ENV);
		return DT_CONFIG;
	}
	return DT_OK;
}
