/*
 * ring_wire.h — the collective frames: their payloads, encoders and decoders.
 *
 * Collectives travel as ordinary frames (net/frame.h, 32-byte header with
 * CRC) on the ring's links, but for COLL_DATA, whose 16-byte data header is
 * below; their numbers are in net/messages.h (64..71). Payloads, byte by byte, all integers little-endian
 * (docs/PROTOCOL.md, "Collectives", has the same table):
 *
 *   COLL_START  the first frame of every collective on a link; request id = seq.
 *               Left out when the call is the link's last START again (all
 *               but seq equal) and its first frame there is a COLL_DATA: that
 *               DATA's request id stands for it (ring.c, start_again)
 *     1. bytes  0..7   u64 seq         the comm's sequence number of this call
 *     2. byte   8      u8  kind        1 allreduce, 2 broadcast, 3 barrier
 *     3. byte   9      u8  dtype       enum dt_wire_dtype (F32 allreduce, U8 broadcast, 0 barrier)
 *     4. bytes 10..11  u16 name length n (<= DT_COMM_NAME_MAX)
 *     5. bytes 12..15  u32 root        broadcast root rank, else 0
 *     6. bytes 16..23  u64 count       elements
 *     7. bytes 24..27  u32 rank        the sender's rank
 *     8. bytes 28..31  u32 nranks      the sender's ring size
 *     9. bytes 32..    name            n bytes of printable ASCII, no NUL
 *   COLL_DATA   the payload is raw elements (f32 little-endian or bytes), its
 *               length exactly the segment the receiver expects. It alone travels
 *               with a 16-byte data header instead of the 32-byte frame header:
 *               its type and flags are implied, and the receiver knows the seq it
 *               expects (its own call's), so 32 bits of it are enough to check.
 *               Between hosts it is a segment's only overhead (a message of Open
 *               MPI's TCP transport carries 22 bytes of header; COLLECTIVES.md,
 *               "Bytes on the wire")
 *     1. bytes  0..1   magic           0x8A 'd' (a frame header starts 0x89: the first
 *                                      byte says which header follows)
 *     2. bytes  2..3   u16 zero
 *     3. bytes  4..7   u32 seq         the low 32 bits of the call's seq
 *     4. bytes  8..11  u32 length      payload bytes (segments are < 4 GiB, comm.c)
 *     5. bytes 12..15  u32 header CRC  CRC-32C of bytes 0..11
 *               A tagged ring's tag covers the 32-byte frame header the data
 *               header stands for (dt_coll_data_head_parse rebuilds it), so the
 *               whole seq is authenticated.
 *   COLL_ABORT  the sender failed this collective and gives up the comm; the
 *               payload is REFUSE/ERROR's layout (u32 wire error code, u16
 *               length, text); request id = seq
 *   COLL_STALL  the sender has been waiting; request id = seq
 *     1. bytes  0..3   u32 rank        the sender's rank
 *     2. bytes  4..7   u32 blamed      the rank it found missing (itself waiting on it,
 *                                      or the rank its own left neighbour blamed)
 *     3. bytes  8..15  u64 waited ns   how long nothing has come from the blamed rank
 *
 *   COLL_REF    instead of a COLL_DATA, when the receiver can read the sender's
 *               memory (same kernel, same pid namespace, see COLL_PEER): the
 *               segment is in the sender's address space; request id = seq
 *     1. bytes  0..7   u64 address     where the segment's first byte is
 *     2. bytes  8..15  u64 length      bytes; exactly the segment the receiver expects
 *   COLL_DONE   on the return path (receiver to sender), empty: the sender's
 *               memory that collective seq referenced has all been read;
 *               request id = seq. A sender that sent a COLL_REF returns from
 *               the collective only after it, so the caller cannot change
 *               the bytes under a reader.
 *   COLL_PEER   sent once per link while the ring is set up (comm.c), request id 0
 *     1. bytes  0..3   u32 pid         the sender's process id (0: do not read me)
 *     2. bytes  4..7   u32 zero
 *     3. bytes  8..15  u64 pid namespace   inode of /proc/self/ns/pid
 *     4. bytes 16..31  boot id         /proc/sys/kernel/random/boot_id as 16 bytes
 *     5. bytes 32..39  u64 address     of the probe token (0 in the first COLL_PEER)
 *     6. bytes 40..55  token           16 random bytes the reader must find there
 *   COLL_PEER_OK  the answer to the second COLL_PEER, request id 0
 *     1. bytes  0..3   u32 errno       0: the token was read, send COLL_REFs;
 *                                      else why not (EPERM, ESRCH, EXDEV: other host)
 *
 * With a cluster secret every one of these frames is followed by a 16-byte
 * tag that the header's length does not count, and in encrypt mode its
 * payload is ciphertext (net/auth.h; the ring's keys: comm_internal.h).
 *
 * Flags are zero on every collective frame. Decoders treat payloads as
 * hostile; tests/fuzz/fuzz_collective.c drives them.
 */
#ifndef DT_DIST_RING_WIRE_H
#define DT_DIST_RING_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/frame.h"

enum dt_coll_kind {
	DT_COLL_ALLREDUCE = 1,
	DT_COLL_BROADCAST = 2,
	DT_COLL_BARRIER = 3,
	DT_COLL_ALLGATHER = 4,
};
const char *dt_coll_kind_name(unsigned kind);

#define DT_COLL_START_FIXED 32u
#define DT_COLL_STALL_BYTES 16u
#define DT_COLL_NAME_WIRE_MAX 128u

struct dt_coll_start {
	uint64_t seq;
	uint8_t kind, dtype;
	uint32_t root;
	uint64_t count;
	uint32_t rank, nranks;
	char name[DT_COLL_NAME_WIRE_MAX + 1]; /* NUL-terminated */
};

struct dt_coll_stall {
	uint32_t rank, blamed;
	uint64_t waited_ns;
};

#define DT_COLL_REF_BYTES 16u
#define DT_COLL_PEER_BYTES 56u
#define DT_COLL_PEER_OK_BYTES 4u
#define DT_COLL_TOKEN_BYTES 16u

struct dt_coll_ref {
	uint64_t address, length;
};

struct dt_coll_peer {
	uint32_t pid;
	uint64_t pid_ns;
	uint8_t boot_id[16];
	uint64_t token_address;
	uint8_t token[DT_COLL_TOKEN_BYTES];
};

void dt_coll_ref_encode(const struct dt_coll_ref *r, uint8_t buf[DT_COLL_REF_BYTES]);
enum dt_status dt_coll_ref_decode(struct dt_coll_ref *out, const uint8_t *p, size_t len,
				  struct dt_err *err) DT_MUST_CHECK;
void dt_coll_peer_encode(const struct dt_coll_peer *peer, uint8_t buf[DT_COLL_PEER_BYTES]);
enum dt_status dt_coll_peer_decode(struct dt_coll_peer *out, const uint8_t *p, size_t len,
				   struct dt_err *err) DT_MUST_CHECK;

/* Encodes into buf (at least DT_COLL_START_FIXED + DT_COLL_NAME_WIRE_MAX
 * bytes); returns the size. The name is truncated to DT_COLL_NAME_WIRE_MAX. */
size_t dt_coll_start_encode(const struct dt_coll_start *s, uint8_t *buf);
enum dt_status dt_coll_start_decode(struct dt_coll_start *out, const uint8_t *p, size_t len,
				    struct dt_err *err) DT_MUST_CHECK;
void dt_coll_stall_encode(const struct dt_coll_stall *s, uint8_t buf[DT_COLL_STALL_BYTES]);
enum dt_status dt_coll_stall_decode(struct dt_coll_stall *out, const uint8_t *p, size_t len,
				    struct dt_err *err) DT_MUST_CHECK;

/* Checks a complete 32-byte frame header received on a ring link: magic,
 * version, CRC, flags zero, a collective type other than COLL_DATA (which
 * has its own header), the type's length cap. DT_OK and *h filled, or
 * DT_PROTOCOL with what was wrong (no peer name: the caller adds it). */
enum dt_status dt_coll_header_parse(const uint8_t hdr[DT_FRAME_HEADER_SIZE], struct dt_frame_header *h,
				    struct dt_err *err) DT_MUST_CHECK;

#define DT_COLL_DATA_HEAD_SIZE 16u
#define DT_COLL_DATA_MAGIC0 0x8A
#define DT_COLL_DATA_MAGIC1 'd'

/* 1 when the bytes at p (at least one) begin a COLL_DATA's data header, 0
 * when they begin a frame header (or garbage that check reports). */
static inline int dt_coll_is_data_head(const uint8_t *p)
{
	return p[0] == DT_COLL_DATA_MAGIC0;
}
/* The data header of a COLL_DATA of `len` bytes (< 4 GiB) in call `seq`. */
void dt_coll_data_head_pack(uint64_t seq, uint64_t len, uint8_t out[DT_COLL_DATA_HEAD_SIZE]);
/* Checks a complete data header (magic, zero bytes, CRC) received during
 * call `seq`, and fills *h as the frame header it stands for: type COLL_DATA,
 * flags 0, request id `seq` with its low 32 bits replaced by the header's
 * (equal to seq exactly when they match), the length. DT_OK, or DT_PROTOCOL
 * with what was wrong. */
enum dt_status dt_coll_data_head_parse(const uint8_t in[DT_COLL_DATA_HEAD_SIZE], uint64_t seq,
				       struct dt_frame_header *h, struct dt_err *err) DT_MUST_CHECK;

/* "allreduce 'grads/0' (#3, 1000 float32)" / "broadcast 'init' (#0, 4000 bytes from rank 0)". */
void dt_coll_describe(const struct dt_coll_start *s, char *buf, size_t cap);

#endif
