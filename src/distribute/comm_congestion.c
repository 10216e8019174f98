/*
 * comm_congestion.c — which TCP congestion control the links a rank opens
 * use. A rank's collective bytes leave on the connections it dials (the
 * accepted ones carry the neighbours' bytes in, and acknowledgements), so
 * setting TCP_CONGESTION on those before the handshake decides how its
 * data is sent.
 *
 * Why not always the host's: bbr paces every socket. With the fq qdisc fq
 * does the pacing; without it (a kernel without sch_fq, or a qdisc of
 * pfifo_fast or fq_codel, the defaults) each socket paces itself with a
 * high-resolution timer per burst, and a collective's large steps are one
 * burst after another. Measured on a 2-vCPU VM whose host default is bbr
 * (docs/COLLECTIVES.md, "TCP congestion control"): 4 ranks at 10 Gbit/s
 * between emulated hosts, a 1 MB all-reduce took 2.0 ms under bbr and 1.3
 * ms under cubic (the wire's time for the 1.5 MB each rank sends), with
 * 37,000 pacing timers a second against none; 2 ranks over loopback, 16 MB,
 * 6.4 against 3.7 ms. So where the host's default is bbr, a comm takes
 * cubic, or reno where this process may not set cubic (reno may always be
 * set; on links of sub-millisecond round trips cubic behaves as reno).
 * "host" keeps the host's; any name is set as given, or the comm fails to
 * start saying why.
 */
#include "distribute/comm_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/strutil.h"

#define CC_ENV "DTRAIN_COLLECTIVE_TCP_CONGESTION"

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

static enum dt_status refuse(const char *name, const char *from, int e, struct dt_err *err)
{
	char avail[256], allowed[256];
	read_sysctl("/proc/sys/net/ipv4/tcp_available_congestion_control", avail, sizeof(avail));
	read_sysctl("/proc/sys/net/ipv4/tcp_allowed_congestion_control", allowed, sizeof(allowed));
	return dt_err_set(err, DT_CONFIG,
			  "TCP congestion control '%s' (%s) cannot be set: %s; this kernel has %s, and a process "
			  "without CAP_NET_ADMIN may set %s; 'host' keeps the host's default (docs/COLLECTIVES.md, "
			  "\"TCP congestion control\")",
			  name, from, strerror(e), avail, allowed);
}

enum dt_status dt__comm_choose_congestion(struct dt_comm *c, const struct dt_comm_config *cfg, struct dt_err *err)
{
	c->tcp_cc[0] = 0;
	const int in_config = cfg->tcp_congestion && *cfg->tcp_congestion;
	const char *given = in_config ? cfg->tcp_congestion : getenv(CC_ENV);
	if (given && *given) {
		const char *from = in_config ? "the comm config's tcp_congestion" : CC_ENV;
		if (strcmp(given, "host") == 0)
			return DT_OK;
		int e = strlen(given) < sizeof(c->tcp_cc) ? dt_sock_cc_usable(given) : ENAMETOOLONG;
		if (e)
			return refuse(given, from, e, err);
		dt_fmt(c->tcp_cc, sizeof(c->tcp_cc), "%s", given);
		return DT_OK;
	}
	char host[DT_SOCK_CC_MAX];
	if (dt_sock_cc_default(host) != 0 || strncmp(host, "bbr", 3) != 0)
		return DT_OK;
	static const char *const instead[] = { "cubic", "reno" };
	for (size_t i = 0; i < sizeof(instead) / sizeof(instead[0]); i++) {
		if (dt_sock_cc_usable(instead[i]) != 0)
			continue;
		dt_fmt(c->tcp_cc, sizeof(c->tcp_cc), "%s", instead[i]);
		if (c->n > 1)
			dt_info("TCP links: congestion control %s, not the host's %s, which paces each socket with a timer "
				"per burst where no fq qdisc paces them (all-reduces of 1 MB and up 1.1-1.7x slower; "
				"docs/COLLECTIVES.md, \"TCP congestion control\"); %s=host keeps %s",
				c->tcp_cc, host, CC_ENV, host);
		return DT_OK;
	}
	return DT_OK;
}

const char *dt_comm_tcp_congestion(const struct dt_comm *comm)
{
	return comm->tcp_cc;
}
