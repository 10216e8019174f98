/*
 * auth.h — cluster membership by a shared secret, and the per-frame
 * protection that follows (docs/SECURITY.md, docs/PROTOCOL.md §4.2).
 *
 * A cluster secret is 32 random bytes in a file only its owner may read.
 * When a task has one, every connection starts with a mutual
 * challenge–response before HELLO (client = the connecting side):
 *
 *     client                                          server
 *     AUTH_HELLO(mode, nonce_c, role_c:index_c)  ──▶
 *                                                ◀──  AUTH_CHALLENGE(mode, nonce_s, role_s:index_s, mac_s)
 *     checks mac_s, then
 *     AUTH_PROOF(mac_c), HELLO (tagged)          ──▶  checks mac_c, then the HELLO as before
 *                                                ◀──  HELLO_OK or REFUSE (tagged)
 *
 * Both MACs are HMAC-SHA-256 keyed with the secret over one transcript T:
 *
 *     T = "dtrain-auth-v1" | u8 mode | u64 cluster fingerprint | nonce_c[32] | nonce_s[32]
 *         | u32 index_c | u8 len | role_c | u32 index_s | u8 len | role_s
 *     mac_s = HMAC(secret, "server" | T)      mac_c = HMAC(secret, "client" | T)
 *
 * (integers little-endian), compared in constant time (sodium_memcmp). Each
 * side's nonce is fresh from randombytes, so a recorded exchange proves
 * nothing on a new connection, and the roles and indexes in T bind a proof to
 * the two tasks it was made for. The session's keys come from T too:
 *
 *     master = HMAC(secret, "session" | T)
 *     key c→s = crypto_kdf(master, id 1, "dtrwire_"), key s→c = crypto_kdf(master, id 2, "dtrwire_")
 *
 * After AUTH_PROOF every frame in each direction — HELLO, HELLO_OK and
 * REFUSE included — is followed by a 16-byte tag that the header's length
 * does not count (docs/PROTOCOL.md §4.2). Frame n (counting from 0 per
 * direction) is protected by:
 *
 *   auth:     tag = Poly1305(k_n, header[32] | payload), k_n = crypto_kdf(key, id n, "dtrframe")
 *   encrypt:  ChaCha20-Poly1305-IETF: payload encrypted in place, header as the
 *             associated data, nonce = 4 zero bytes | u64 n, tag detached
 *
 * so a frame replayed, dropped, reordered or moved to the other direction
 * fails its check. Poly1305 runs at several GB/s, HMAC-SHA-256 at a few
 * hundred MB/s: the handshake uses HMAC, the hot path one-time Poly1305 keys.
 * libsodium does the handshake, the key derivation and the randomness;
 * OpenSSL's libcrypto the per-frame Poly1305 and ChaCha20-Poly1305
 * (net/wire_crypto.h: the same algorithms, 3-5x faster here); nothing here
 * is more than calling them.
 *
 * A frame's tag may be computed or checked whole (dt_wire_seal, dt_wire_open)
 * or in pieces while its payload is sent or received (dt_wire_seal_begin,
 * dt_wire_open_begin, then dt_wire_kernel_update per piece): the bytes and the
 * tag are the same either way. A frame checked in pieces is still used only
 * after its tag checks: the receiver keeps it where it landed until then.
 *
 * Ownership: a struct dt_auth is the caller's, loaded once per process and
 * borrowed by every hello (messages.h, dt_hello.auth); a struct dt_auth_hs
 * and a struct dt_wire_sec live inside the connection that uses them.
 */
#ifndef DT_NET_AUTH_H
#define DT_NET_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/err.h"
#include "net/frame.h"
#include "net/messages.h"
#include "net/wire_crypto.h"

#define DT_AUTH_SECRET_BYTES 32
#define DT_AUTH_NONCE_BYTES 32
#define DT_AUTH_MAC_BYTES 32
#define DT_AUTH_TAG_BYTES 16
#define DT_AUTH_VERSION 1
#define DT_AUTH_ENV "DTRAIN_CLUSTER_SECRET_FILE"

enum dt_wire_security {
	DT_WIRE_NONE = 0,    /* no secret: frames as in version 1 (loopback or --insecure only) */
	DT_WIRE_AUTH = 1,    /* every frame tagged (the default with a secret) */
	DT_WIRE_ENCRYPT = 2, /* every payload encrypted, every frame tagged */
};
/* "none", "auth", "encrypt"; parse returns -1 for anything else. */
const char *dt_wire_security_name(enum dt_wire_security m);
int dt_wire_security_parse(const char *s, enum dt_wire_security *out);

struct dt_auth {
	uint8_t secret[DT_AUTH_SECRET_BYTES];
	enum dt_wire_security mode; /* DT_WIRE_AUTH or DT_WIRE_ENCRYPT */
};

/* Reads a secret file: 64 hex digits (what `dtrain secret new` writes, one
 * line) or exactly 32 raw bytes. Refused, as ssh refuses a private key, when
 * the file is readable or writable by group or others (DT_CONFIG naming the
 * mode and `chmod 600`), not a regular file, or of any other length. */
enum dt_status dt_auth_load(struct dt_auth *a, const char *path, enum dt_wire_security mode,
			    struct dt_err *err) DT_MUST_CHECK;
/* A new secret as the file holds it: 64 hex digits of 32 bytes from
 * randombytes, a newline, a NUL (for the tools that hand one out in another
 * form: a Kubernetes Secret, a Slurm job's environment). */
#define DT_AUTH_SECRET_TEXT (2 * DT_AUTH_SECRET_BYTES + 2)
void dt_auth_secret_text(char out[DT_AUTH_SECRET_TEXT]);
/* Writes a new secret (dt_auth_secret_text) to a new file of mode 0600;
 * refuses to overwrite one. */
enum dt_status dt_auth_secret_new(const char *path, struct dt_err *err) DT_MUST_CHECK;

/* ---- the handshake (transport-free; conn_auth.c and comm_admit.c drive it) ---- */

/* Per-connection state of the exchange. Zero it, then call one of the *_start
 * / answer functions. */
struct dt_auth_hs {
	const struct dt_auth *auth;
	uint64_t fingerprint;
	uint8_t nonce_c[DT_AUTH_NONCE_BYTES], nonce_s[DT_AUTH_NONCE_BYTES];
	char role_c[DT_ROLE_MAX + 1], role_s[DT_ROLE_MAX + 1];
	uint32_t index_c, index_s;
};

/* Keys and counters of an authenticated connection; mode DT_WIRE_NONE: off. */
struct dt_wire_sec {
	enum dt_wire_security mode;
	uint8_t tx_key[32], rx_key[32];
	uint64_t tx_n, rx_n; /* the next frame's number in each direction */
};

/* Client: the AUTH_HELLO payload into out (DT_AUTH_MSG_MAX bytes); returns its length. */
size_t dt_auth_client_hello(struct dt_auth_hs *hs, const struct dt_hello *local, uint8_t *out);
/* Server: judges an AUTH_HELLO payload and writes the AUTH_CHALLENGE payload
 * into out (DT_AUTH_MSG_MAX bytes, *out_len). Returns 0, or a
 * DT_REFUSE_* code with the reason in why (malformed, another mode). */
uint32_t dt_auth_server_challenge(struct dt_auth_hs *hs, const struct dt_hello *local, const uint8_t *in,
				  size_t len, uint8_t *out, size_t *out_len, char *why, size_t cap);
/* Client: checks an AUTH_CHALLENGE payload (the server's MAC, and that it is
 * expect_role:expect_index when expect_role is not NULL), writes the
 * AUTH_PROOF payload (DT_AUTH_MAC_BYTES) into out and the session's keys
 * into sec. Returns 0 or DT_REFUSE_AUTH / DT_REFUSE_IDENTITY with why. */
uint32_t dt_auth_client_prove(struct dt_auth_hs *hs, const uint8_t *in, size_t len, const char *expect_role,
			      uint32_t expect_index, uint8_t *out, struct dt_wire_sec *sec, char *why, size_t cap);
/* Server: checks an AUTH_PROOF payload; on success the session's keys go into
 * sec. Returns 0 or DT_REFUSE_AUTH with why. */
uint32_t dt_auth_server_check(struct dt_auth_hs *hs, const uint8_t *in, size_t len, struct dt_wire_sec *sec,
			      char *why, size_t cap);

/* ---- frames (conn_send.c, conn_recv.c, the ring's handshake) ---- */

/* Tags the next outgoing frame: `hdr` its 32 header bytes, the payload the
 * concatenation of parts. In encrypt mode the parts are encrypted in place
 * (they must be writable: callers copy referenced payloads first). One pass
 * over the payload, no copy. */
void dt_wire_seal(struct dt_wire_sec *s, const uint8_t hdr[DT_FRAME_HEADER_SIZE], const struct iovec *parts,
		  int nparts, uint8_t tag[DT_AUTH_TAG_BYTES]);
/* dt_wire_seal for one contiguous payload that must stay as it is (the ring
 * sends straight from the caller's buffer): in encrypt mode the ciphertext
 * goes to dst (len bytes; dst == src is allowed), in auth mode dst is not
 * touched and may be NULL (the payload travels from src). */
void dt_wire_seal_to(struct dt_wire_sec *s, const uint8_t hdr[DT_FRAME_HEADER_SIZE], const uint8_t *src, size_t len,
		     uint8_t *dst, uint8_t tag[DT_AUTH_TAG_BYTES]);
/* Checks the next incoming frame (and decrypts its payload in place); 0 if
 * it is authentic, -1 if not (in encrypt mode the payload is then cleared:
 * a frame received in place leaves no forged bytes). A NULL payload
 * (the receiver dropped it) is checked as impossible: -1. */
int dt_wire_open(struct dt_wire_sec *s, const uint8_t hdr[DT_FRAME_HEADER_SIZE], uint8_t *payload, size_t len,
		 const uint8_t tag[DT_AUTH_TAG_BYTES]);

/* The same in pieces. Outgoing: take the frame's number when it is queued
 * (numbers follow the send order), begin when its payload is about to be
 * sent, dt_wire_kernel_update(k, src, dst, n) over the payload in order
 * (auth: src is read, dst unused; encrypt: src encrypted into dst, dst == src
 * allowed), dt_wire_kernel_final(k, tag). */
uint64_t dt_wire_take_tx(struct dt_wire_sec *s);
void dt_wire_seal_begin(const struct dt_wire_sec *s, uint64_t n, struct dt_wire_kernel *k,
			const uint8_t hdr[DT_FRAME_HEADER_SIZE]);
/* Incoming: begin takes the next frame's number; dt_wire_kernel_update(k, p,
 * p, n) over the payload as it arrives (encrypt: decrypted in place, not to
 * be used yet); dt_wire_open_end with the whole payload as dt_wire_open. */
void dt_wire_open_begin(struct dt_wire_sec *s, struct dt_wire_kernel *k, const uint8_t hdr[DT_FRAME_HEADER_SIZE]);
int dt_wire_open_end(struct dt_wire_kernel *k, uint8_t *payload, size_t len, const uint8_t tag[DT_AUTH_TAG_BYTES]);

#endif
