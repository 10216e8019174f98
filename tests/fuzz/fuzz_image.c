/* libFuzzer target for the image sniffing and decoding entry
 * (src/data/image.c, image_bmp.c): libjpeg-turbo, libpng, giflib and our
 * BMP reader behind dt_image_decode.
 *
 * Any input must decode into an image of the asked channels within the
 * pixel limit, or fail with DT_DATA (or DT_NOMEM) and a message; never
 * crash, read out of bounds or leak. Each input is tried in 1, 3 and 4
 * channels, and at full and check-only scale. The resampler then reads
 * the whole decoded image once.
 * Run: make build-fuzz/fuzz_image && build-fuzz/fuzz_image tests/fuzz/corpus/fuzz_image */
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "data/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* the first byte picks the channels and the scale */
	if (size < 1)
		return 0;
	static const int channels[3] = { 1, 3, 4 };
	const int ch = channels[data[0] % 3], check_only = (data[0] >> 2) & 1;
	struct dt_image im;
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st = dt_image_decode(data + 1, size - 1, ch, check_only, &im, &err);
	if (st == DT_OK) {
		DT_ASSERT(im.channels == ch && im.height >= 1 && im.width >= 1);
		DT_ASSERT((uint64_t)im.height * (uint64_t)im.width <= DT_IMAGE_MAX_PIXELS);
		uint8_t out[7 * 5 * 4];
		struct dt_image_window w = dt_image_aspect_window(im.height, im.width, 7, 5);
		dt_image_resample(&im, w, data[0] & 8, 7, 5, out);
		dt_image_release(&im);
	} else {
		DT_ASSERT(st == DT_DATA || st == DT_NOMEM);
		DT_ASSERT(err.msg[0] != '\0');
		DT_ASSERT(im.pixels == NULL);
	}
	return 0;
}
