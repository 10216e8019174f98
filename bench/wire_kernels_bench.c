/*
 * wire_kernels_bench — the per-frame cryptography alone, one thread: what
 * bench/wire_security's figures are made of (docs/BENCHMARKS.md, "Wire
 * security"). For Poly1305 and ChaCha20-Poly1305, libsodium's functions (the
 * reference the wire was written with) beside dtrain's kernels
 * (net/wire_crypto.h, OpenSSL's libcrypto), over 16 MB whole and in the
 * 256 KiB pieces a connection feeds them, with memcpy of the same bytes for
 * scale. Rates are bytes per second of this thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID: on a shared host, time the thread waited for a
 * CPU does not count), medians of 9 runs; prints one JSON object per line:
 * {"what": "poly1305", "impl": "openssl", "piece": 262144, "gb_per_s": ...}.
 *
 *   build/bench-wire-kernels
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/wire_crypto.h"

#define BYTES (16u << 20)
#define PIECE (256u << 10)
#define RUNS 9

enum what { MEMCPY, POLY_SODIUM, POLY_OPENSSL, AEAD_SODIUM, AEAD_OPENSSL };

static void once(enum what w, size_t piece, uint8_t *src, uint8_t *dst, struct dt_wire_kernel *k)
{
	static const uint8_t key[32] = { 7 }, nonce[12] = { 1 };
	uint8_t tag[16];
	switch (w) {
	case MEMCPY:
		memcpy(dst, src, BYTES);
		break;
	case POLY_SODIUM: {
		crypto_onetimeauth_poly1305_state st;
		crypto_onetimeauth_poly1305_init(&st, key);
		for (size_t off = 0; off < BYTES; off += piece)
			crypto_onetimeauth_poly1305_update(&st, src + off, piece);
		crypto_onetimeauth_poly1305_final(&st, tag);
		break;
	}
	case POLY_OPENSSL:
		dt_wire_mac_begin(k, key);
		for (size_t off = 0; off < BYTES; off += piece)
			dt_wire_kernel_update(k, src + off, NULL, piece);
		dt_wire_kernel_final(k, tag);
		break;
	case AEAD_SODIUM: /* libsodium has no streaming ChaCha20-Poly1305-IETF: whole only */
		crypto_aead_chacha20poly1305_ietf_encrypt_detached(dst, tag, NULL, src, BYTES, NULL, 0, NULL, nonce, key);
		break;
	case AEAD_OPENSSL:
		dt_wire_aead_begin(k, 1, key, nonce, NULL, 0);
		for (size_t off = 0; off < BYTES; off += piece)
			dt_wire_kernel_update(k, src + off, dst + off, piece);
		dt_wire_kernel_final(k, tag);
		break;
	}
}

static int64_t cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(void)
{
	if (sodium_init() < 0)
		return 1;
	uint8_t *src = malloc(BYTES), *dst = malloc(BYTES);
	if (!src || !dst)
		return 1;
	randombytes_buf(src, BYTES);
	memset(dst, 0, BYTES);
	struct dt_wire_kernel k = { 0 };
	static const struct {
		enum what w;
		const char *what, *impl;
	} rows[] = { { MEMCPY, "memcpy", "libc" },
		     { POLY_SODIUM, "poly1305", "libsodium" },
		     { POLY_OPENSSL, "poly1305", "openssl" },
		     { AEAD_SODIUM, "chacha20-poly1305", "libsodium" },
		     { AEAD_OPENSSL, "chacha20-poly1305", "openssl" } };
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		for (int p = 0; p < 2; p++) {
			size_t piece = p ? PIECE : BYTES;
			if (p && (rows[r].w == MEMCPY || rows[r].w == AEAD_SODIUM))
				continue;
			double rate[RUNS];
			once(rows[r].w, piece, src, dst, &k); /* warm */
			for (int i = 0; i < RUNS; i++) {
				int64_t t0 = cpu_ns();
				once(rows[r].w, piece, src, dst, &k);
				rate[i] = (double)BYTES / (double)(cpu_ns() - t0);
			}
			qsort(rate, RUNS, sizeof(rate[0]), cmp);
			printf("{\"what\": \"%s\", \"impl\": \"%s\", \"piece\": %zu, \"gb_per_s\": %.2f}\n", rows[r].what,
			       rows[r].impl, piece, rate[RUNS / 2]);
		}
	}
	dt_wire_kernel_release(&k);
	free(src);
	free(dst);
	return 0;
}
