/*
 * crc32c.h — CRC-32C (Castagnoli), the checksum of frames and checkpoints.
 *
 * Polynomial 0x1EDC6F41 (reflected 0x82F63B78), init and final xor
 * 0xFFFFFFFF: the same CRC as iSCSI, ext4, LevelDB and TFRecord. Check
 * value: crc32c("123456789") == 0xE3069283. Uses the SSE4.2 crc32
 * instruction when the CPU has it, a slicing-by-8 table otherwise.
 */
#ifndef DT_BASE_CRC32C_H
#define DT_BASE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC of a whole buffer. */
uint32_t dt_crc32c(const void *data, size_t len);
/* Incremental form: start with crc = 0, feed pieces, the result equals the
 * one-shot CRC of their concatenation. */
uint32_t dt_crc32c_extend(uint32_t crc, const void *data, size_t len);
/* The portable table version, kept as the reference for tests. */
uint32_t dt_crc32c_extend_portable(uint32_t crc, const void *data, size_t len);

/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t dt_crc32c_mask(uint32_t crc);

#endif
