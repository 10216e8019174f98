/*
 * congestion.h — the TCP congestion control of the connections that carry
 * dtrain's bulk bytes: a comm's links (distribute/collective.h) and a
 * trainer's parameter-server connections, both ways (distribute/ps_client.h,
 * ps_server.h).
 *
 * Why not always the host's default: bbr paces every socket. With the fq
 * qdisc, fq does it; without it (a kernel without sch_fq, or the usual
 * pfifo_fast and fq_codel qdiscs) each socket paces itself with a
 * high-resolution timer per burst, and dtrain's large transfers are one
 * burst after another. Measured on a 2-vCPU VM whose default is bbr
 * (docs/COLLECTIVES.md, "TCP congestion control"): 4 ranks at 10 Gbit/s
 * between emulated hosts, a 1 MB all-reduce 2.0 ms under bbr and 1.3 ms
 * under cubic (the wire's time), 37,000 pacing timers a second against
 * none; a trainer's push and pull of 10 MB through one ps on loopback
 * 2.6-2.8 against 5.6-5.7 GB/s. So where the host's default is bbr, dtrain
 * takes cubic, or reno where this process may not set cubic (reno may
 * always be set; on links of sub-millisecond round trips cubic behaves as
 * reno). A name, or "host" to keep the host's default, can be given instead
 * (a config field, or DTRAIN_TCP_CONGESTION).
 *
 * The name must be on a socket before its handshake: a congestion control's
 * set-up at the handshake stays (bbr's asks the socket to pace itself, and a
 * socket moved off bbr afterwards still does). A dialled socket takes it
 * before connect(); an accepted one inherits its listener's.
 */
#ifndef DT_NET_CONGESTION_H
#define DT_NET_CONGESTION_H

#include "base/err.h"

#define DT_TCP_CC_MAX 16 /* a name's bytes with its NUL (the kernel's TCP_CA_NAME_MAX) */
#define DT_TCP_CC_ENV "DTRAIN_TCP_CONGESTION"

/* The name to set on dtrain's bulk connections, into out ("": keep the
 * host's default): `given` (a config's value) if set, else
 * DTRAIN_TCP_CONGESTION if set, else the default above. "host" keeps the
 * host's; any other name must be one this process may set, else DT_CONFIG
 * naming `given_by` (or the variable), what the kernel has and what may be
 * set without CAP_NET_ADMIN. Logs the default's choice once per process
 * when it replaces the host's. */
enum dt_status dt_tcp_cc_choose(const char *given, const char *given_by, char out[DT_TCP_CC_MAX],
				struct dt_err *err) DT_MUST_CHECK;

/* Sets `name` on fd (TCP_CONGESTION): 0, or the errno (ENOENT: not in this
 * kernel; EPERM: not in net.ipv4.tcp_allowed_congestion_control and no
 * CAP_NET_ADMIN). NULL or "" sets nothing (0). */
int dt_tcp_cc_set(int fd, const char *name);

/* The name a new TCP socket of this network namespace gets
 * (net.ipv4.tcp_congestion_control): 0, or an errno. */
int dt_tcp_cc_default(char name[DT_TCP_CC_MAX]);

/* 0 when this process may set `name` on a socket, else dt_tcp_cc_set's errno. */
int dt_tcp_cc_usable(const char *name);

#endif
