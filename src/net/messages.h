/*
 * messages.h — the message catalogue and the payloads of the connection-control messages.
 *
 * Every frame carries a 16-bit message type (frame.h). The numbers are part of
 * the wire protocol: they are listed once below (DT_MSG_LIST), pinned with
 * _Static_assert, and never reused. A number not in the list is an unknown
 * type, and a frame of unknown type closes the connection.
 *
 * Numbering plan (docs/PROTOCOL.md, "Message catalogue"):
 *
 *     0          never valid (a zeroed header is not a message)
 *     1 ..  15   connection control: handshake, heartbeat, error, shutdown, echo (here)
 *    16 ..  63   parameter server: INIT, PULL, PUSH, ... (added by src/distribute/)
 *    64 ..  95   collectives: ring all-reduce segments, broadcast, barrier
 *    96 .. 127   coordination between the chief and the other tasks
 *   128 .. 65535 unassigned
 *
 * Each entry also gives the largest payload that type may carry; the frame
 * decoder rejects a larger length before it allocates anything, so a peer that
 * has not finished its handshake can never make us allocate more than a HELLO's
 * cap. DT_MSG_CAP_CONN means "bounded only by the connection's cap".
 *
 * The payload layouts of the control messages are in docs/PROTOCOL.md, byte by
 * byte; their encoders and decoders are below. Decoders treat the payload as
 * hostile: every length is checked against the bytes that are there before it
 * is used, and every failure is an error message, never a crash.
 */
#ifndef DT_NET_MESSAGES_H
#define DT_NET_MESSAGES_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct dt_auth;

#define DT_MSG_CAP_HANDSHAKE (16u << 20) /* a model signature of ~100k variables */
#define DT_MSG_CAP_SMALL 65536u
#define DT_MSG_CAP_CONN UINT64_MAX
#define DT_AUTH_MSG_MAX 128u /* the authentication messages (net/auth.h) are fixed and small */

/* X(NAME, wire number, "name", max payload bytes) */
#define DT_MSG_LIST(X)                                                  \
	X(HELLO,      1, "hello",     DT_MSG_CAP_HANDSHAKE)             \
	X(HELLO_OK,   2, "hello_ok",  DT_MSG_CAP_HANDSHAKE)             \
	X(REFUSE,     3, "refuse",    DT_MSG_CAP_SMALL)                 \
	X(HEARTBEAT,  4, "heartbeat", 0)                                \
	X(ERROR,      5, "error",     DT_MSG_CAP_SMALL)                 \
	X(SHUTDOWN,   6, "shutdown",  DT_MSG_CAP_SMALL)                 \
	X(ECHO,       7, "echo",      DT_MSG_CAP_CONN)                  \
	X(AUTH_HELLO,     8, "auth_hello",     DT_AUTH_MSG_MAX)         \
	X(AUTH_CHALLENGE, 9, "auth_challenge", DT_AUTH_MSG_MAX)         \
	X(AUTH_PROOF,    10, "auth_proof",     DT_AUTH_MSG_MAX)         \
	X(PS_STATUS, 16, "ps_status", DT_MSG_CAP_SMALL)                 \
	X(PS_INIT,   17, "ps_init",   DT_MSG_CAP_CONN)                  \
	X(PS_PULL,   18, "ps_pull",   DT_MSG_CAP_CONN)                  \
	X(PS_PUSH,   19, "ps_push",   DT_MSG_CAP_CONN)                  \
	X(PS_STEP,   20, "ps_step",   DT_MSG_CAP_SMALL)                 \
	X(PS_END,    21, "ps_end",    DT_MSG_CAP_SMALL)                 \
	X(PS_SYNC_CONFIG, 22, "ps_sync_config", DT_MSG_CAP_SMALL)       \
	X(PS_SYNC_PUSH,   23, "ps_sync_push",   DT_MSG_CAP_CONN)        \
	X(PS_SYNC_PULL,   24, "ps_sync_pull",   DT_MSG_CAP_CONN)        \
	X(PS_REPLICA_SETUP, 25, "ps_replica_setup", DT_MSG_CAP_SMALL)   \
	X(PS_REPLICA_STEP,  26, "ps_replica_step",  DT_MSG_CAP_CONN)    \
	X(PS_PUSH_ROWS,     27, "ps_push_rows",     DT_MSG_CAP_CONN)    \
	X(PS_PULL_ROWS,     28, "ps_pull_rows",     DT_MSG_CAP_CONN)    \
	X(PS_POSITIONS,   44, "ps_positions",   DT_MSG_CAP_CONN)        \
	X(PS_SET_STEP,    45, "ps_set_step",    DT_MSG_CAP_SMALL)       \
	X(PS_RESTORE,     46, "ps_restore",     DT_MSG_CAP_CONN)        \
	X(PS_SNAPSHOT,    47, "ps_snapshot",    DT_MSG_CAP_CONN)        \
	X(COLL_START, 64, "coll_start", DT_MSG_CAP_SMALL)               \
	X(COLL_DATA,  65, "coll_data",  DT_MSG_CAP_CONN)                \
	X(COLL_ABORT, 66, "coll_abort", DT_MSG_CAP_SMALL)               \
	X(COLL_STALL, 67, "coll_stall", DT_MSG_CAP_SMALL)               \
	X(COLL_REF,   68, "coll_ref",   DT_MSG_CAP_SMALL)               \
	X(COLL_DONE,  69, "coll_done",  DT_MSG_CAP_SMALL)               \
	X(COLL_PEER,  70, "coll_peer",  DT_MSG_CAP_SMALL)               \
	X(COLL_PEER_OK, 71, "coll_peer_ok", DT_MSG_CAP_SMALL)          \
	X(COLL_SHM,   72, "coll_shm",   DT_MSG_CAP_SMALL)               \
	X(MEMBER_REPORT, 73, "member_report", DT_MSG_CAP_SMALL)         \
	X(MEMBER_VIEW,   74, "member_view",   DT_MSG_CAP_SMALL)

enum dt_msg_type {
#define DT__MSG_ENUM(name, num, str, cap) DT_MSG_##name = num,
	DT_MSG_LIST(DT__MSG_ENUM)
#undef DT__MSG_ENUM
};

/* The wire numbers are the protocol: changing one breaks every deployed peer. */
_Static_assert(DT_MSG_HELLO == 1, "HELLO is wire type 1");
_Static_assert(DT_MSG_HELLO_OK == 2, "HELLO_OK is wire type 2");
_Static_assert(DT_MSG_REFUSE == 3, "REFUSE is wire type 3");
_Static_assert(DT_MSG_HEARTBEAT == 4, "HEARTBEAT is wire type 4");
_Static_assert(DT_MSG_ERROR == 5, "ERROR is wire type 5");
_Static_assert(DT_MSG_SHUTDOWN == 6, "SHUTDOWN is wire type 6");
_Static_assert(DT_MSG_ECHO == 7, "ECHO is wire type 7");
/* The cluster-secret handshake (net/auth.h) that precedes HELLO when a secret is set. */
_Static_assert(DT_MSG_AUTH_HELLO == 8, "AUTH_HELLO is wire type 8");
_Static_assert(DT_MSG_AUTH_CHALLENGE == 9, "AUTH_CHALLENGE is wire type 9");
_Static_assert(DT_MSG_AUTH_PROOF == 10, "AUTH_PROOF is wire type 10");
/* Parameter-server messages (src/distribute/ps_wire.h has their payloads). */
_Static_assert(DT_MSG_PS_STATUS == 16, "PS_STATUS is wire type 16");
_Static_assert(DT_MSG_PS_INIT == 17, "PS_INIT is wire type 17");
_Static_assert(DT_MSG_PS_PULL == 18, "PS_PULL is wire type 18");
_Static_assert(DT_MSG_PS_PUSH == 19, "PS_PUSH is wire type 19");
_Static_assert(DT_MSG_PS_STEP == 20, "PS_STEP is wire type 20");
_Static_assert(DT_MSG_PS_END == 21, "PS_END is wire type 21");
_Static_assert(DT_MSG_PS_SYNC_CONFIG == 22, "PS_SYNC_CONFIG is wire type 22");
_Static_assert(DT_MSG_PS_SYNC_PUSH == 23, "PS_SYNC_PUSH is wire type 23");
_Static_assert(DT_MSG_PS_SYNC_PULL == 24, "PS_SYNC_PULL is wire type 24");
_Static_assert(DT_MSG_PS_REPLICA_SETUP == 25, "PS_REPLICA_SETUP is wire type 25");
_Static_assert(DT_MSG_PS_REPLICA_STEP == 26, "PS_REPLICA_STEP is wire type 26");
_Static_assert(DT_MSG_PS_PUSH_ROWS == 27, "PS_PUSH_ROWS is wire type 27");
_Static_assert(DT_MSG_PS_PULL_ROWS == 28, "PS_PULL_ROWS is wire type 28");
/* Checkpoints and recovery (src/distribute/ps_snapshot.h), numbered down from the top of the range. */
_Static_assert(DT_MSG_PS_POSITIONS == 44, "PS_POSITIONS is wire type 44");
_Static_assert(DT_MSG_PS_SET_STEP == 45, "PS_SET_STEP is wire type 45");
_Static_assert(DT_MSG_PS_RESTORE == 46, "PS_RESTORE is wire type 46");
_Static_assert(DT_MSG_PS_SNAPSHOT == 47, "PS_SNAPSHOT is wire type 47");
/* Collectives (src/distribute/ring_wire.h has their payloads). */
_Static_assert(DT_MSG_COLL_START == 64, "COLL_START is wire type 64");
_Static_assert(DT_MSG_COLL_DATA == 65, "COLL_DATA is wire type 65");
_Static_assert(DT_MSG_COLL_ABORT == 66, "COLL_ABORT is wire type 66");
_Static_assert(DT_MSG_COLL_STALL == 67, "COLL_STALL is wire type 67");
_Static_assert(DT_MSG_COLL_REF == 68, "COLL_REF is wire type 68");
_Static_assert(DT_MSG_COLL_DONE == 69, "COLL_DONE is wire type 69");
_Static_assert(DT_MSG_COLL_PEER == 70, "COLL_PEER is wire type 70");
_Static_assert(DT_MSG_COLL_PEER_OK == 71, "COLL_PEER_OK is wire type 71");
_Static_assert(DT_MSG_COLL_SHM == 72, "COLL_SHM is wire type 72");
_Static_assert(DT_MSG_MEMBER_REPORT == 73, "MEMBER_REPORT is wire type 73");
_Static_assert(DT_MSG_MEMBER_VIEW == 74, "MEMBER_VIEW is wire type 74");

/* Ranges reserved for the layers above; numbers are assigned in this header. */
#define DT_MSG_CONTROL_FIRST 1
#define DT_MSG_CONTROL_LAST 15
#define DT_MSG_PS_FIRST 16
#define DT_MSG_PS_LAST 63
#define DT_MSG_COLLECTIVE_FIRST 64
#define DT_MSG_COLLECTIVE_LAST 95
#define DT_MSG_COORD_FIRST 96
#define DT_MSG_COORD_LAST 127
_Static_assert(DT_MSG_ECHO <= DT_MSG_CONTROL_LAST, "control messages stay in 1..15");
_Static_assert(DT_MSG_PS_STATUS >= DT_MSG_PS_FIRST && DT_MSG_PS_REPLICA_STEP <= DT_MSG_PS_LAST &&
	       DT_MSG_PS_SNAPSHOT <= DT_MSG_PS_LAST, "ps messages stay in 16..63");
_Static_assert(DT_MSG_COLL_START >= DT_MSG_COLLECTIVE_FIRST && DT_MSG_MEMBER_VIEW <= DT_MSG_COLLECTIVE_LAST,
	       "collective messages stay in 64..95");

struct dt_msg_info {
	uint16_t type;
	const char *name;     /* "hello" */
	uint64_t max_payload; /* DT_MSG_CAP_CONN: the connection's cap */
};

/* The catalogue entry of `type`, or NULL for an unknown type. */
const struct dt_msg_info *dt_msg_info(uint16_t type);
/* "hello", or "unknown" for a number not in the catalogue. */
const char *dt_msg_name(uint16_t type);

/* ---- the model signature carried by HELLO ---- */

/* Element types on the wire; pinned like the message numbers. distribute/ maps its
 * tensor dtypes onto these. */
enum dt_wire_dtype {
	DT_WIRE_F32 = 1,
	DT_WIRE_F64 = 2,
	DT_WIRE_F16 = 3,
	DT_WIRE_BF16 = 4,
	DT_WIRE_I8 = 5,
	DT_WIRE_I32 = 6,
	DT_WIRE_I64 = 7,
	DT_WIRE_U8 = 8,
};
#define DT_WIRE_DTYPE_MAX 8
/* "float32", "bfloat16", ...; "dtype <n>" style names are not produced: unknown gives "unknown". */
const char *dt_wire_dtype_name(unsigned dtype);

#define DT_SIG_MAX_RANK 8
/* Variable names are the model's (Keras's, up to 255 bytes of layer name
 * and the weight's): UTF-8 without control characters, 1..DT_SIG_NAME_MAX
 * bytes. Version 1 peers took printable ASCII of up to 256 bytes; every
 * name they sent is still accepted. */
#define DT_SIG_NAME_MAX 512

struct dt_sig_var {
	char *name;     /* owned; UTF-8 without control characters, 1..DT_SIG_NAME_MAX bytes */
	uint8_t dtype;  /* enum dt_wire_dtype */
	uint8_t rank;   /* 0..DT_SIG_MAX_RANK */
	uint64_t dims[DT_SIG_MAX_RANK];
};

/* The model as the wire sees it: an ordered list of (name, dtype, shape). Two
 * tasks train the same model exactly when their signatures are equal. */
struct dt_signature {
	uint32_t count;
	struct dt_sig_var *vars; /* owned array of count entries */
	uint32_t cap_;           /* private: allocated entries */
};

void dt_signature_init(struct dt_signature *sig);
void dt_signature_release(struct dt_signature *sig);
/* Appends a variable (name copied); DT_CONFIG if the name or rank is out of bounds. */
enum dt_status dt_signature_add(struct dt_signature *sig, const char *name, enum dt_wire_dtype dtype,
				unsigned rank, const uint64_t *dims, struct dt_err *err) DT_MUST_CHECK;
/* Deep copy into an initialized `dst` (its old contents are released). */
void dt_signature_copy(struct dt_signature *dst, const struct dt_signature *src);
/* Writes "(784, 256)" (or "()" for a scalar) into buf. */
void dt_sig_shape_str(const struct dt_sig_var *v, char *buf, size_t cap);

/* ---- HELLO and HELLO_OK ---- */

#define DT_ROLE_MAX 31

/* Who a task is and what it trains; sent by the connecting side in HELLO and
 * answered by the accepting side with its own in HELLO_OK. */
struct dt_hello {
	uint16_t protocol_version;    /* DT_PROTOCOL_VERSION unless a test says otherwise */
	uint32_t features;            /* what the sender serves beyond version 1's messages:
					 * distribute/ps_wire.h's DT_PS_FEATURE_*; 0 elsewhere */
	uint64_t cluster_fingerprint; /* computed by the caller from the cluster spec */
	uint64_t incarnation;         /* dt_net_incarnation(): random per process start */
	char role[DT_ROLE_MAX + 1];   /* "ps", "worker", "chief", "evaluator", ... */
	uint32_t index;               /* task index within the role */
	struct dt_signature signature;
	/* Not on the wire: this task's cluster secret and wire security
	 * (net/auth.h), borrowed, outliving every connection made with this
	 * hello; NULL: no secret, frames go as in protocol version 1 without it.
	 * Decoded hellos have NULL. */
	const struct dt_auth *auth;
};

/* dt_hello_init (handshake.h) fills one for this process; this releases it. */
void dt_hello_release(struct dt_hello *h);

/* Encodes into buf; returns the payload size. If that is larger than cap the
 * buffer holds nothing useful: call again with a buffer that large. */
size_t dt_hello_encode(const struct dt_hello *h, uint8_t *buf, size_t cap);
/* The same into a new buffer (caller frees); *len gets its size. */
uint8_t *dt_hello_encode_alloc(const struct dt_hello *h, size_t *len);
/* Decodes a HELLO/HELLO_OK payload into an uninitialized `out` (release it
 * afterwards even on failure). DT_PROTOCOL with what was wrong and where. */
enum dt_status dt_hello_decode(struct dt_hello *out, const uint8_t *p, size_t len, struct dt_err *err) DT_MUST_CHECK;

/* ---- REFUSE, ERROR, SHUTDOWN ---- */

/* Why a handshake was refused; pinned. */
enum dt_refuse_code {
	DT_REFUSE_VERSION = 1,     /* protocol versions differ */
	DT_REFUSE_FINGERPRINT = 2, /* different cluster spec */
	DT_REFUSE_SIGNATURE = 3,   /* different model */
	DT_REFUSE_IDENTITY = 4,    /* role/index not accepted here (unexpected role, duplicate task) */
	DT_REFUSE_BUSY = 5,        /* too many connections, shutting down */
	DT_REFUSE_AUTH = 6,        /* no or another cluster secret, or one side has none (net/auth.h) */
};
const char *dt_refuse_code_name(uint32_t code);

/* Error codes carried by ERROR frames; pinned, mapped onto dt_status on receipt. */
enum dt_wire_error {
	DT_WIRE_ERR_PROTOCOL = 1,
	DT_WIRE_ERR_CONFIG = 2,
	DT_WIRE_ERR_UNAVAILABLE = 3,
	DT_WIRE_ERR_TIMEOUT = 4,
	DT_WIRE_ERR_INTERNAL = 5,
	DT_WIRE_ERR_RUNTIME = 6,
	DT_WIRE_ERR_DATA = 7,
};
uint32_t dt_wire_error_from_status(enum dt_status st);
enum dt_status dt_wire_error_to_status(uint32_t code);

#define DT_REASON_MAX 1024

/* REFUSE, ERROR and SHUTDOWN share one layout: a code and a reason text. */
struct dt_reason_msg {
	uint32_t code;                /* enum dt_refuse_code, enum dt_wire_error, or 0 for SHUTDOWN */
	char text[DT_REASON_MAX];     /* NUL-terminated; control characters but newline replaced by '?' on decode */
};

/* Encodes code + text (truncated to DT_REASON_MAX - 1 bytes); returns the size. */
size_t dt_reason_encode(uint32_t code, const char *text, uint8_t *buf, size_t cap);
enum dt_status dt_reason_decode(struct dt_reason_msg *out, const uint8_t *p, size_t len, struct dt_err *err) DT_MUST_CHECK;
/* Largest encoded reason payload. */
#define DT_REASON_PAYLOAD_MAX (4 + 2 + DT_REASON_MAX)

#endif
