/*
 * image.h — image files held in memory: sniffing, decoding, resampling.
 *
 * Formats, recognized by their first bytes (never by the file name):
 *   JPEG  FF D8 FF               libjpeg-turbo (Debian's libjpeg62-turbo)
 *   PNG   89 50 4E 47 0D 0A 1A 0A libpng 1.6's simplified API
 *   GIF   "GIF87a" / "GIF89a"     giflib; the first frame on the logical
 *                                 screen, as tf.io.decode_image reads it
 *   BMP   "BM"                    our own strict reader (image_bmp.c):
 *                                 uncompressed 8-bit (palette), 24 and 32-bit
 *
 * A decoded image is (H, W, C) uint8, C being what the caller asks for
 * (1 grey, 3 RGB, 4 RGBA) whatever the file holds: grey is replicated to
 * RGB, RGB becomes grey by ITU-R 601 luma (0.299, 0.587, 0.114, as
 * tf.image.rgb_to_grayscale), an alpha channel is dropped without
 * compositing (as TensorFlow's decoders do with channels=3) and a missing
 * one is 255.
 *
 * Hostile input: every decoder works on a bounded buffer, refuses images
 * of more than DT_IMAGE_MAX_PIXELS before allocating, and turns each
 * library error (libjpeg's error_exit, libpng's and giflib's codes) into
 * a DT_DATA error with the library's own reason. A JPEG that ends early is
 * an error (libjpeg only warns and pads it with grey); other libjpeg
 * warnings (extraneous bytes) are tolerated, as TensorFlow and PIL do.
 */
#ifndef DT_DATA_IMAGE_H
#define DT_DATA_IMAGE_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

/* Larger images are refused before decoding: 64 megapixels. */
#define DT_IMAGE_MAX_PIXELS ((uint64_t)1 << 26)

enum dt_image_format { DT_IMAGE_UNKNOWN, DT_IMAGE_JPEG, DT_IMAGE_PNG, DT_IMAGE_GIF, DT_IMAGE_BMP };

/* The format of a file from its first bytes; DT_IMAGE_UNKNOWN if none. */
enum dt_image_format dt_image_sniff(const uint8_t *buf, size_t len);
const char *dt_image_format_name(enum dt_image_format f);

struct dt_image {
	int height, width, channels;
	uint8_t *pixels; /* (height, width, channels), owned; dt_image_release */
};

/* Decodes the file in buf[0, len) into `channels` (1, 3 or 4) channels.
 * `check_only` may decode a JPEG at 1/8 scale: every byte of the stream is
 * still read and checked, which is what a validation pass needs, at a
 * fraction of the cost. Not an image → DT_DATA naming the first bytes;
 * corrupt → DT_DATA with the decoder's reason. */
enum dt_status dt_image_decode(const uint8_t *buf, size_t len, int channels, int check_only, struct dt_image *out,
			       struct dt_err *err) DT_MUST_CHECK;
void dt_image_release(struct dt_image *im);

/* Converts n pixels of `from` channels (1 grey, 2 grey+alpha, 3 RGB,
 * 4 RGBA) to `to` channels (1, 3 or 4) by the rules above; dst and src
 * must not overlap. */
void dt_image_convert(uint8_t *dst, int to, const uint8_t *src, int from, size_t n);

/* A window of a source image in its pixel coordinates. */
struct dt_image_window {
	float y, x, h, w; /* top, left, height, width; inside the image */
};

/* Bilinear resize of `win` of `src` to (out_h, out_w, src->channels) at
 * `dst`, with TensorFlow's half-pixel centres (tf.image.resize, bilinear,
 * no antialiasing); `flip` mirrors it left to right. */
void dt_image_resample(const struct dt_image *src, struct dt_image_window win, int flip, int out_h, int out_w,
		       uint8_t *dst);

/* The largest centred window of (h, w) with the aspect ratio of
 * (out_h, out_w), in whole pixels as Keras's crop_to_aspect_ratio does. */
struct dt_image_window dt_image_aspect_window(int h, int w, int out_h, int out_w);

/* Shared by image.c's decoders (not for callers). */
enum dt_status dt__image_decode_bmp(const uint8_t *buf, size_t len, int channels, struct dt_image *out,
				    struct dt_err *err);
enum dt_status dt__image_decode_gif(const uint8_t *buf, size_t len, int channels, struct dt_image *out,
				    struct dt_err *err);
enum dt_status dt__image_alloc(struct dt_image *out, uint64_t h, uint64_t w, int channels, const char *format,
			       struct dt_err *err);

#endif
