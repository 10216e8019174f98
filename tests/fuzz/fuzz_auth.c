/* libFuzzer target: the authenticated handshake (net/auth.c) as a stranger
 * drives it. Byte 0 picks the step: even, the input is an AUTH_HELLO for the
 * server, then the rest of it a proof; odd, the input is an AUTH_CHALLENGE
 * for a client that sent a real AUTH_HELLO. A stranger without the secret
 * must never be accepted, and nothing may crash or read out of bounds.
 *
 *   make build-fuzz/fuzz_auth && build-fuzz/fuzz_auth -runs=20000 -seed=1
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "net/auth.h"
#include "net/handshake.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	static struct dt_auth secret = { .mode = DT_WIRE_AUTH };
	memset(secret.secret, 0x42, sizeof(secret.secret));
	struct dt_hello me;
	dt_hello_init(&me, "ps", 0, 77);
	me.auth = &secret;
	char why[DT_REASON_MAX];
	struct dt_auth_hs hs;
	struct dt_wire_sec sec;
	const uint8_t *in = data + 1;
	size_t len = size - 1;
	if (data[0] % 2 == 0) {
		uint8_t out[DT_AUTH_MSG_MAX];
		size_t out_len = 0;
		size_t cut = len < DT_AUTH_MSG_MAX ? len : DT_AUTH_MSG_MAX;
		if (dt_auth_server_challenge(&hs, &me, in, cut, out, &out_len, why, sizeof(why)) == 0) {
			DT_ASSERT(out_len <= DT_AUTH_MSG_MAX);
			/* The nonce is fresh: no fixed input proves anything. */
			DT_ASSERT(dt_auth_server_check(&hs, in + cut, len - cut, &sec, why, sizeof(why)) != 0);
		}
	} else {
		uint8_t hello[DT_AUTH_MSG_MAX], proof[DT_AUTH_MAC_BYTES];
		dt_auth_client_hello(&hs, &me, hello);
		/* A challenge made without the secret never verifies. */
		DT_ASSERT(dt_auth_client_prove(&hs, in, len, NULL, 0, proof, &sec, why, sizeof(why)) != 0);
	}
	dt_hello_release(&me);
	return 0;
}
