/*
 * congestion.c — which TCP congestion control dtrain's bulk connections
 * use, and setting it (congestion.h says why).
 */
#include "net/congestion.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "base/strutil.h"

int dt_tcp_cc_set(int fd, const char *name)
{
	if (!name || !*name)
		return 0;
	return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name)) == 0 ? 0 : errno;
}

int dt_tcp_cc_default(char name[DT_TCP_CC_MAX])
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	socklen_t len = DT_TCP_CC_MAX - 1;
	memset(name, 0, DT_TCP_CC_MAX);
	int e = getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0 ? 0 : errno;
	close(fd);
	return e;
}

int dt_tcp_cc_usable(const char *name)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	int e = dt_tcp_cc_set(fd, name);
	close(fd);
	return e;
}

/* The first line of a /proc/sys file, or "(unreadable)". */
static void read_sysctl(const char *path, char *out, size_t cap)
{
	FILE *f = fopen(path, "re");
	int ok = f && fgets(out, (int)cap, f);
	if (f)
		fclose(f);
	if (!ok)
		dt_fmt(out, cap, "(unreadable)");
	out[strcspn(out, "\n")] = 0;
}

static enum dt_status refuse(const char *name, const char *given_by, int e, struct dt_err *err)
{
	char avail[256], allowed[256];
	read_sysctl("/proc/sys/net/ipv4/tcp_available_congestion_control", avail, sizeof(avail));
	read_sysctl("/proc/sys/net/ipv4/tcp_allowed_congestion_control", allowed, sizeof(allowed));
	return dt_err_set(err, DT_CONFIG,
			  "TCP congestion control '%s' (%s) cannot be set: %s; this kernel has %s, and a process "
			  "without CAP_NET_ADMIN may set %s; 'host' keeps the host's default (docs/COLLECTIVES.md, "
			  "\"TCP congestion control\")",
			  name, given_by, strerror(e), avail, allowed);
}

enum dt_status dt_tcp_cc_choose(const char *given, const char *given_by, char out[DT_TCP_CC_MAX], struct dt_err *err)
{
	out[0] = 0;
	if (!given || !*given) {
		given = getenv(DT_TCP_CC_ENV);
		given_by = DT_TCP_CC_ENV;
	}
	if (given && *given) {
		if (strcmp(given, "host") == 0)
			return DT_OK;
		int e = strlen(given) < DT_TCP_CC_MAX ? dt_tcp_cc_usable(given) : ENAMETOOLONG;
		if (e)
			return refuse(given, given_by, e, err);
		dt_fmt(out, DT_TCP_CC_MAX, "%s", given);
		return DT_OK;
	}
	char host[DT_TCP_CC_MAX];
	if (dt_tcp_cc_default(host) != 0 || strncmp(host, "bbr", 3) != 0)
		return DT_OK;
	static const char *const instead[] = { "cubic", "reno" };
	for (size_t i = 0; i < sizeof(instead) / sizeof(instead[0]); i++) {
		if (dt_tcp_cc_usable(instead[i]) != 0)
			continue;
		dt_fmt(out, DT_TCP_CC_MAX, "%s", instead[i]);
		static atomic_int logged;
		if (!atomic_exchange(&logged, 1))
			dt_info("TCP connections: congestion control %s, not the host's %s, which paces each socket with a "
				"timer per burst where no fq qdisc paces them (all-reduces of 1 MB and up 1.1-1.7x slower, "
				"ps push and pull 1.8-2.1x; docs/COLLECTIVES.md, \"TCP congestion control\"); %s=host keeps %s",
				out, host, DT_TCP_CC_ENV, host);
		return DT_OK;
	}
	return DT_OK;
}
