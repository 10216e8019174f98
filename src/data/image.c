/*
 * image.c — sniffing, the JPEG and PNG decoders, channel conversion and
 * bilinear resampling. GIF and BMP live in image_bmp.c (see image.h).
 */
#include "data/image.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "base/alloc.h"

enum dt_image_format dt_image_sniff(const uint8_t *b, size_t len)
{
	static const uint8_t png_magic[8] = { 0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a };
	if (len >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
		return DT_IMAGE_JPEG;
	if (len >= 8 && memcmp(b, png_magic, 8) == 0)
		return DT_IMAGE_PNG;
	if (len >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0))
		return DT_IMAGE_GIF;
	if (len >= 2 && b[0] == 'B' && b[1] == 'M')
		return DT_IMAGE_BMP;
	return DT_IMAGE_UNKNOWN;
}

const char *dt_image_format_name(enum dt_image_format f)
{
	switch (f) {
	case DT_IMAGE_JPEG: return "JPEG";
	case DT_IMAGE_PNG: return "PNG";
	case DT_IMAGE_GIF: return "GIF";
	case DT_IMAGE_BMP: return "BMP";
	case DT_IMAGE_UNKNOWN: break;
	}
	return "unknown";
}

void dt_image_release(struct dt_image *im)
{
	if (!im)
		return;
	free(im->pixels);
	memset(im, 0, sizeof(*im));
}

enum dt_status dt__image_alloc(struct dt_image *out, uint64_t h, uint64_t w, int channels, const char *format,
			       struct dt_err *err)
{
	if (h == 0 || w == 0)
		return dt_err_set(err, DT_DATA, "%s image has no pixels (%llux%llu)", format, (unsigned long long)w,
				  (unsigned long long)h);
	if (h > DT_IMAGE_MAX_PIXELS || w > DT_IMAGE_MAX_PIXELS || h * w > DT_IMAGE_MAX_PIXELS)
		return dt_err_set(err, DT_DATA, "%s image of %llux%llu pixels is larger than the limit of %llu pixels",
				  format, (unsigned long long)w, (unsigned long long)h,
				  (unsigned long long)DT_IMAGE_MAX_PIXELS);
	void *p;
	enum dt_status st = dt_try_malloc(&p, (size_t)(h * w) * (size_t)channels, err);
	if (st)
		return st;
	out->pixels = p;
	out->height = (int)h;
	out->width = (int)w;
	out->channels = channels;
	return DT_OK;
}

void dt_image_convert(uint8_t *restrict dst, int to, const uint8_t *restrict src, int from, size_t n)
{
	if (to == from) {
		memcpy(dst, src, n * (size_t)to);
		return;
	}
	for (size_t i = 0; i < n; i++, src += from, dst += to) {
		int grey = from <= 2;
		uint8_t r = src[0], g = grey ? src[0] : src[1], b = grey ? src[0] : src[2];
		uint8_t a = from == 2 ? src[1] : from == 4 ? src[3] : 255;
		if (to == 1) {
			dst[0] = grey ? r : (uint8_t)((77u * r + 150u * g + 29u * b + 128u) >> 8);
		} else {
			dst[0] = r;
			dst[1] = g;
			dst[2] = b;
			if (to == 4)
				dst[3] = a;
		}
	}
}

/* ---- JPEG ---------------------------------------------------------------- */

struct jpeg_fail {
	struct jpeg_error_mgr mgr;
	jmp_buf jump;
	char reason[JMSG_LENGTH_MAX];
};

static void jpeg_fail_exit(j_common_ptr c)
{
	struct jpeg_fail *f = (struct jpeg_fail *)c->err;
	c->err->format_message(c, f->reason);
	longjmp(f->jump, 1);
}

/* Warnings (level -1) are tolerated except an early end of the data, which
 * libjpeg would pad with grey: that file is cut short, so it is an error. */
static void jpeg_message(j_common_ptr c, int level)
{
	if (level == -1 && c->err->msg_code == JWRN_JPEG_EOF)
		jpeg_fail_exit(c);
	if (level == -1)
		c->err->num_warnings++;
}

/* Everything setjmp's frame must not hold in registers lives here. */
struct jpeg_job {
	struct jpeg_decompress_struct cinfo;
	struct jpeg_fail fail;
	struct dt_image im;
	uint8_t *row;
};

static enum dt_status decode_jpeg(const uint8_t *buf, size_t len, int channels, int check_only,
				  struct dt_image *out, struct dt_err *err)
{
	struct jpeg_job *j = dt_xcalloc(1, sizeof(*j));
	enum dt_status st = DT_OK;
	j->cinfo.err = jpeg_std_error(&j->fail.mgr);
	j->fail.mgr.error_exit = jpeg_fail_exit;
	j->fail.mgr.emit_message = jpeg_message;
	if (setjmp(j->fail.jump)) {
		st = dt_err_set(err, DT_DATA, "corrupt JPEG: %s", j->fail.reason);
		goto done;
	}
	jpeg_create_decompress(&j->cinfo);
	jpeg_mem_src(&j->cinfo, buf, (unsigned long)len);
	jpeg_read_header(&j->cinfo, TRUE);
	/* libjpeg converts YCbCr and grey to either; CMYK/YCCK only to itself. */
	J_COLOR_SPACE cs = j->cinfo.jpeg_color_space;
	if (cs == JCS_CMYK || cs == JCS_YCCK) {
		st = dt_err_set(err, DT_DATA, "CMYK JPEG images are not supported (convert it to RGB)");
		goto done;
	}
	j->cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
	if (check_only) {
		j->cinfo.scale_num = 1;
		j->cinfo.scale_denom = 8;
	}
	if ((uint64_t)j->cinfo.image_width * j->cinfo.image_height > DT_IMAGE_MAX_PIXELS) {
		st = dt__image_alloc(&j->im, j->cinfo.image_height, j->cinfo.image_width, channels, "JPEG", err);
		goto done;
	}
	jpeg_start_decompress(&j->cinfo);
	const int got = j->cinfo.output_components;
	if ((st = dt__image_alloc(&j->im, j->cinfo.output_height, j->cinfo.output_width, channels, "JPEG", err)))
		goto done;
	const size_t w = j->cinfo.output_width;
	j->row = dt_xmallocarray(w, (size_t)got);
	while (j->cinfo.output_scanline < j->cinfo.output_height) {
		uint8_t *dst = j->im.pixels + (size_t)j->cinfo.output_scanline * w * (size_t)channels;
		JSAMPROW rows[1] = { got == channels ? dst : j->row };
		if (jpeg_read_scanlines(&j->cinfo, rows, 1) != 1) {
			st = dt_err_set(err, DT_DATA, "corrupt JPEG: no data for row %u", j->cinfo.output_scanline);
			goto done;
		}
		if (got != channels)
			dt_image_convert(dst, channels, j->row, got, w);
	}
	jpeg_finish_decompress(&j->cinfo);
done:
	jpeg_destroy_decompress(&j->cinfo);
	free(j->row);
	if (st)
		dt_image_release(&j->im);
	else
		*out = j->im;
	free(j);
	return st;
}

/* ---- PNG ----------------------------------------------------------------- */

static enum dt_status decode_png(const uint8_t *buf, size_t len, int channels, struct dt_image *out,
				 struct dt_err *err)
{
	png_image img;
	memset(&img, 0, sizeof(img));
	img.version = PNG_IMAGE_VERSION;
	if (!png_image_begin_read_from_memory(&img, buf, len)) {
		enum dt_status st = dt_err_set(err, DT_DATA, "corrupt PNG: %s", img.message);
		png_image_free(&img);
		return st;
	}
	/* Read grey+alpha or RGBA (8 bits, palettes expanded), then convert:
	 * libpng would composite alpha away, TensorFlow drops it. */
	const int from = (img.format & PNG_FORMAT_FLAG_COLOR) ? 4 : 2;
	img.format = from == 4 ? PNG_FORMAT_RGBA : PNG_FORMAT_GA;
	struct dt_image raw = { 0 };
	enum dt_status st = dt__image_alloc(&raw, img.height, img.width, from, "PNG", err);
	if (st) {
		png_image_free(&img);
		return st;
	}
	if (!png_image_finish_read(&img, NULL, raw.pixels, 0, NULL)) {
		st = dt_err_set(err, DT_DATA, "corrupt PNG: %s", img.message);
		png_image_free(&img);
		dt_image_release(&raw);
		return st;
	}
	png_image_free(&img);
	if ((st = dt__image_alloc(out, (uint64_t)raw.height, (uint64_t)raw.width, channels, "PNG", err))) {
		dt_image_release(&raw);
		return st;
	}
	dt_image_convert(out->pixels, channels, raw.pixels, from, (size_t)raw.height * (size_t)raw.width);
	dt_image_release(&raw);
	return DT_OK;
}

enum dt_status dt_image_decode(const uint8_t *buf, size_t len, int channels, int check_only, struct dt_image *out,
			       struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (channels != 1 && channels != 3 && channels != 4)
		return dt_err_set(err, DT_INTERNAL, "cannot decode into %d channels (1, 3 or 4)", channels);
	switch (dt_image_sniff(buf, len)) {
	case DT_IMAGE_JPEG: return decode_jpeg(buf, len, channels, check_only, out, err);
	case DT_IMAGE_PNG: return decode_png(buf, len, channels, out, err);
	case DT_IMAGE_GIF: return dt__image_decode_gif(buf, len, channels, out, err);
	case DT_IMAGE_BMP: return dt__image_decode_bmp(buf, len, channels, out, err);
	case DT_IMAGE_UNKNOWN: break;
	}
	if (len == 0)
		return dt_err_set(err, DT_DATA, "not an image: the file is empty");
	char head[3 * 8 + 1] = "";
	for (size_t i = 0; i < len && i < 8; i++)
		snprintf(head + 3 * i, sizeof(head) - 3 * i, "%02x ", buf[i]);
	head[strlen(head) - 1] = '\0';
	return dt_err_set(err, DT_DATA,
			  "not an image: it starts with bytes %s, which is no JPEG (ff d8 ff), PNG (89 50 4e 47), "
			  "GIF (GIF87a, GIF89a) or BMP (BM)", head);
}

/* ---- resampling ---------------------------------------------------------- */

struct dt_image_window dt_image_aspect_window(int h, int w, int out_h, int out_w)
{
	/* Keras: crop_height = int(width * target_h / target_w), capped at
	 * height; crop_width likewise; offsets (size - crop) // 2. */
	int64_t ch = (int64_t)w * out_h / out_w, cw = (int64_t)h * out_w / out_h;
	if (ch > h)
		ch = h;
	if (cw > w)
		cw = w;
	if (ch < 1)
		ch = 1;
	if (cw < 1)
		cw = 1;
	return (struct dt_image_window){ (float)((h - ch) / 2), (float)((w - cw) / 2), (float)ch, (float)cw };
}

/* Source coordinate of output index i and its two neighbours and weight. */
static void sample_point(float start, float scale, int i, int n, int *i0, int *i1, float *frac)
{
	float s = start + ((float)i + 0.5f) * scale - 0.5f;
	if (s < 0)
		s = 0;
	if (s > (float)(n - 1))
		s = (float)(n - 1);
	int a = (int)s;
	*i0 = a;
	*i1 = a + 1 < n ? a + 1 : a;
	*frac = s - (float)a;
}

void dt_image_resample(const struct dt_image *src, struct dt_image_window win, int flip, int out_h, int out_w,
		       uint8_t *restrict dst)
{
	const int c = src->channels;
	const size_t stride = (size_t)src->width * (size_t)c;
	const float sy = win.h / (float)out_h, sx = win.w / (float)out_w;
	for (int i = 0; i < out_h; i++) {
		int y0, y1;
		float fy;
		sample_point(win.y, sy, i, src->height, &y0, &y1, &fy);
		const uint8_t *r0 = src->pixels + (size_t)y0 * stride, *r1 = src->pixels + (size_t)y1 * stride;
		uint8_t *out = dst + (size_t)i * (size_t)out_w * (size_t)c;
		for (int j = 0; j < out_w; j++) {
			int x0, x1;
			float fx;
			sample_point(win.x, sx, flip ? out_w - 1 - j : j, src->width, &x0, &x1, &fx);
			for (int k = 0; k < c; k++) {
				float top = r0[x0 * c + k] + fx * (float)(r0[x1 * c + k] - r0[x0 * c + k]);
				float bot = r1[x0 * c + k] + fx * (float)(r1[x1 * c + k] - r1[x0 * c + k]);
				float v = top + fy * (bot - top) + 0.5f;
				out[j * c + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
			}
		}
	}
}
