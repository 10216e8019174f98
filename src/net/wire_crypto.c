/* Poly1305 and ChaCha20-Poly1305 in pieces, from OpenSSL; see wire_crypto.h. */
#include "net/wire_crypto.h"

#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>

#include "base/alloc.h"

/* Fetched once per process: a fetch searches the provider store, too slow
 * for every frame. Never freed (OpenSSL's exit handler owns the store). */
static EVP_MAC *poly1305;
static EVP_CIPHER *chacha_poly;
static pthread_once_t fetch_once = PTHREAD_ONCE_INIT;
static pthread_key_t local_key;

static void local_free(void *p)
{
	dt_wire_kernel_release(p);
	OPENSSL_free(p);
}

static void fetch(void)
{
	poly1305 = EVP_MAC_fetch(NULL, "POLY1305", NULL);
	chacha_poly = EVP_CIPHER_fetch(NULL, "ChaCha20-Poly1305", NULL);
	DT_ASSERT(poly1305 && chacha_poly);
	DT_ASSERT(pthread_key_create(&local_key, local_free) == 0);
}

void dt_wire_kernel_release(struct dt_wire_kernel *k)
{
	EVP_MAC_CTX_free(k->mac);
	EVP_CIPHER_CTX_free(k->aead);
	memset(k, 0, sizeof(*k));
}

struct dt_wire_kernel *dt_wire_kernel_local(void)
{
	pthread_once(&fetch_once, fetch);
	struct dt_wire_kernel *k = pthread_getspecific(local_key);
	if (!k) {
		k = OPENSSL_zalloc(sizeof(*k));
		DT_ASSERT(k && pthread_setspecific(local_key, k) == 0);
	}
	return k;
}

void dt_wire_mac_begin(struct dt_wire_kernel *k, const uint8_t key[DT_WIRE_KEY_BYTES])
{
	pthread_once(&fetch_once, fetch);
	if (!k->mac)
		k->mac = EVP_MAC_CTX_new(poly1305);
	DT_ASSERT(k->mac && EVP_MAC_init(k->mac, key, DT_WIRE_KEY_BYTES, NULL) == 1);
	k->kind = DT_WK_MAC;
}

void dt_wire_aead_begin(struct dt_wire_kernel *k, int seal, const uint8_t key[DT_WIRE_KEY_BYTES],
			const uint8_t nonce[DT_WIRE_NONCE_BYTES], const uint8_t *aad, size_t aad_len)
{
	pthread_once(&fetch_once, fetch);
	if (!k->aead)
		k->aead = EVP_CIPHER_CTX_new();
	DT_ASSERT(k->aead && aad_len <= INT_MAX);
	/* ChaCha20-Poly1305's nonce is 12 bytes by default (RFC 8439). */
	DT_ASSERT(EVP_CipherInit_ex2(k->aead, chacha_poly, key, nonce, seal ? 1 : 0, NULL) == 1);
	int outl = 0;
	if (aad_len)
		DT_ASSERT(EVP_CipherUpdate(k->aead, NULL, &outl, aad, (int)aad_len) == 1);
	k->kind = seal ? DT_WK_SEAL : DT_WK_OPEN;
}

void dt_wire_kernel_update(struct dt_wire_kernel *k, const uint8_t *src, uint8_t *dst, size_t len)
{
	DT_ASSERT(k->kind != DT_WK_IDLE);
	if (k->kind == DT_WK_MAC) {
		if (len)
			DT_ASSERT(EVP_MAC_update(k->mac, src, len) == 1);
		return;
	}
	/* EVP's lengths are ints: pieces of at most 1 GB. ChaCha20 is a stream
	 * cipher, so every byte in comes out at once (OpenSSL keeps the partial
	 * keystream block between calls). */
	while (len > 0) {
		int n = len > (1u << 30) ? (1 << 30) : (int)len, outl = 0;
		DT_ASSERT(EVP_CipherUpdate(k->aead, dst, &outl, src, n) == 1 && outl == n);
		src += n;
		dst += n;
		len -= (size_t)n;
	}
}

void dt_wire_kernel_final(struct dt_wire_kernel *k, uint8_t tag[DT_WIRE_TAG_BYTES])
{
	if (k->kind == DT_WK_MAC) {
		size_t outl = 0;
		DT_ASSERT(EVP_MAC_final(k->mac, tag, &outl, DT_WIRE_TAG_BYTES) == 1 && outl == DT_WIRE_TAG_BYTES);
	} else {
		DT_ASSERT(k->kind == DT_WK_SEAL);
		uint8_t none[16];
		int outl = 0;
		DT_ASSERT(EVP_CipherFinal_ex(k->aead, none, &outl) == 1 && outl == 0);
		DT_ASSERT(EVP_CIPHER_CTX_ctrl(k->aead, EVP_CTRL_AEAD_GET_TAG, DT_WIRE_TAG_BYTES, tag) == 1);
	}
	k->kind = DT_WK_IDLE;
}

int dt_wire_kernel_check(struct dt_wire_kernel *k, const uint8_t tag[DT_WIRE_TAG_BYTES])
{
	int ok;
	if (k->kind == DT_WK_MAC) {
		uint8_t want[DT_WIRE_TAG_BYTES];
		dt_wire_kernel_final(k, want);
		ok = CRYPTO_memcmp(want, tag, DT_WIRE_TAG_BYTES) == 0;
		OPENSSL_cleanse(want, sizeof(want));
	} else {
		DT_ASSERT(k->kind == DT_WK_OPEN);
		uint8_t none[16], t[DT_WIRE_TAG_BYTES];
		memcpy(t, tag, sizeof(t)); /* the ctrl call takes a non-const pointer */
		int outl = 0;
		DT_ASSERT(EVP_CIPHER_CTX_ctrl(k->aead, EVP_CTRL_AEAD_SET_TAG, DT_WIRE_TAG_BYTES, t) == 1);
		/* OpenSSL compares the tags in constant time (CRYPTO_memcmp). */
		ok = EVP_CipherFinal_ex(k->aead, none, &outl) == 1;
		k->kind = DT_WK_IDLE;
	}
	return ok ? 0 : -1;
}
