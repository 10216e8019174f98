/* Tests for src/net/auth.c: the secret file (0600 or refused, as ssh refuses
 * keys), the mutual challenge-response (a wrong secret, a replayed proof, a
 * challenge moved to another task are refused), and per-frame protection in
 * both modes (a flipped bit, a replayed or reordered frame, a frame moved to
 * the other direction fail their check; encryption hides the payload). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_test.h"
#include "net/auth.h"
#include "net/handshake.h"

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	DT_CHECK(fd >= 0);
	DT_CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	DT_CHECK(chmod(path, mode) == 0);
}

DT_TEST(net_auth, secret_file_is_0600_or_refused)
{
	char path[512], other[512];
	snprintf(path, sizeof(path), "%s/secret", dt_test_tmpdir());
	snprintf(other, sizeof(other), "%s/other", dt_test_tmpdir());
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_auth_secret_new(path, &err), &err);
	struct stat sb;
	DT_CHECK(stat(path, &sb) == 0);
	DT_CHECK_INT_EQ(sb.st_mode & 0777, 0600);
	DT_CHECK_INT_EQ(sb.st_size, 65);
	/* Never overwritten. */
	DT_CHECK_INT_EQ(dt_auth_secret_new(path, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "remove it first");

	struct dt_auth a, b;
	DT_CHECK_OK(dt_auth_load(&a, path, DT_WIRE_AUTH, &err), &err);
	DT_CHECK_INT_EQ(a.mode, DT_WIRE_AUTH);
	DT_CHECK_OK(dt_auth_secret_new(other, &err), &err);
	DT_CHECK_OK(dt_auth_load(&b, other, DT_WIRE_ENCRYPT, &err), &err);
	DT_CHECK(memcmp(a.secret, b.secret, sizeof(a.secret)) != 0);

	/* Group- or world-readable: refused with the fix. */
	const mode_t bad[] = { 0640, 0604, 0660, 0644 };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		DT_CHECK(chmod(path, bad[i]) == 0);
		DT_CHECK_INT_EQ(dt_auth_load(&a, path, DT_WIRE_AUTH, &err), DT_CONFIG);
		DT_CHECK_CONTAINS(err.msg, "others than its owner may read it");
		DT_CHECK_CONTAINS(err.msg, "chmod 600");
	}
	/* 32 raw bytes are taken too; any other length is not. */
	write_file(path, "0123456789abcdef0123456789abcdef", 0600);
	DT_CHECK_OK(dt_auth_load(&a, path, DT_WIRE_AUTH, &err), &err);
	DT_CHECK(memcmp(a.secret, "0123456789abcdef", 16) == 0);
	write_file(path, "too short\n", 0600);
	DT_CHECK_INT_EQ(dt_auth_load(&a, path, DT_WIRE_AUTH, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "not 64 hex digits or 32 bytes");
	DT_CHECK_INT_EQ(dt_auth_load(&a, "/nonexistent/secret", DT_WIRE_AUTH, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "dtrain secret new");
}

struct pair {
	struct dt_auth secret_c, secret_s;
	struct dt_hello client, server;
	struct dt_auth_hs hc, hs;
	struct dt_wire_sec sc, ss;
	uint8_t auth_hello[DT_AUTH_MSG_MAX], challenge[DT_AUTH_MSG_MAX], proof[DT_AUTH_MAC_BYTES];
	size_t hello_len, challenge_len;
};

static void pair_init(struct pair *p, enum dt_wire_security mode, int same_secret)
{
	memset(p, 0, sizeof(*p));
	for (int i = 0; i < DT_AUTH_SECRET_BYTES; i++) {
		p->secret_c.secret[i] = (uint8_t)(i * 7 + 1);
		p->secret_s.secret[i] = (uint8_t)(i * 7 + (same_secret ? 1 : 2));
	}
	p->secret_c.mode = p->secret_s.mode = mode;
	dt_hello_init(&p->client, "worker", 1, 0x1234);
	dt_hello_init(&p->server, "ps", 0, 0x1234);
	p->client.auth = &p->secret_c;
	p->server.auth = &p->secret_s;
}

static void pair_release(struct pair *p)
{
	dt_hello_release(&p->client);
	dt_hello_release(&p->server);
}

/* Runs the exchange; returns the first refusal code (0: both sides authenticated). */
static uint32_t exchange(struct pair *p, char *why, size_t cap)
{
	p->hello_len = dt_auth_client_hello(&p->hc, &p->client, p->auth_hello);
	uint32_t code = dt_auth_server_challenge(&p->hs, &p->server, p->auth_hello, p->hello_len, p->challenge,
						 &p->challenge_len, why, cap);
	if (!code)
		code = dt_auth_client_prove(&p->hc, p->challenge, p->challenge_len, "ps", 0, p->proof, &p->sc, why, cap);
	if (!code)
		code = dt_auth_server_check(&p->hs, p->proof, sizeof(p->proof), &p->ss, why, cap);
	return code;
}

DT_TEST(net_auth, mutual_challenge_response)
{
	struct pair p;
	char why[DT_REASON_MAX];
	pair_init(&p, DT_WIRE_AUTH, 1);
	DT_CHECK_INT_EQ(exchange(&p, why, sizeof(why)), 0);
	DT_CHECK(memcmp(p.sc.tx_key, p.ss.rx_key, 32) == 0);
	DT_CHECK(memcmp(p.sc.rx_key, p.ss.tx_key, 32) == 0);
	DT_CHECK(memcmp(p.sc.tx_key, p.sc.rx_key, 32) != 0);

	/* A captured proof replayed against a fresh challenge: refused. */
	uint8_t old_proof[DT_AUTH_MAC_BYTES];
	memcpy(old_proof, p.proof, sizeof(old_proof));
	struct dt_auth_hs fresh;
	uint8_t ch[DT_AUTH_MSG_MAX];
	size_t ch_len;
	struct dt_wire_sec s;
	DT_CHECK_INT_EQ(dt_auth_server_challenge(&fresh, &p.server, p.auth_hello, p.hello_len, ch, &ch_len, why,
						 sizeof(why)), 0);
	DT_CHECK_INT_EQ(dt_auth_server_check(&fresh, old_proof, sizeof(old_proof), &s, why, sizeof(why)), DT_REFUSE_AUTH);
	DT_CHECK_CONTAINS(why, "did not prove it holds this cluster's secret");

	/* The server's challenge for worker:1 taken as if it came from ps:1: refused by identity. */
	struct dt_auth_hs c2;
	uint8_t h2[DT_AUTH_MSG_MAX], pr[DT_AUTH_MAC_BYTES];
	dt_auth_client_hello(&c2, &p.client, h2);
	DT_CHECK_INT_EQ(dt_auth_client_prove(&c2, p.challenge, p.challenge_len, "ps", 1, pr, &s, why, sizeof(why)),
			DT_REFUSE_IDENTITY);
	/* ... and an old challenge answers no new hello (its MAC covers the old nonce). */
	DT_CHECK_INT_EQ(dt_auth_client_prove(&c2, p.challenge, p.challenge_len, "ps", 0, pr, &s, why, sizeof(why)),
			DT_REFUSE_AUTH);
	pair_release(&p);

	/* Another secret: the client sees the server cannot prove it, and stops. */
	pair_init(&p, DT_WIRE_AUTH, 0);
	DT_CHECK_INT_EQ(exchange(&p, why, sizeof(why)), DT_REFUSE_AUTH);
	DT_CHECK_CONTAINS(why, "ps:0 did not prove");
	pair_release(&p);

	/* Another wire security: refused by name. */
	pair_init(&p, DT_WIRE_AUTH, 1);
	p.secret_s.mode = DT_WIRE_ENCRYPT;
	DT_CHECK_INT_EQ(exchange(&p, why, sizeof(why)), DT_REFUSE_AUTH);
	DT_CHECK_CONTAINS(why, "wire security differs");
	pair_release(&p);

	/* Malformed auth_hello: every truncation is refused, none crashes. */
	pair_init(&p, DT_WIRE_AUTH, 1);
	p.hello_len = dt_auth_client_hello(&p.hc, &p.client, p.auth_hello);
	for (size_t n = 0; n < p.hello_len; n++)
		DT_CHECK_INT_EQ(dt_auth_server_challenge(&fresh, &p.server, p.auth_hello, n, ch, &ch_len, why, sizeof(why)),
				DT_REFUSE_AUTH);
	pair_release(&p);
}

static void frame(uint8_t hdr[DT_FRAME_HEADER_SIZE], uint16_t type, size_t len)
{
	struct dt_frame_header h = dt_frame_header_make(type, 0, 7, len);
	dt_frame_header_pack(&h, hdr);
}

static void check_frames(enum dt_wire_security mode)
{
	struct pair p;
	char why[DT_REASON_MAX];
	pair_init(&p, mode, 1);
	DT_CHECK_INT_EQ(exchange(&p, why, sizeof(why)), 0);
	uint8_t hdr[DT_FRAME_HEADER_SIZE], tag[DT_AUTH_TAG_BYTES], plain[300], buf[300];
	for (size_t i = 0; i < sizeof(plain); i++)
		plain[i] = (uint8_t)i;
	/* Two frames client -> server: both open, in order. */
	for (int k = 0; k < 2; k++) {
		memcpy(buf, plain, sizeof(buf));
		frame(hdr, DT_MSG_PS_PUSH, sizeof(buf));
		/* Encryption takes one part (conn copies referenced payloads first); auth any number. */
		struct iovec parts[2] = { { buf, 100 }, { buf + 100, 200 } };
		if (mode == DT_WIRE_ENCRYPT)
			parts[0].iov_len = sizeof(buf);
		dt_wire_seal(&p.sc, hdr, parts, mode == DT_WIRE_ENCRYPT ? 1 : 2, tag);
		if (mode == DT_WIRE_ENCRYPT)
			DT_CHECK(memcmp(buf, plain, sizeof(buf)) != 0);
		else
			DT_CHECK(memcmp(buf, plain, sizeof(buf)) == 0);
		DT_CHECK_INT_EQ(dt_wire_open(&p.ss, hdr, buf, sizeof(buf), tag), 0);
		DT_CHECK(memcmp(buf, plain, sizeof(buf)) == 0);
	}
	struct dt_wire_sec before = p.ss;
	memcpy(buf, plain, sizeof(buf));
	frame(hdr, DT_MSG_PS_PUSH, sizeof(buf));
	struct iovec one = { buf, sizeof(buf) };
	dt_wire_seal(&p.sc, hdr, &one, 1, tag);
	uint8_t sealed[300], sealed_tag[DT_AUTH_TAG_BYTES], sealed_hdr[DT_FRAME_HEADER_SIZE];
	memcpy(sealed, buf, sizeof(sealed));
	memcpy(sealed_tag, tag, sizeof(tag));
	memcpy(sealed_hdr, hdr, sizeof(hdr));
	/* A flipped bit in the payload, the header or the tag: refused. */
	for (int where = 0; where < 3; where++) {
		p.ss = before;
		memcpy(buf, sealed, sizeof(buf));
		memcpy(hdr, sealed_hdr, sizeof(hdr));
		memcpy(tag, sealed_tag, sizeof(tag));
		(where == 0 ? buf + 150 : where == 1 ? hdr + 12 : tag + 3)[0] ^= 0x10;
		DT_CHECK_INT_EQ(dt_wire_open(&p.ss, hdr, buf, sizeof(buf), tag), -1);
		if (mode == DT_WIRE_ENCRYPT) { /* no plaintext comes out: the buffer is cleared */
			for (size_t i = 0; i < sizeof(buf); i++)
				DT_CHECK_INT_EQ(buf[i], 0);
		}
	}
	/* Moved to the other direction (the client's own keys): refused. */
	struct dt_wire_sec back = p.sc;
	back.rx_n = before.rx_n;
	memcpy(buf, sealed, sizeof(buf));
	DT_CHECK_INT_EQ(dt_wire_open(&back, sealed_hdr, buf, sizeof(buf), sealed_tag), -1);
	/* The real one opens once, and its replay does not. */
	p.ss = before;
	memcpy(buf, sealed, sizeof(buf));
	DT_CHECK_INT_EQ(dt_wire_open(&p.ss, sealed_hdr, buf, sizeof(buf), sealed_tag), 0);
	DT_CHECK(memcmp(buf, plain, sizeof(buf)) == 0);
	memcpy(buf, sealed, sizeof(buf));
	DT_CHECK_INT_EQ(dt_wire_open(&p.ss, sealed_hdr, buf, sizeof(buf), sealed_tag), -1);
	/* An empty frame (a heartbeat) is tagged too. */
	p.ss.rx_n = p.sc.tx_n;
	frame(hdr, DT_MSG_HEARTBEAT, 0);
	dt_wire_seal(&p.sc, hdr, NULL, 0, tag);
	DT_CHECK_INT_EQ(dt_wire_open(&p.ss, hdr, NULL, 0, tag), 0);
	pair_release(&p);
}

DT_TEST(net_auth, frames_authenticated)
{
	check_frames(DT_WIRE_AUTH);
}

DT_TEST(net_auth, frames_encrypted)
{
	check_frames(DT_WIRE_ENCRYPT);
}
