/* Tests for src/net/wire_crypto.c and the streamed frame protection of
 * net/auth.c and net/conn*.c: OpenSSL's Poly1305 and ChaCha20-Poly1305
 * produce RFC 8439's test vectors (§2.5.2, §2.8.2) whole and fed in every
 * split, and the same bytes as libsodium's (the reference the wire was first
 * written with) on random data; a frame sealed or opened in pieces equals one
 * sealed or opened whole; and through real connections, large frames (sealed
 * while sent, checked while received) come back intact under auth and
 * encrypt, while one with a bit flipped on the way closes the connection,
 * naming the frame, and is never answered. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "dt_test.h"
#include "net/auth.h"
#include "net/conn.h"
#include "net/handshake.h"
#include "net/loop.h"
#include "net/socket.h"
#include "net/wire_crypto.h"
#include "net_test_util.h"

static const uint8_t poly_key[32] = { 0x85, 0xd6, 0xbe, 0x78, 0x57, 0x55, 0x6d, 0x33, 0x7f, 0x44, 0x52,
				      0xfe, 0x42, 0xd5, 0x06, 0xa8, 0x01, 0x03, 0x80, 0x8a, 0xfb, 0x0d,
				      0xb2, 0xfd, 0x4a, 0xbf, 0xf6, 0xaf, 0x41, 0x49, 0xf5, 0x1b };
static const char poly_msg[] = "Cryptographic Forum Research Group";
static const uint8_t poly_tag[16] = { 0xa8, 0x06, 0x1d, 0xc1, 0x30, 0x51, 0x36, 0xc6,
				      0xc2, 0x2b, 0x8b, 0xaf, 0x0c, 0x01, 0x27, 0xa9 };

DT_TEST(net_wire_crypto, poly1305_gives_rfc8439_vector_in_every_split)
{
	struct dt_wire_kernel k = { 0 };
	const size_t len = strlen(poly_msg);
	uint8_t tag[16];
	/* Whole, then in two pieces cut at every byte, then a byte at a time. */
	for (size_t cut = 0; cut <= len + 1; cut++) {
		dt_wire_mac_begin(&k, poly_key);
		if (cut > len) {
			for (size_t i = 0; i < len; i++)
				dt_wire_kernel_update(&k, (const uint8_t *)poly_msg + i, NULL, 1);
		} else {
			dt_wire_kernel_update(&k, (const uint8_t *)poly_msg, NULL, cut);
			dt_wire_kernel_update(&k, (const uint8_t *)poly_msg + cut, NULL, len - cut);
		}
		dt_wire_kernel_final(&k, tag);
		DT_CHECK(memcmp(tag, poly_tag, 16) == 0);
	}
	dt_wire_mac_begin(&k, poly_key);
	dt_wire_kernel_update(&k, (const uint8_t *)poly_msg, NULL, len);
	DT_CHECK_INT_EQ(dt_wire_kernel_check(&k, poly_tag), 0);
	uint8_t bad[16];
	memcpy(bad, poly_tag, 16);
	bad[15] ^= 0x80;
	dt_wire_mac_begin(&k, poly_key);
	dt_wire_kernel_update(&k, (const uint8_t *)poly_msg, NULL, len);
	DT_CHECK_INT_EQ(dt_wire_kernel_check(&k, bad), -1);
	dt_wire_kernel_release(&k);
}

static const char aead_pt[] = "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for "
			      "the future, sunscreen would be it.";
static const uint8_t aead_nonce[12] = { 0x07, 0, 0, 0, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47 };
static const uint8_t aead_aad[12] = { 0x50, 0x51, 0x52, 0x53, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7 };
static const uint8_t aead_ct[114] = {
	0xd3, 0x1a, 0x8d, 0x34, 0x64, 0x8e, 0x60, 0xdb, 0x7b, 0x86, 0xaf, 0xbc, 0x53, 0xef, 0x7e, 0xc2, 0xa4, 0xad, 0xed,
	0x51, 0x29, 0x6e, 0x08, 0xfe, 0xa9, 0xe2, 0xb5, 0xa7, 0x36, 0xee, 0x62, 0xd6, 0x3d, 0xbe, 0xa4, 0x5e, 0x8c, 0xa9,
	0x67, 0x12, 0x82, 0xfa, 0xfb, 0x69, 0xda, 0x92, 0x72, 0x8b, 0x1a, 0x71, 0xde, 0x0a, 0x9e, 0x06, 0x0b, 0x29, 0x05,
	0xd6, 0xa5, 0xb6, 0x7e, 0xcd, 0x3b, 0x36, 0x92, 0xdd, 0xbd, 0x7f, 0x2d, 0x77, 0x8b, 0x8c, 0x98, 0x03, 0xae, 0xe3,
	0x28, 0x09, 0x1b, 0x58, 0xfa, 0xb3, 0x24, 0xe4, 0xfa, 0xd6, 0x75, 0x94, 0x55, 0x85, 0x80, 0x8b, 0x48, 0x31, 0xd7,
	0xbc, 0x3f, 0xf4, 0xde, 0xf0, 0x8e, 0x4b, 0x7a, 0x9d, 0xe5, 0x76, 0xd2, 0x65, 0x86, 0xce, 0xc6, 0x4b, 0x61, 0x16,
};
static const uint8_t aead_tag[16] = { 0x1a, 0xe1, 0x0b, 0x59, 0x4f, 0x09, 0xe2, 0x6a,
				      0x7e, 0x90, 0x2e, 0xcb, 0xd0, 0x60, 0x06, 0x91 };

/* Runs k over n bytes in pieces of `piece` (src to dst). */
static void feed(struct dt_wire_kernel *k, const uint8_t *src, uint8_t *dst, size_t n, size_t piece)
{
	for (size_t off = 0; off < n; off += piece)
		dt_wire_kernel_update(k, src + off, dst ? dst + off : NULL, n - off < piece ? n - off : piece);
}

DT_TEST(net_wire_crypto, chacha20_poly1305_gives_rfc8439_vector_in_pieces)
{
	struct dt_wire_kernel k = { 0 };
	uint8_t key[32], buf[114], tag[16];
	for (int i = 0; i < 32; i++)
		key[i] = (uint8_t)(0x80 + i);
	DT_CHECK_INT_EQ(strlen(aead_pt), 114);
	const size_t pieces[] = { 114, 1, 7, 63, 64, 65 };
	for (size_t p = 0; p < DT_ARRAY_LEN(pieces); p++) {
		memcpy(buf, aead_pt, sizeof(buf));
		dt_wire_aead_begin(&k, 1, key, aead_nonce, aead_aad, sizeof(aead_aad));
		feed(&k, buf, buf, sizeof(buf), pieces[p]); /* in place, as a connection does */
		dt_wire_kernel_final(&k, tag);
		DT_CHECK(memcmp(buf, aead_ct, sizeof(buf)) == 0);
		DT_CHECK(memcmp(tag, aead_tag, 16) == 0);
		dt_wire_aead_begin(&k, 0, key, aead_nonce, aead_aad, sizeof(aead_aad));
		feed(&k, buf, buf, sizeof(buf), pieces[p]);
		DT_CHECK_INT_EQ(dt_wire_kernel_check(&k, aead_tag), 0);
		DT_CHECK(memcmp(buf, aead_pt, sizeof(buf)) == 0);
	}
	/* A flipped ciphertext bit, or other associated data: refused. */
	memcpy(buf, aead_ct, sizeof(buf));
	buf[57] ^= 0x04;
	dt_wire_aead_begin(&k, 0, key, aead_nonce, aead_aad, sizeof(aead_aad));
	feed(&k, buf, buf, sizeof(buf), 114);
	DT_CHECK_INT_EQ(dt_wire_kernel_check(&k, aead_tag), -1);
	memcpy(buf, aead_ct, sizeof(buf));
	dt_wire_aead_begin(&k, 0, key, aead_nonce, aead_aad, sizeof(aead_aad) - 1);
	feed(&k, buf, buf, sizeof(buf), 114);
	DT_CHECK_INT_EQ(dt_wire_kernel_check(&k, aead_tag), -1);
	dt_wire_kernel_release(&k);
}

DT_TEST(net_wire_crypto, same_bytes_as_libsodium_on_random_data)
{
	DT_CHECK(sodium_init() >= 0);
	const size_t lens[] = { 0, 1, 15, 16, 17, 63, 64, 65, 1000, 4096, (1u << 20) + 3 };
	const size_t max = (1u << 20) + 3;
	uint8_t *msg = malloc(max), *ours = malloc(max), *ref = malloc(max);
	DT_CHECK(msg && ours && ref);
	struct dt_wire_kernel k = { 0 };
	uint8_t key[32], nonce[12], aad[32], t1[16], t2[16];
	for (size_t i = 0; i < DT_ARRAY_LEN(lens); i++) {
		size_t n = lens[i];
		randombytes_buf(msg, max);
		randombytes_buf(key, sizeof(key));
		randombytes_buf(nonce, sizeof(nonce));
		randombytes_buf(aad, sizeof(aad));
		size_t piece = 1 + randombytes_uniform(70000); /* splits at no block boundary in particular */
		dt_wire_mac_begin(&k, key);
		feed(&k, msg, NULL, n, piece);
		dt_wire_kernel_final(&k, t1);
		crypto_onetimeauth_poly1305(t2, msg, n, key);
		DT_CHECK(memcmp(t1, t2, 16) == 0);

		dt_wire_aead_begin(&k, 1, key, nonce, aad, sizeof(aad));
		feed(&k, msg, ours, n, piece);
		dt_wire_kernel_final(&k, t1);
		crypto_aead_chacha20poly1305_ietf_encrypt_detached(ref, t2, NULL, msg, n, aad, sizeof(aad), NULL, nonce,
								   key);
		DT_CHECK(memcmp(ours, ref, n) == 0);
		DT_CHECK(memcmp(t1, t2, 16) == 0);
	}
	dt_wire_kernel_release(&k);
	free(msg);
	free(ours);
	free(ref);
}

/* Two ends of one direction with the same keys. */
static void sec_pair(struct dt_wire_sec *tx, struct dt_wire_sec *rx, enum dt_wire_security mode)
{
	memset(tx, 0, sizeof(*tx));
	tx->mode = mode;
	for (int i = 0; i < 32; i++)
		tx->tx_key[i] = (uint8_t)(3 * i + 1);
	*rx = *tx;
	memcpy(rx->rx_key, tx->tx_key, 32);
}

static void check_streamed(enum dt_wire_security mode)
{
	const size_t n = 300000;
	uint8_t *plain = malloc(n), *whole = malloc(n), *streamed = malloc(n);
	DT_CHECK(plain && whole && streamed);
	for (size_t i = 0; i < n; i++)
		plain[i] = (uint8_t)(i * 31 + 7);
	struct dt_wire_sec a, b, rx;
	sec_pair(&a, &rx, mode);
	b = a;
	uint8_t hdr[DT_FRAME_HEADER_SIZE], t1[16], t2[16];
	struct dt_frame_header h = dt_frame_header_make(DT_MSG_ECHO, 0, 9, n);
	dt_frame_header_pack(&h, hdr);
	/* Whole, from a copy; in pieces, from the plain bytes to another buffer. */
	memcpy(whole, plain, n);
	struct iovec part = { whole, n };
	dt_wire_seal(&a, hdr, &part, 1, t1);
	struct dt_wire_kernel k = { 0 };
	dt_wire_seal_begin(&b, dt_wire_take_tx(&b), &k, hdr);
	feed(&k, plain, streamed, n, 65537);
	dt_wire_kernel_final(&k, t2);
	DT_CHECK(memcmp(t1, t2, 16) == 0);
	if (mode == DT_WIRE_ENCRYPT)
		DT_CHECK(memcmp(whole, streamed, n) == 0);
	else
		memcpy(streamed, plain, n);
	/* Opened in pieces; then the same frame again (a replay) and a flipped bit: refused. */
	struct dt_wire_sec before = rx;
	for (int round = 0; round < 3; round++) {
		uint8_t *buf = malloc(n);
		DT_CHECK(buf != NULL);
		memcpy(buf, streamed, n);
		if (round == 2) {
			rx = before;
			buf[n / 2] ^= 0x01;
		}
		dt_wire_open_begin(&rx, &k, hdr);
		feed(&k, buf, buf, n, 4099);
		int ok = dt_wire_open_end(&k, buf, n, t1);
		DT_CHECK_INT_EQ(ok, round == 0 ? 0 : -1);
		if (round == 0)
			DT_CHECK(memcmp(buf, plain, n) == 0);
		else if (mode == DT_WIRE_ENCRYPT) { /* decrypted as it came, so cleared: no forged plaintext stays */
			for (size_t i = 0; i < n; i += 997)
				DT_CHECK_INT_EQ(buf[i], 0);
		}
		free(buf);
	}
	dt_wire_kernel_release(&k);
	free(plain);
	free(whole);
	free(streamed);
}

DT_TEST(net_wire_crypto, a_frame_sealed_or_opened_in_pieces_equals_one_done_whole)
{
	check_streamed(DT_WIRE_AUTH);
	check_streamed(DT_WIRE_ENCRYPT);
}

/* ---- through real connections ---- */

/* A relay between a client and a server: bytes pass as they are, except one
 * bit of the client's stream (or with `down`, the server's) when flip_at is set. */
struct relay {
	int lfd, target;  /* listens here; forwards to 127.0.0.1:target */
	size_t flip_at;   /* 0: none */
	int down;         /* the flip is in the server -> client stream */
	size_t forwarded; /* client -> server bytes so far */
	size_t returned;  /* server -> client bytes so far */
};

static int pass(int from, int to, struct relay *rl, int upstream)
{
	uint8_t buf[65536];
	ssize_t n = recv(from, buf, sizeof(buf), MSG_DONTWAIT);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (n == 0)
		return -1;
	size_t *so_far = upstream ? &rl->forwarded : &rl->returned;
	if (upstream != rl->down && rl->flip_at && *so_far <= rl->flip_at && rl->flip_at < *so_far + (size_t)n)
		buf[rl->flip_at - *so_far] ^= 0x10;
	*so_far += (size_t)n;
	struct dt_err err = DT_ERR_INIT;
	return dt_sock_send_all(to, buf, (size_t)n, dt_deadline_in(20), "relay", &err) == DT_OK ? 1 : -1;
}

static void *relay_main(void *p)
{
	struct relay *rl = p;
	struct pollfd a = { rl->lfd, POLLIN, 0 };
	if (poll(&a, 1, 20000) <= 0)
		return NULL;
	int in = accept(rl->lfd, NULL, NULL), out = -1;
	struct dt_err err = DT_ERR_INIT;
	if (in < 0 || dt_sock_connect("127.0.0.1", rl->target, "server", dt_deadline_in(10), NULL, &out, &err)) {
		if (in >= 0)
			close(in);
		return NULL;
	}
	for (int64_t end = dt_deadline_in(60); dt_now_ns() < end;) {
		struct pollfd f[2] = { { in, POLLIN, 0 }, { out, POLLIN, 0 } };
		if (poll(f, 2, 200) < 0)
			break;
		if ((f[0].revents && pass(in, out, rl, 1) < 0) || (f[1].revents && pass(out, in, rl, 0) < 0))
			break;
	}
	close(in);
	close(out);
	return NULL;
}

struct closed {
	int done;
	struct dt_err why;
};

static void on_close_note(struct dt_conn *c, const struct dt_err *why, void *arg)
{
	struct closed *cl = arg;
	cl->why = *why;
	cl->done = 1;
}

struct waiting {
	struct dt_request *r;
	struct dt_conn *client;
	struct closed *server;
	int want_server_closed;
};

static int finished(void *arg)
{
	struct waiting *w = arg;
	if (!w->r)
		return dt_conn_is_open(w->client);
	return w->r->done && (!w->want_server_closed || w->server->done);
}

/* A 3 MB ECHO request sent by reference in two parts, echoed back: both
 * directions are streamed frames (sealed while sent, checked while received).
 * With flip_at, one bit flipped on the way there, or with `down` on the way
 * back: then the reply buffer (a worker's parameters, for a pull) must keep
 * every byte it had, since no byte reaches it before its frame verified. */
static void echo_through(enum dt_wire_security mode, size_t flip_at, int down)
{
	struct dt_auth auth;
	memset(&auth, 0, sizeof(auth));
	for (int i = 0; i < DT_AUTH_SECRET_BYTES; i++)
		auth.secret[i] = (uint8_t)(i + 11);
	auth.mode = mode;
	struct dt_hello cl, sv;
	test_hello(&cl, "worker", 1, 0x5eed, 64);
	test_hello(&sv, "ps", 0, 0x5eed, 64);
	cl.auth = sv.auth = &auth;
	struct dt_err err = DT_ERR_INIT;
	struct dt_loop *loop;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	int slfd, sport;
	struct relay rl = { .flip_at = flip_at, .down = down };
	DT_CHECK_OK(dt_sock_listen("127.0.0.1", 0, 4, &slfd, &sport, &err), &err);
	DT_CHECK_OK(dt_sock_listen("127.0.0.1", 0, 4, &rl.lfd, &rl.target, &err), &err);
	int rport = rl.target;
	rl.target = sport;
	pthread_t th;
	DT_CHECK(pthread_create(&th, NULL, relay_main, &rl) == 0);
	int cfd = -1, sfd = -1;
	DT_CHECK_OK(dt_sock_connect("127.0.0.1", rport, "relay", dt_deadline_in(10), NULL, &cfd, &err), &err);
	struct pollfd pf = { slfd, POLLIN, 0 };
	DT_CHECK(poll(&pf, 1, 10000) == 1);
	DT_CHECK_OK(dt_sock_accept(slfd, &sfd, NULL, 0, &err), &err);
	DT_CHECK(sfd >= 0);

	struct closed server_closed = { 0 };
	struct dt_conn_handler sh = { .on_close = on_close_note };
	struct dt_conn_config scfg = { .handler = &sh, .arg = &server_closed };
	struct dt__conn_accept_opts opts = { .local = &sv };
	struct dt_conn *server, *client;
	DT_CHECK_OK(dt__conn_accept(loop, sfd, "relay", &scfg, &opts, &server, &err), &err);
	DT_CHECK_OK(dt_conn_start_client(loop, cfd, "ps:0 via relay", &cl, "ps", 0, NULL, dt_deadline_in(10), &client, &err),
		    &err);
	struct waiting w = { NULL, client, &server_closed, flip_at != 0 };
	DT_CHECK_OK(dt_loop_run_until(loop, finished, &w, dt_deadline_in(10), "the handshake", &err), &err);

	const size_t n = 3u << 20;
	uint8_t *out = malloc(n), *back = malloc(n);
	DT_CHECK(out && back);
	for (size_t i = 0; i < n; i++) /* what the buffer held before: not what comes back */
		back[i] = (uint8_t)(i * 7 + 1);
	for (size_t i = 0; i < n; i++)
		out[i] = (uint8_t)(i * 13 + 5);
	struct dt_request r;
	memset(&r, 0, sizeof(r));
	r.type = DT_MSG_ECHO;
	r.deadline = dt_deadline_in(20);
	r.reply_buf = back;
	r.reply_cap = n;
	struct iovec parts[2] = { { out, 1000001 }, { out + 1000001, n - 1000001 } };
	DT_CHECK_OK(dt_conn_request(client, &r, parts, 2, 0, &err), &err);
	w.r = &r;
	DT_CHECK_OK(dt_loop_run_until(loop, finished, &w, dt_deadline_in(30), "the echo", &err), &err);
	if (!flip_at) {
		DT_CHECK_OK(r.status, &r.err);
		DT_CHECK(r.reply.length == n);
		DT_CHECK(memcmp(back, out, n) == 0);
		for (size_t i = 0; i < n; i += 4093) /* the caller's bytes: never encrypted in place */
			DT_CHECK_INT_EQ(out[i], (uint8_t)(i * 13 + 5));
	} else {
		DT_CHECK(r.status != DT_OK);
		DT_CHECK((down ? rl.returned : rl.forwarded) > flip_at); /* the flip happened */
		if (down) {
			DT_CHECK_CONTAINS(r.err.msg, "failed its authentication check");
		} else {
			DT_CHECK_CONTAINS(server_closed.why.msg, "failed its authentication check");
			DT_CHECK_CONTAINS(server_closed.why.msg, "echo, 3145728 bytes");
		}
		size_t changed = 0; /* bit-identical: nothing of the forged reply landed */
		for (size_t i = 0; i < n; i++)
			changed += back[i] != (uint8_t)(i * 7 + 1);
		DT_CHECK(changed == 0);
	}
	dt_conn_free(client);
	dt_conn_free(server);
	pthread_join(th, NULL);
	dt_sock_close(slfd);
	dt_sock_close(rl.lfd);
	dt_loop_free(loop);
	dt_hello_release(&cl);
	dt_hello_release(&sv);
	free(out);
	free(back);
}

DT_TEST_TIMEOUT(net_wire_crypto, large_frames_stream_through_connections_and_a_flipped_bit_is_refused, 120)
{
	echo_through(DT_WIRE_AUTH, 0, 0);
	echo_through(DT_WIRE_ENCRYPT, 0, 0);
	echo_through(DT_WIRE_AUTH, 1500007, 0);
	echo_through(DT_WIRE_ENCRYPT, 1500007, 0);
}

/* A reply altered on its way back (a forged pull reply): the request fails
 * and the buffer it would have landed in keeps every byte it had. */
DT_TEST_TIMEOUT(net_wire_crypto, a_forged_reply_leaves_the_reply_buffer_bit_identical, 120)
{
	echo_through(DT_WIRE_AUTH, 1500007, 1);
	echo_through(DT_WIRE_ENCRYPT, 1500007, 1);
}
