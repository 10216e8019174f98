/* libFuzzer target: the collective frames a ring link receives
 * (distribute/ring_wire.c): the frame header check, COLL_DATA's data header
 * (which must pack again to the same bytes), and the COLL_START, COLL_STALL,
 * COLL_REF, COLL_PEER and COLL_ABORT payload decoders, over a stream of frames the way ring.c walks
 * its receive buffer. A START that decodes must re-encode to the same bytes.
 *
 * Input: byte 0 bit 0 set = fix every header's CRC before checking it (so the
 * fuzzer gets past the CRC to the payloads); the rest is the stream.
 *
 *   make build-fuzz/fuzz_collective && build-fuzz/fuzz_collective -runs=20000 -seed=1 tests/fuzz/corpus/fuzz_collective
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32c.h"
#include "net/bytes.h"
#include "distribute/ring_wire.h"
#include "net/messages.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(uint8_t *data, size_t size, int fix_crc)
{
	size_t pos = 0;
	for (int frames = 0; frames < 64 && pos < size; frames++) {
		struct dt_frame_header h;
		struct dt_err err = DT_ERR_INIT;
		const int data_head = dt_coll_is_data_head(data + pos);
		if (size - pos < (data_head ? DT_COLL_DATA_HEAD_SIZE : DT_FRAME_HEADER_SIZE))
			return;
		if (data_head) {
			if (fix_crc)
				dt_put_u32le(data + pos + 12, dt_crc32c(data + pos, 12));
			const uint64_t seq = 0x100000000ull * frames + 7;
			if (dt_coll_data_head_parse(data + pos, seq, &h, &err) != DT_OK) {
				DT_ASSERT(err.msg[0] != '\0');
				return;
			}
			/* the header it stands for, and the same bytes packed again */
			uint8_t again[DT_COLL_DATA_HEAD_SIZE];
			dt_coll_data_head_pack(h.request_id, h.length, again);
			DT_ASSERT(h.type == DT_MSG_COLL_DATA && h.flags == 0 && h.request_id >> 32 == seq >> 32);
			DT_ASSERT(memcmp(again, data + pos, sizeof(again)) == 0);
			pos += DT_COLL_DATA_HEAD_SIZE;
			if (h.length > size - pos)
				return;
			pos += (size_t)h.length;
			continue;
		}
		if (fix_crc)
			dt_put_u32le(data + pos + 28, dt_crc32c(data + pos, 28));
		if (dt_coll_header_parse(data + pos, &h, &err) != DT_OK) {
			DT_ASSERT(err.msg[0] != '\0');
			return;
		}
		pos += DT_FRAME_HEADER_SIZE;
		if (h.length > size - pos)
			return;
		const uint8_t *p = data + pos;
		size_t len = (size_t)h.length;
		pos += len;
		if (h.type == DT_MSG_COLL_START) {
			struct dt_coll_start s;
			if (dt_coll_start_decode(&s, p, len, &err) == DT_OK) {
				uint8_t again[DT_COLL_START_FIXED + DT_COLL_NAME_WIRE_MAX];
				size_t n = dt_coll_start_encode(&s, again);
				DT_ASSERT(n == len && memcmp(again, p, n) == 0);
				char d[DT_COLL_NAME_WIRE_MAX + 96];
				dt_coll_describe(&s, d, sizeof(d));
			}
		} else if (h.type == DT_MSG_COLL_STALL) {
			struct dt_coll_stall s;
			if (dt_coll_stall_decode(&s, p, len, &err) == DT_OK) {
				uint8_t again[DT_COLL_STALL_BYTES];
				dt_coll_stall_encode(&s, again);
				DT_ASSERT(memcmp(again, p, sizeof(again)) == 0);
			}
		} else if (h.type == DT_MSG_COLL_REF) {
			struct dt_coll_ref r;
			if (dt_coll_ref_decode(&r, p, len, &err) == DT_OK) {
				uint8_t again[DT_COLL_REF_BYTES];
				dt_coll_ref_encode(&r, again);
				DT_ASSERT(memcmp(again, p, sizeof(again)) == 0);
			}
		} else if (h.type == DT_MSG_COLL_PEER || h.type == DT_MSG_COLL_SHM) { /* one payload layout */
			struct dt_coll_peer peer;
			if (dt_coll_peer_decode(&peer, p, len, &err) == DT_OK) {
				uint8_t again[DT_COLL_PEER_BYTES];
				dt_coll_peer_encode(&peer, again);
				DT_ASSERT(memcmp(again, p, sizeof(again)) == 0);
			}
		} else if (h.type == DT_MSG_COLL_ABORT) {
			struct dt_reason_msg m;
			if (dt_reason_decode(&m, p, len, &err) == DT_OK)
				DT_ASSERT(strlen(m.text) < sizeof(m.text));
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t *copy = dt_xmalloc(size);
	memcpy(copy, data + 1, size - 1);
	walk(copy, size - 1, data[0] & 1);
	free(copy);
	return 0;
}
