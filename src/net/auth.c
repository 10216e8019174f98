/* The cluster-secret handshake and per-frame protection; see auth.h. */
#include "net/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "net/bytes.h"

#define SECRET_HINT "make one with `dtrain secret new PATH` and give every task the same file"

static void need_sodium(void)
{
	/* Idempotent and thread-safe; fails only without an entropy source. */
	DT_ASSERT(sodium_init() >= 0);
}

const char *dt_wire_security_name(enum dt_wire_security m)
{
	switch (m) {
	case DT_WIRE_NONE: return "none";
	case DT_WIRE_AUTH: return "auth";
	case DT_WIRE_ENCRYPT: return "encrypt";
	}
	return "unknown";
}

int dt_wire_security_parse(const char *s, enum dt_wire_security *out)
{
	if (strcmp(s, "none") == 0)
		*out = DT_WIRE_NONE;
	else if (strcmp(s, "auth") == 0)
		*out = DT_WIRE_AUTH;
	else if (strcmp(s, "encrypt") == 0)
		*out = DT_WIRE_ENCRYPT;
	else
		return -1;
	return 0;
}

/* ---- the secret file ---- */

enum dt_status dt_auth_load(struct dt_auth *a, const char *path, enum dt_wire_security mode, struct dt_err *err)
{
	memset(a, 0, sizeof(*a));
	a->mode = mode == DT_WIRE_ENCRYPT ? DT_WIRE_ENCRYPT : DT_WIRE_AUTH;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return dt_err_set(err, DT_CONFIG, "cannot open the cluster secret '%s': %s (%s)", path, strerror(errno),
				  SECRET_HINT);
	struct stat sb;
	enum dt_status st = DT_OK;
	uint8_t buf[130];
	ssize_t n = 0;
	if (fstat(fd, &sb) != 0)
		st = dt_err_set(err, DT_CONFIG, "cannot stat the cluster secret '%s': %s", path, strerror(errno));
	else if (!S_ISREG(sb.st_mode))
		st = dt_err_set(err, DT_CONFIG, "the cluster secret '%s' is not a regular file", path);
	else if (sb.st_mode & 077)
		st = dt_err_set(err, DT_CONFIG,
				"the cluster secret '%s' has mode %04o: others than its owner may read it; run `chmod 600 %s`",
				path, (unsigned)(sb.st_mode & 07777), path);
	else if ((n = read(fd, buf, sizeof(buf))) < 0)
		st = dt_err_set(err, DT_CONFIG, "cannot read the cluster secret '%s': %s", path, strerror(errno));
	close(fd);
	if (st)
		return st;
	size_t len = (size_t)n;
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
		len--;
	if (len == 2 * DT_AUTH_SECRET_BYTES &&
	    sodium_hex2bin(a->secret, sizeof(a->secret), (const char *)buf, len, NULL, NULL, NULL) == 0) {
		sodium_memzero(buf, sizeof(buf));
		return DT_OK;
	}
	if ((size_t)n == DT_AUTH_SECRET_BYTES) {
		memcpy(a->secret, buf, DT_AUTH_SECRET_BYTES);
		sodium_memzero(buf, sizeof(buf));
		return DT_OK;
	}
	sodium_memzero(buf, sizeof(buf));
	return dt_err_set(err, DT_CONFIG, "the cluster secret '%s' is not 64 hex digits or 32 bytes (%zd bytes read; %s)",
			  path, n, SECRET_HINT);
}

void dt_auth_secret_text(char out[DT_AUTH_SECRET_TEXT])
{
	need_sodium();
	uint8_t key[DT_AUTH_SECRET_BYTES];
	randombytes_buf(key, sizeof(key));
	sodium_bin2hex(out, DT_AUTH_SECRET_TEXT, key, sizeof(key));
	sodium_memzero(key, sizeof(key));
	size_t len = strlen(out);
	out[len++] = '\n';
	out[len] = '\0';
}

enum dt_status dt_auth_secret_new(const char *path, struct dt_err *err)
{
	char hex[DT_AUTH_SECRET_TEXT];
	dt_auth_secret_text(hex);
	size_t len = strlen(hex);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		sodium_memzero(hex, sizeof(hex));
		return dt_err_set(err, errno == EEXIST ? DT_CONFIG : DT_IO, "cannot create the cluster secret '%s': %s%s",
				  path, strerror(errno), errno == EEXIST ? " (remove it first to make a new one)" : "");
	}
	/* The umask may have taken bits away, never added: 0600 stands, but say it. */
	enum dt_status st = DT_OK;
	if (fchmod(fd, 0600) != 0 || write(fd, hex, len) != (ssize_t)len || fsync(fd) != 0)
		st = dt_err_set(err, DT_IO, "cannot write the cluster secret '%s': %s", path, strerror(errno));
	sodium_memzero(hex, sizeof(hex));
	if (close(fd) != 0 && !st)
		st = dt_err_set(err, DT_IO, "cannot close the cluster secret '%s': %s", path, strerror(errno));
	if (st)
		unlink(path);
	return st;
}

/* ---- handshake messages ----
 *
 * AUTH_HELLO and the start of AUTH_CHALLENGE share a layout (PROTOCOL.md §4.2):
 *   u16 auth version | u8 mode | u8 0 | nonce[32] | u32 index | u8 role length | role
 * AUTH_CHALLENGE appends mac_s[32]; AUTH_PROOF is mac_c[32] alone.
 */

static size_t put_id(uint8_t *out, enum dt_wire_security mode, const uint8_t *nonce, const char *role, uint32_t index)
{
	size_t rl = strlen(role);
	dt_put_u16le(out, DT_AUTH_VERSION);
	out[2] = (uint8_t)mode;
	out[3] = 0;
	memcpy(out + 4, nonce, DT_AUTH_NONCE_BYTES);
	dt_put_u32le(out + 36, index);
	out[40] = (uint8_t)rl;
	memcpy(out + 41, role, rl);
	return 41 + rl;
}

/* Parses an id; returns the bytes used, 0 if malformed (why says how). */
static size_t get_id(const uint8_t *in, size_t len, enum dt_wire_security *mode, uint8_t *nonce, char *role,
		     uint32_t *index, char *why, size_t cap)
{
	if (len < 41) {
		dt_fmt(why, cap, "an authentication message of %zu bytes is shorter than its 41 fixed bytes", len);
		return 0;
	}
	if (dt_get_u16le(in) != DT_AUTH_VERSION || in[3] != 0) {
		dt_fmt(why, cap, "authentication version %u is not %u", dt_get_u16le(in), DT_AUTH_VERSION);
		return 0;
	}
	if (in[2] != DT_WIRE_AUTH && in[2] != DT_WIRE_ENCRYPT) {
		dt_fmt(why, cap, "unknown wire security %u", in[2]);
		return 0;
	}
	size_t rl = in[40];
	if (rl == 0 || rl > DT_ROLE_MAX || 41 + rl > len) {
		dt_fmt(why, cap, "a role of %zu bytes does not fit (1..%d, %zu bytes left)", rl, DT_ROLE_MAX, len - 41);
		return 0;
	}
	for (size_t i = 0; i < rl; i++) {
		if (in[41 + i] < 0x21 || in[41 + i] > 0x7e) {
			dt_fmt(why, cap, "the role is not printable ASCII");
			return 0;
		}
	}
	*mode = (enum dt_wire_security)in[2];
	memcpy(nonce, in + 4, DT_AUTH_NONCE_BYTES);
	*index = dt_get_u32le(in + 36);
	memcpy(role, in + 41, rl);
	role[rl] = '\0';
	return 41 + rl;
}

/* HMAC(secret, label | T) */
static void transcript_mac(const struct dt_auth_hs *hs, const char *label, uint8_t out[DT_AUTH_MAC_BYTES])
{
	crypto_auth_hmacsha256_state s;
	crypto_auth_hmacsha256_init(&s, hs->auth->secret, DT_AUTH_SECRET_BYTES);
	uint8_t fixed[32];
	crypto_auth_hmacsha256_update(&s, (const uint8_t *)label, strlen(label));
	crypto_auth_hmacsha256_update(&s, (const uint8_t *)"dtrain-auth-v1", 14);
	fixed[0] = (uint8_t)hs->auth->mode;
	dt_put_u64le(fixed + 1, hs->fingerprint);
	crypto_auth_hmacsha256_update(&s, fixed, 9);
	crypto_auth_hmacsha256_update(&s, hs->nonce_c, DT_AUTH_NONCE_BYTES);
	crypto_auth_hmacsha256_update(&s, hs->nonce_s, DT_AUTH_NONCE_BYTES);
	const char *roles[2] = { hs->role_c, hs->role_s };
	uint32_t idx[2] = { hs->index_c, hs->index_s };
	for (int i = 0; i < 2; i++) {
		size_t rl = strlen(roles[i]);
		dt_put_u32le(fixed, idx[i]);
		fixed[4] = (uint8_t)rl;
		crypto_auth_hmacsha256_update(&s, fixed, 5);
		crypto_auth_hmacsha256_update(&s, (const uint8_t *)roles[i], rl);
	}
	crypto_auth_hmacsha256_final(&s, out);
	sodium_memzero(&s, sizeof(s));
}

static void derive_keys(const struct dt_auth_hs *hs, int is_client, struct dt_wire_sec *sec)
{
	uint8_t master[DT_AUTH_MAC_BYTES], c2s[32], s2c[32];
	transcript_mac(hs, "session", master);
	crypto_kdf_derive_from_key(c2s, sizeof(c2s), 1, "dtrwire_", master);
	crypto_kdf_derive_from_key(s2c, sizeof(s2c), 2, "dtrwire_", master);
	memset(sec, 0, sizeof(*sec));
	sec->mode = hs->auth->mode;
	memcpy(sec->tx_key, is_client ? c2s : s2c, 32);
	memcpy(sec->rx_key, is_client ? s2c : c2s, 32);
	sodium_memzero(master, sizeof(master));
	sodium_memzero(c2s, sizeof(c2s));
	sodium_memzero(s2c, sizeof(s2c));
}

size_t dt_auth_client_hello(struct dt_auth_hs *hs, const struct dt_hello *local, uint8_t *out)
{
	need_sodium();
	DT_ASSERT(local->auth);
	memset(hs, 0, sizeof(*hs));
	hs->auth = local->auth;
	hs->fingerprint = local->cluster_fingerprint;
	randombytes_buf(hs->nonce_c, sizeof(hs->nonce_c));
	dt_fmt(hs->role_c, sizeof(hs->role_c), "%s", local->role);
	hs->index_c = local->index;
	return put_id(out, hs->auth->mode, hs->nonce_c, hs->role_c, hs->index_c);
}

uint32_t dt_auth_server_challenge(struct dt_auth_hs *hs, const struct dt_hello *local, const uint8_t *in,
				  size_t len, uint8_t *out, size_t *out_len, char *why, size_t cap)
{
	need_sodium();
	DT_ASSERT(local->auth);
	memset(hs, 0, sizeof(*hs));
	hs->auth = local->auth;
	hs->fingerprint = local->cluster_fingerprint;
	enum dt_wire_security mode;
	size_t used = get_id(in, len, &mode, hs->nonce_c, hs->role_c, &hs->index_c, why, cap);
	if (!used)
		return DT_REFUSE_AUTH;
	if (used != len) {
		dt_fmt(why, cap, "an auth_hello of %zu bytes has %zu bytes after its role", len, len - used);
		return DT_REFUSE_AUTH;
	}
	if (mode != hs->auth->mode) {
		dt_fmt(why, cap, "wire security differs: %s:%u runs --wire_security=%s but %s:%u runs --wire_security=%s",
		       local->role, local->index, dt_wire_security_name(hs->auth->mode), hs->role_c, hs->index_c,
		       dt_wire_security_name(mode));
		return DT_REFUSE_AUTH;
	}
	randombytes_buf(hs->nonce_s, sizeof(hs->nonce_s));
	dt_fmt(hs->role_s, sizeof(hs->role_s), "%s", local->role);
	hs->index_s = local->index;
	size_t n = put_id(out, hs->auth->mode, hs->nonce_s, hs->role_s, hs->index_s);
	transcript_mac(hs, "server", out + n);
	*out_len = n + DT_AUTH_MAC_BYTES;
	return 0;
}

uint32_t dt_auth_client_prove(struct dt_auth_hs *hs, const uint8_t *in, size_t len, const char *expect_role,
			      uint32_t expect_index, uint8_t *out, struct dt_wire_sec *sec, char *why, size_t cap)
{
	enum dt_wire_security mode;
	size_t used = get_id(in, len, &mode, hs->nonce_s, hs->role_s, &hs->index_s, why, cap);
	if (!used)
		return DT_REFUSE_AUTH;
	if (len != used + DT_AUTH_MAC_BYTES) {
		dt_fmt(why, cap, "an auth_challenge of %zu bytes is not its %zu bytes", len, used + DT_AUTH_MAC_BYTES);
		return DT_REFUSE_AUTH;
	}
	if (expect_role && (strcmp(hs->role_s, expect_role) != 0 || hs->index_s != expect_index)) {
		dt_fmt(why, cap, "the task there is %s:%u, not %s:%u (are the cluster addresses right?)", hs->role_s,
		       hs->index_s, expect_role, expect_index);
		return DT_REFUSE_IDENTITY;
	}
	uint8_t want[DT_AUTH_MAC_BYTES];
	transcript_mac(hs, "server", want);
	int ok = mode == hs->auth->mode && sodium_memcmp(want, in + used, DT_AUTH_MAC_BYTES) == 0;
	sodium_memzero(want, sizeof(want));
	if (!ok) {
		dt_fmt(why, cap, "%s:%u did not prove it holds this cluster's secret (another secret or cluster spec?)",
		       hs->role_s, hs->index_s);
		return DT_REFUSE_AUTH;
	}
	transcript_mac(hs, "client", out);
	derive_keys(hs, 1, sec);
	return 0;
}

uint32_t dt_auth_server_check(struct dt_auth_hs *hs, const uint8_t *in, size_t len, struct dt_wire_sec *sec,
			      char *why, size_t cap)
{
	if (len != DT_AUTH_MAC_BYTES) {
		dt_fmt(why, cap, "an auth_proof of %zu bytes is not %d bytes", len, DT_AUTH_MAC_BYTES);
		return DT_REFUSE_AUTH;
	}
	uint8_t want[DT_AUTH_MAC_BYTES];
	transcript_mac(hs, "client", want);
	int ok = sodium_memcmp(want, in, DT_AUTH_MAC_BYTES) == 0;
	sodium_memzero(want, sizeof(want));
	if (!ok) {
		dt_fmt(why, cap, "%s:%u did not prove it holds this cluster's secret (another secret or cluster spec?)",
		       hs->role_c, hs->index_c);
		return DT_REFUSE_AUTH;
	}
	derive_keys(hs, 0, sec);
	return 0;
}

/* ---- frames ---- */

static void aead_nonce(uint64_t n, uint8_t out[DT_WIRE_NONCE_BYTES])
{
	memset(out, 0, DT_WIRE_NONCE_BYTES);
	dt_put_u64le(out + 4, n);
}

/* Frame n of the direction keyed by key starts in k: auth, Poly1305 keyed
 * with k_n and fed the header first; encrypt, the AEAD with the header as
 * its associated data. */
static void frame_begin(enum dt_wire_security mode, const uint8_t key[32], uint64_t n, int seal,
			struct dt_wire_kernel *k, const uint8_t hdr[DT_FRAME_HEADER_SIZE])
{
	if (mode == DT_WIRE_ENCRYPT) {
		uint8_t nonce[DT_WIRE_NONCE_BYTES];
		aead_nonce(n, nonce);
		dt_wire_aead_begin(k, seal, key, nonce, hdr, DT_FRAME_HEADER_SIZE);
		return;
	}
	uint8_t otk[DT_WIRE_KEY_BYTES];
	crypto_kdf_derive_from_key(otk, sizeof(otk), n, "dtrframe", key);
	dt_wire_mac_begin(k, otk);
	sodium_memzero(otk, sizeof(otk));
	dt_wire_kernel_update(k, hdr, NULL, DT_FRAME_HEADER_SIZE);
}

uint64_t dt_wire_take_tx(struct dt_wire_sec *s)
{
	return s->tx_n++;
}

void dt_wire_seal_begin(const struct dt_wire_sec *s, uint64_t n, struct dt_wire_kernel *k,
			const uint8_t hdr[DT_FRAME_HEADER_SIZE])
{
	DT_ASSERT(s->mode != DT_WIRE_NONE);
	frame_begin(s->mode, s->tx_key, n, 1, k, hdr);
}

void dt_wire_open_begin(struct dt_wire_sec *s, struct dt_wire_kernel *k, const uint8_t hdr[DT_FRAME_HEADER_SIZE])
{
	DT_ASSERT(s->mode != DT_WIRE_NONE);
	frame_begin(s->mode, s->rx_key, s->rx_n++, 0, k, hdr);
}

int dt_wire_open_end(struct dt_wire_kernel *k, uint8_t *payload, size_t len, const uint8_t tag[DT_AUTH_TAG_BYTES])
{
	int encrypted = k->kind == DT_WK_OPEN;
	if (dt_wire_kernel_check(k, tag) == 0)
		return 0;
	/* Decrypted as it arrived, so cleared now: no forged plaintext stays. */
	if (encrypted && len)
		memset(payload, 0, len);
	return -1;
}

void dt_wire_seal(struct dt_wire_sec *s, const uint8_t hdr[DT_FRAME_HEADER_SIZE], const struct iovec *parts,
		  int nparts, uint8_t tag[DT_AUTH_TAG_BYTES])
{
	struct dt_wire_kernel *k = dt_wire_kernel_local();
	dt_wire_seal_begin(s, dt_wire_take_tx(s), k, hdr);
	for (int i = 0; i < nparts; i++)
		dt_wire_kernel_update(k, parts[i].iov_base, parts[i].iov_base, parts[i].iov_len);
	dt_wire_kernel_final(k, tag);
}

void dt_wire_seal_to(struct dt_wire_sec *s, const uint8_t hdr[DT_FRAME_HEADER_SIZE], const uint8_t *src, size_t len,
		     uint8_t *dst, uint8_t tag[DT_AUTH_TAG_BYTES])
{
	struct dt_wire_kernel *k = dt_wire_kernel_local();
	dt_wire_seal_begin(s, dt_wire_take_tx(s), k, hdr);
	/* auth reads src only (dst may be NULL); encrypt writes the ciphertext to dst. */
	dt_wire_kernel_update(k, src, dst, len);
	dt_wire_kernel_final(k, tag);
}

int dt_wire_open(struct dt_wire_sec *s, const uint8_t hdr[DT_FRAME_HEADER_SIZE], uint8_t *payload, size_t len,
		 const uint8_t tag[DT_AUTH_TAG_BYTES])
{
	if (!payload && len)
		return -1;
	struct dt_wire_kernel *k = dt_wire_kernel_local();
	dt_wire_open_begin(s, k, hdr);
	dt_wire_kernel_update(k, payload, payload, len);
	return dt_wire_open_end(k, payload, len, tag);
}
