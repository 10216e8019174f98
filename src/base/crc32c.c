#include "base/crc32c.h"

#include <pthread.h>
#include <string.h>

static uint32_t crc_table[8][256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		crc_table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t dt_crc32c_extend_portable(uint32_t crc, const void *data, size_t len)
{
	pthread_once(&crc_table_once, build_tables);
	const uint8_t *p = data;
	uint32_t c = ~crc;
	while (len >= 8) {
		uint32_t lo, hi;
		memcpy(&lo, p, 4);
		memcpy(&hi, p + 4, 4);
		/* The table walk assumes little-endian loads, which x86 and arm64 give. */
		lo ^= c;
		c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
		    crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
		    crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
		    crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
	return ~c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t extend_sse42(uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = data;
	uint64_t c = ~crc;
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
		p += 8;
		len -= 8;
	}
	uint32_t c32 = (uint32_t)c;
	while (len--)
		c32 = __builtin_ia32_crc32qi(c32, *p++);
	return ~c32;
}
#endif

uint32_t dt_crc32c_extend(uint32_t crc, const void *data, size_t len)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("sse4.2"))
		return extend_sse42(crc, data, len);
#endif
	return dt_crc32c_extend_portable(crc, data, len);
}

uint32_t dt_crc32c(const void *data, size_t len)
{
	return dt_crc32c_extend(0, data, len);
}

uint32_t dt_crc32c_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
