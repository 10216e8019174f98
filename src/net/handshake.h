/*
 * handshake.h — who is on the other end, and do we train the same thing.
 *
 * Every connection starts with one exchange (docs/PROTOCOL.md, "Handshake"):
 *
 *     connecting side                          accepting side
 *     HELLO(version, fingerprint, role:index,  ──▶  checks version, cluster fingerprint
 *           incarnation, model signature)           and model signature against its own
 *                                          ◀──  HELLO_OK(its own hello)   or
 *                                          ◀──  REFUSE(code, reason), then closes
 *
 * The connecting side checks the answer the same way, so both ends know the
 * other's role, index and incarnation (a restarted peer has a new one: that is
 * how the chief notices a parameter server came back empty). A refusal
 * carries a reason written for a person, and the refused side returns it as
 * its error, e.g.
 *
 *   ps:0 at 127.0.0.1:41021 refused the connection: model signature differs:
 *   variable 'dense_1/kernel' is (784, 256) on ps:0 but (784, 512) on worker:1
 *
 * Refusals are DT_CONFIG (the two tasks were started differently: retrying
 * will not help); failures to talk at all are DT_PEER/DT_TIMEOUT/DT_PROTOCOL.
 *
 * Usually both sides run on the event loop, inside conn (dt_server accepts,
 * dt_conn_connect / dt_conn_start_client dial), using dt_handshake_judge and
 * dt_handshake_check from here. The blocking forms below are for tools, tests
 * and one-peer exchanges; they read exactly the bytes of the handshake
 * frames, never more, so the descriptor can be handed to dt_conn_open
 * afterwards with nothing lost.
 */
#ifndef DT_NET_HANDSHAKE_H
#define DT_NET_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/frame.h"
#include "net/messages.h"

/* A random nonzero 64-bit id drawn once per process start (getrandom, else
 * /dev/urandom); a forked child draws its own. Thread-safe. */
uint64_t dt_net_incarnation(void);

/* Fills `h` for this process: protocol version, incarnation, role (truncated
 * to DT_ROLE_MAX), index, fingerprint; an empty signature to add variables to.
 * Release with dt_hello_release. */
void dt_hello_init(struct dt_hello *h, const char *role, uint32_t index, uint64_t cluster_fingerprint);
/* "worker:1" */
void dt_hello_name(const struct dt_hello *h, char *buf, size_t cap);

/* Compares two signatures; 0 when equal, else 1 and the first difference in
 * buf, naming each side by its label:
 *   "variable 'dense_1/kernel' is (784, 256) on ps:0 but (784, 512) on worker:1" */
int dt_signature_diff(const struct dt_signature *a, const char *a_label, const struct dt_signature *b,
		      const char *b_label, char *buf, size_t cap);

/* ---- admission: what an unjudged peer may cost (docs/PROTOCOL.md §4.1) ---- */

/* A peer that has connected but whose HELLO has not been judged yet is a
 * stranger: it may send no more than a hello as long as ours could be, with
 * margin, and it is checked against the frame header's length before any
 * byte is stored. A real peer trains the same model, so its hello differs
 * from ours only in the role name; one twice as long is not a peer we could
 * accept anyway (it is refused as a different model). */
#define DT_HELLO_CAP_SLACK 4096u /* bytes added to twice our own hello */
/* The largest HELLO payload taken from an unjudged peer:
 * 2 x (our encoded hello + DT_ROLE_MAX) + DT_HELLO_CAP_SLACK, never above DT_MSG_CAP_HANDSHAKE. */
uint64_t dt_handshake_hello_cap(const struct dt_hello *local);

/* Listeners judge pending connections concurrently, each within its own
 * handshake deadline, and keep at most this many unjudged at once; a new one
 * beyond it closes the oldest (it has had the longest to speak). */
#define DT_NET_PENDING_MAX 256
/* Bytes of HELLO payload all unjudged connections of one listener may hold
 * together: max(this, 2 x hello cap); a header that would exceed it closes
 * the oldest others first. */
#define DT_NET_PENDING_BYTES (8u << 20)
/* The pending budget of a listener whose hello cap is `hello_cap`. */
uint64_t dt_handshake_pending_budget(uint64_t hello_cap);

/* Judges a peer's hello against ours: 0 to accept, else a dt_refuse_code with
 * the reason (naming both sides by role:index) in buf. */
uint32_t dt_handshake_check(const struct dt_hello *local, const struct dt_hello *remote, char *buf, size_t cap);

/* The accepting side's step, transport-free: decodes a HELLO payload into
 * `remote` (initialized here; release it) and judges it. DT_PROTOCOL if the
 * payload is malformed; otherwise DT_OK with *refuse_code 0 (accept) or a
 * refusal code and `reason`. */
enum dt_status dt_handshake_judge(const struct dt_hello *local, const uint8_t *payload, size_t len,
				  struct dt_hello *remote, uint32_t *refuse_code, char *reason, size_t reason_cap,
				  struct dt_err *err) DT_MUST_CHECK;

/* Blocking client side on a connected descriptor: sends HELLO, waits for the
 * answer until `deadline`, checks it (and, if expect_role is not NULL, that the
 * peer is expect_role:expect_index). `peer` labels the peer in errors ("ps:0
 * at 127.0.0.1:41021"). On success *remote holds the peer's hello (release
 * it); on failure it is empty. */
enum dt_status dt_handshake_client(int fd, const struct dt_hello *local, const char *peer, const char *expect_role,
				   uint32_t expect_index, int64_t deadline, struct dt_hello *remote,
				   struct dt_err *err) DT_MUST_CHECK;

/* Blocking accepting side for a single peer: waits for HELLO, answers
 * HELLO_OK or REFUSE. A refusal returns DT_CONFIG with the reason. */
enum dt_status dt_handshake_server(int fd, const struct dt_hello *local, const char *peer, int64_t deadline,
				   struct dt_hello *remote, struct dt_err *err) DT_MUST_CHECK;

/* ---- blocking frame I/O on a bare descriptor (handshakes, tests, tools) ---- */

/* Sends one frame (header and payload in one writev, payload not copied). */
enum dt_status dt_frame_send_fd(int fd, uint16_t type, uint32_t flags, uint64_t request_id, const void *payload,
				size_t len, int64_t deadline, const char *peer, struct dt_err *err) DT_MUST_CHECK;
/* dt_frame_send_fd for an authenticated link (net/auth.h): the frame is
 * sealed with `sec` (in encrypt mode the payload is encrypted in place, so it
 * is not const) and its tag follows the payload. */
struct dt_wire_sec;
enum dt_status dt_frame_send_fd_sealed(int fd, struct dt_wire_sec *sec, uint16_t type, uint32_t flags, uint8_t *payload,
				       size_t len, int64_t deadline, const char *peer, struct dt_err *err) DT_MUST_CHECK;
/* Checks a frame `d` completed on an authenticated link (d->trailer set)
 * with `sec`, decrypting it in place: DT_PROTOCOL naming the peer if it is
 * not authentic. */
enum dt_status dt_frame_open_fd(struct dt_frame_decoder *d, struct dt_wire_sec *sec, const char *peer,
				struct dt_err *err) DT_MUST_CHECK;

/* Reads exactly one frame into `d` (a fresh or just-`next`ed decoder); on
 * DT_OK d->header and dt_frame_decoder_payload(d) hold it; call
 * dt_frame_decoder_next before reusing d. A bad frame is DT_PROTOCOL naming
 * the peer and the decoder's detail; EOF is DT_PEER. */
enum dt_status dt_frame_recv_fd(int fd, struct dt_frame_decoder *d, int64_t deadline, const char *peer,
				struct dt_err *err) DT_MUST_CHECK;
/* One nonblocking round of dt_frame_recv_fd, for a caller that watches many
 * descriptors (a ring judging its pending connections): reads what is there,
 * never past the frame's end. DT_OK with *ready 1 once the frame is
 * complete, *ready 0 when the socket has nothing more for now; the errors
 * are dt_frame_recv_fd's but DT_TIMEOUT (deadlines are the caller's). */
enum dt_status dt_frame_recv_fd_some(int fd, struct dt_frame_decoder *d, const char *peer, int *ready,
				     struct dt_err *err) DT_MUST_CHECK;

#endif
