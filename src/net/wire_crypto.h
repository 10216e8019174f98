/*
 * wire_crypto.h — the bulk cryptography of authenticated frames, fed a piece
 * at a time: Poly1305 (RFC 8439 §2.5) for --wire_security=auth and
 * ChaCha20-Poly1305 (RFC 8439 §2.8, the IETF 96-bit-nonce AEAD) for
 * --wire_security=encrypt, both from OpenSSL's libcrypto (EVP_MAC "POLY1305",
 * EVP_CIPHER "ChaCha20-Poly1305"). They are the same algorithms libsodium's
 * crypto_onetimeauth_poly1305 and crypto_aead_chacha20poly1305_ietf compute,
 * bit for bit (tests/unit/test_net_wire_crypto.c checks both against RFC 8439's
 * vectors and against libsodium), so the wire is unchanged; OpenSSL's run
 * 3–5 times faster on CPUs with AVX-512 (docs/DEPENDENCIES.md, measured).
 *
 * Why pieces: a connection tags or checks a frame while it is being sent or
 * received (net/conn_send.c, conn_recv.c), so the MAC of each piece runs while
 * the piece is still in the cache and while the kernel and the peer work on
 * the previous one, instead of a pass over the whole frame before the first
 * byte leaves and another after the last arrives.
 *
 * Use: begin (a MAC key, or an AEAD key, nonce and associated data), update
 * over the payload in order, then final (a tag to send) or check (a tag
 * received; constant time). A kernel is reused frame after frame (its OpenSSL
 * contexts are made once) and owned by whoever holds it: a connection keeps
 * one per direction, the one-shot calls of net/auth.h one per thread.
 * Bytes an AEAD open has decrypted must not be used until check returns 0.
 *
 * OpenSSL fails these calls only when it cannot allocate memory or is
 * misused; both are treated as bugs (DT_ASSERT), as dt_xmalloc treats an
 * exhausted heap.
 */
#ifndef DT_NET_WIRE_CRYPTO_H
#define DT_NET_WIRE_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

#define DT_WIRE_KEY_BYTES 32
#define DT_WIRE_NONCE_BYTES 12
#define DT_WIRE_TAG_BYTES 16

enum dt_wire_kernel_kind { DT_WK_IDLE = 0, DT_WK_MAC, DT_WK_SEAL, DT_WK_OPEN };

struct dt_wire_kernel {
	enum dt_wire_kernel_kind kind; /* what the frame in progress does */
	void *mac;                     /* EVP_MAC_CTX, made on first use */
	void *aead;                    /* EVP_CIPHER_CTX, made on first use */
};

/* Frees the contexts; the kernel may be begun again afterwards. */
void dt_wire_kernel_release(struct dt_wire_kernel *k);

/* Poly1305 with a one-time key (never reuse a key for two messages). */
void dt_wire_mac_begin(struct dt_wire_kernel *k, const uint8_t key[DT_WIRE_KEY_BYTES]);
/* ChaCha20-Poly1305: seal (1) encrypts, seal 0 decrypts; aad is
 * authenticated, not encrypted (may be NULL when aad_len is 0). */
void dt_wire_aead_begin(struct dt_wire_kernel *k, int seal, const uint8_t key[DT_WIRE_KEY_BYTES],
			const uint8_t nonce[DT_WIRE_NONCE_BYTES], const uint8_t *aad, size_t aad_len);
/* The next len bytes of the message. MAC: src is read, dst ignored (may be
 * NULL). AEAD: src is encrypted or decrypted into dst (dst == src allowed,
 * no other overlap). */
void dt_wire_kernel_update(struct dt_wire_kernel *k, const uint8_t *src, uint8_t *dst, size_t len);
/* MAC or seal: the tag. The kernel is idle afterwards. */
void dt_wire_kernel_final(struct dt_wire_kernel *k, uint8_t tag[DT_WIRE_TAG_BYTES]);
/* MAC or open: 0 if tag is right (compared in constant time), -1 if not. The
 * kernel is idle afterwards. */
int dt_wire_kernel_check(struct dt_wire_kernel *k, const uint8_t tag[DT_WIRE_TAG_BYTES]);

/* The calling thread's own kernel (released when the thread exits), for
 * frames processed whole within one call. */
struct dt_wire_kernel *dt_wire_kernel_local(void);

#endif
