/* libFuzzer target for the CSV parser (src/data/csv.c).
 *
 * Any input must either parse into rows of exactly `cols` NUL-terminated
 * fields that lie inside the parser's own text buffer, with line numbers
 * that never go down, or fail with DT_DATA and a message; never crash,
 * read out of bounds or leak.
 * Run: make build-fuzz/fuzz_csv && build-fuzz/fuzz_csv tests/fuzz/corpus/fuzz_csv */
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "data/csv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dt_csv c;
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st = dt_csv_parse((const char *)data, size, "fuzz.csv", 4096, &c, &err);
	if (st == DT_OK) {
		DT_ASSERT(c.cols >= 1);
		for (uint32_t r = 0; r <= c.rows; r++) {
			DT_ASSERT(r == 0 || c.line[r] > c.line[r - 1]);
			for (uint32_t j = 0; j < c.cols; j++) {
				const char *f = c.field[(size_t)r * c.cols + j];
				DT_ASSERT(f >= c.text && f + strlen(f) < c.text + size + 1);
			}
		}
	} else {
		DT_ASSERT(st == DT_DATA);
		DT_ASSERT(err.msg[0] != '\0');
	}
	dt_csv_release(&c);
	return 0;
}
