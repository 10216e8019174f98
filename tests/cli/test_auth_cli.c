/* Strangers at a parameter server of an authenticated cluster (issue 19), as
 * separate processes on loopback: a raw socket sending a plain HELLO, a raw
 * socket speaking the documented handshake with the wrong secret, a replay of
 * a real client's captured AUTH_HELLO and AUTH_PROOF on a new connection, and
 * a `dtrain train` chief with another secret are each refused (REFUSE code
 * authentication, or exit 2) and logged by the ps, and the real chief then
 * trains to the end; a networked cluster without a secret exits 2 saying how
 * to make one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "cluster/resolve.h"
#include "cluster_procs.h"
#include "distribute/ps_wire.h"
#include "dt_test.h"
#include "net/auth.h"
#include "net/handshake.h"
#include "net/socket.h"

#define TASK_WAIT_S 240.0

static int connect_to(int port)
{
	struct dt_err err = DT_ERR_INIT;
	int fd;
	DT_CHECK_OK(dt_sock_connect("127.0.0.1", port, "ps:0", dt_deadline_in(60), NULL, &fd, &err), &err);
	return fd;
}

/* Reads one frame; returns its type, *code the reason code of a REFUSE. */
static uint16_t read_answer(int fd, uint32_t *code, uint8_t *payload, size_t *len)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_MSG_CAP_SMALL);
	DT_CHECK_OK(dt_frame_recv_fd(fd, &d, dt_deadline_in(30), "ps:0", &err), &err);
	uint16_t type = d.header.type;
	*code = 0;
	if (type == DT_MSG_REFUSE) {
		struct dt_reason_msg m;
		DT_CHECK_OK(dt_reason_decode(&m, dt_frame_decoder_payload(&d), (size_t)d.header.length, &err), &err);
		*code = m.code;
	}
	if (payload) {
		DT_CHECK(d.header.length <= DT_AUTH_MSG_MAX);
		*len = (size_t)d.header.length;
		memcpy(payload, dt_frame_decoder_payload(&d), *len);
	}
	dt_frame_decoder_release(&d);
	return type;
}

static void send_frame(int fd, uint16_t type, const void *p, size_t len)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_frame_send_fd(fd, type, 0, 0, p, len, dt_deadline_in(10), "ps:0", &err), &err);
}

/* The client side of the handshake with `auth`, as documented; returns the
 * refusal code (0: the server took the proof), *proof_out the proof sent,
 * replay_proof (if not NULL) sent instead of a computed one. */
static uint32_t auth_as(int port, const struct dt_hello *me, uint8_t *hello_io, size_t *hello_len,
			const uint8_t *replay_proof, uint8_t *proof_out)
{
	int fd = connect_to(port);
	struct dt_auth_hs hs;
	if (!*hello_len)
		*hello_len = dt_auth_client_hello(&hs, me, hello_io);
	else
		memset(&hs, 0, sizeof(hs)), hs.auth = me->auth; /* replaying: no nonce of our own */
	send_frame(fd, DT_MSG_AUTH_HELLO, hello_io, *hello_len);
	uint8_t ch[DT_AUTH_MSG_MAX];
	size_t ch_len = 0;
	uint32_t code;
	DT_CHECK_INT_EQ(read_answer(fd, &code, ch, &ch_len), DT_MSG_AUTH_CHALLENGE);
	uint8_t proof[DT_AUTH_MAC_BYTES];
	struct dt_wire_sec sec;
	char why[DT_REASON_MAX];
	if (replay_proof) {
		memcpy(proof, replay_proof, sizeof(proof));
	} else if (dt_auth_client_prove(&hs, ch, ch_len, "ps", 0, proof, &sec, why, sizeof(why)) != 0) {
		/* The wrong secret: the server's proof fails here; a stranger sends its guess anyway. */
		memset(proof, 0x5a, sizeof(proof));
	}
	if (proof_out)
		memcpy(proof_out, proof, sizeof(proof));
	send_frame(fd, DT_MSG_AUTH_PROOF, proof, sizeof(proof));
	uint8_t hdr[DT_FRAME_HEADER_SIZE];
	/* Refused: a REFUSE arrives; accepted: nothing until our HELLO (which we never send). */
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_MSG_CAP_SMALL);
	struct dt_err err = DT_ERR_INIT;
	code = 0;
	if (dt_frame_recv_fd(fd, &d, dt_deadline_in(2), "ps:0", &err) == DT_OK && d.header.type == DT_MSG_REFUSE) {
		struct dt_reason_msg m;
		DT_CHECK_OK(dt_reason_decode(&m, dt_frame_decoder_payload(&d), (size_t)d.header.length, &err), &err);
		code = m.code;
	}
	(void)hdr;
	dt_frame_decoder_release(&d);
	close(fd);
	return code;
}

DT_TEST_TIMEOUT(auth_cli, strangers_are_refused_and_the_run_finishes, 400)
{
	char s1[600], s2[600], f1[700], f2[700];
	snprintf(s1, sizeof(s1), "%s/s1", dt_test_tmpdir());
	snprintf(s2, sizeof(s2), "%s/s2", dt_test_tmpdir());
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_auth_secret_new(s1, &err), &err);
	DT_CHECK_OK(dt_auth_secret_new(s2, &err), &err);
	snprintf(f1, sizeof(f1), "--cluster_secret_file=%s", s1);
	snprintf(f2, sizeof(f2), "--cluster_secret_file=%s", s2);
	const char *args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=300", "--log_every=100", f1,
			       "--connect_timeout=60", NULL };
	const char *wrong[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=300", "--log_every=100", f2,
				"--connect_timeout=60", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 0, 1);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, args);
	int port = cluster_port(&c, "ps", 0);

	/* 1. A plain HELLO (no secret): refused for authentication. */
	struct dt_hello h;
	dt_hello_init(&h, "chief", 0, 0);
	size_t len;
	uint8_t *buf = dt_hello_encode_alloc(&h, &len);
	int fd = connect_to(port);
	send_frame(fd, DT_MSG_HELLO, buf, len);
	free(buf);
	uint32_t code;
	DT_CHECK_INT_EQ(read_answer(fd, &code, NULL, NULL), DT_MSG_REFUSE);
	DT_CHECK_INT_EQ(code, DT_REFUSE_AUTH);
	close(fd);

	/* 2. The documented handshake with the wrong secret. */
	struct dt_auth bad;
	DT_CHECK_OK(dt_auth_load(&bad, s2, DT_WIRE_AUTH, &err), &err);
	h.auth = &bad;
	uint8_t hello[DT_AUTH_MSG_MAX];
	size_t hello_len = 0;
	DT_CHECK_INT_EQ(auth_as(port, &h, hello, &hello_len, NULL, NULL), DT_REFUSE_AUTH);

	/* 3. A real client's AUTH_HELLO and AUTH_PROOF, captured, replayed on a new connection. */
	struct dt_auth good;
	DT_CHECK_OK(dt_auth_load(&good, s1, DT_WIRE_AUTH, &err), &err);
	h.auth = &good;
	uint8_t captured[DT_AUTH_MAC_BYTES];
	hello_len = 0;
	/* With this test's fingerprint the MAC binds another cluster spec: refused. */
	DT_CHECK_INT_EQ(auth_as(port, &h, hello, &hello_len, NULL, captured), DT_REFUSE_AUTH);
	/* With the cluster's: the real exchange is taken, and its capture replayed is not. */
	char env[1400];
	cluster_tf_config(&c, "chief", 0, env, sizeof(env));
	struct dt_cluster_flags cf;
	dt_cluster_flags_init(&cf);
	struct dt_cluster cl;
	DT_CHECK_OK(dt_cluster_resolve_env(&cf, NULL, (const char *const[]){ env, NULL }, &cl, &err), &err);
	h.cluster_fingerprint = dt_ps_cluster_fingerprint(&cl);
	dt_cluster_release(&cl);
	hello_len = 0;
	DT_CHECK_INT_EQ(auth_as(port, &h, hello, &hello_len, NULL, captured), 0);
	DT_CHECK_INT_EQ(auth_as(port, &h, hello, &hello_len, captured, NULL), DT_REFUSE_AUTH);
	dt_hello_release(&h);

	/* 4. A dtrain chief with another secret: exit 2, nothing changed. */
	struct task *intruder = cluster_start(&c, "chief", 0, "intruder", (const char *const[]){ "dtrain", "train",
		wrong[0], wrong[1], wrong[2], wrong[3], wrong[4], wrong[5], NULL }, NULL);
	EXPECT_EXIT(&c, intruder, 2, TASK_WAIT_S);
	char *ie = task_read(intruder, 1);
	DT_CHECK_CONTAINS(ie, "did not prove it holds this cluster's secret");
	free(ie);

	/* The real chief trains to the end; the ps logged every refusal. */
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, ps0, 0, 60);
	char *pe = task_read(ps0, 1), *ce = task_read(chief, 1);
	DT_CHECK_CONTAINS(pe, "requires the cluster secret");
	DT_CHECK_CONTAINS(pe, "did not prove it holds this cluster's secret");
	DT_CHECK_CONTAINS(ce, "global step 300");
	free(pe);
	free(ce);
}

DT_TEST(auth_cli, a_networked_cluster_needs_a_secret)
{
	struct dt_run r;
	cli_run(&r, (const char *[]){ "train", "--model=mlp", "--problem=synthetic", "--ps_hosts=10.0.0.1:2222",
				      "--worker_hosts=10.0.0.2:2222", "--job_name=ps", NULL }, 30);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "is not a loopback address, and no cluster secret was given");
	DT_CHECK_CONTAINS(r.err, "dtrain secret new PATH");
	DT_CHECK_CONTAINS(r.err, "--insecure");
	dt_run_release(&r);
	/* A group-readable secret is refused as ssh refuses a key. */
	char s[600], flag[700];
	snprintf(s, sizeof(s), "%s/s", dt_test_tmpdir());
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_auth_secret_new(s, &err), &err);
	DT_CHECK(chmod(s, 0640) == 0);
	snprintf(flag, sizeof(flag), "--cluster_secret_file=%s", s);
	cli_run(&r, (const char *[]){ "train", "--model=mlp", "--problem=synthetic", "--ps_hosts=10.0.0.1:2222",
				      "--worker_hosts=10.0.0.2:2222", "--job_name=ps", flag, NULL }, 30);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "chmod 600");
	dt_run_release(&r);
}
