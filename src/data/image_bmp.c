/*
 * image_bmp.c — the BMP reader and the GIF decoder (through giflib).
 *
 * BMP byte layout (little-endian), as read here:
 *   1. bytes 0-1    "BM"
 *   2. bytes 10-13  offset of the pixel rows from the start of the file
 *   3. bytes 14-17  size of the info header: 40, 52, 56, 108 or 124
 *                   (the 12-byte OS/2 header is refused)
 *   4. bytes 18-25  width, height (int32; a negative height: rows top-down)
 *   5. bytes 26-29  planes (1), bits per pixel (8, 24 or 32)
 *   6. bytes 30-33  compression: 0 (none), or 3 (bit fields) for 32 bits
 *                   with the masks R 00ff0000, G 0000ff00, B 000000ff
 *   7. bytes 46-49  palette entries for 8 bits (0: 256)
 *   8. the palette  after the info header, 4 bytes (B, G, R, 0) an entry
 *   9. the rows     bottom-up unless the height is negative, each padded
 *                   to 4 bytes; pixels B,G,R (24) or B,G,R,A (32)
 * Everything is checked against the buffer before it is read; anything
 * else (RLE, 1/4/16 bits, other masks) is refused with what it is.
 *
 * GIF: the first frame drawn on the logical screen (transparent and
 * uncovered pixels zero), as tf.io.decode_image reads a GIF for Keras.
 * The records are walked one at a time rather than with DGifSlurp, so a
 * frame's size is checked against DT_IMAGE_MAX_PIXELS before giflib
 * allocates it.
 */
#include "data/image.h"

#include <stdlib.h>
#include <string.h>

#include <gif_lib.h>

#include "base/alloc.h"

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

enum dt_status dt__image_decode_bmp(const uint8_t *buf, size_t len, int channels, struct dt_image *out,
				    struct dt_err *err)
{
	if (len < 14 + 40)
		return dt_err_set(err, DT_DATA, "corrupt BMP: %zu bytes, shorter than its 54-byte headers", len);
	uint32_t data_off = le32(buf + 10), hsize = le32(buf + 14);
	if (hsize == 12)
		return dt_err_set(err, DT_DATA, "BMP with the OS/2 12-byte header is not supported");
	if (hsize != 40 && hsize != 52 && hsize != 56 && hsize != 108 && hsize != 124)
		return dt_err_set(err, DT_DATA, "corrupt BMP: info header of %u bytes (40, 52, 56, 108 or 124)", hsize);
	if (14 + (size_t)hsize > len)
		return dt_err_set(err, DT_DATA, "corrupt BMP: the %u-byte info header runs past the %zu-byte file", hsize,
				  len);
	int32_t w = (int32_t)le32(buf + 18), h = (int32_t)le32(buf + 22);
	uint16_t planes = le16(buf + 26), bpp = le16(buf + 28);
	uint32_t comp = le32(buf + 30), colors = le32(buf + 46);
	if (planes != 1)
		return dt_err_set(err, DT_DATA, "corrupt BMP: %u planes (must be 1)", planes);
	if (bpp != 8 && bpp != 24 && bpp != 32)
		return dt_err_set(err, DT_DATA, "BMP with %u bits per pixel is not supported (8, 24 or 32)", bpp);
	if (comp == 3 && bpp == 32) {
		/* The masks follow a 40-byte header, or sit inside a longer one. */
		if (14 + 40 + 12 > (size_t)len)
			return dt_err_set(err, DT_DATA, "corrupt BMP: bit-field masks missing");
		const uint8_t *m = buf + 14 + 40;
		if (le32(m) != 0x00ff0000u || le32(m + 4) != 0x0000ff00u || le32(m + 8) != 0x000000ffu)
			return dt_err_set(err, DT_DATA, "BMP with bit-field masks %08x %08x %08x is not supported "
					  "(only 00ff0000 0000ff00 000000ff)", le32(m), le32(m + 4), le32(m + 8));
	} else if (comp != 0) {
		return dt_err_set(err, DT_DATA, "BMP with compression %u at %u bits is not supported (uncompressed only)",
				  comp, bpp);
	}
	if (w <= 0 || h == 0 || h == INT32_MIN)
		return dt_err_set(err, DT_DATA, "corrupt BMP: size %dx%d", w, h);
	const int top_down = h < 0;
	const uint64_t uh = (uint64_t)(top_down ? -(int64_t)h : h), uw = (uint64_t)w;
	if (uh * uw > DT_IMAGE_MAX_PIXELS)
		return dt__image_alloc(out, uh, uw, channels, "BMP", err);

	uint8_t palette[256][3];
	if (bpp == 8) {
		if (colors == 0)
			colors = 256;
		if (colors > 256)
			return dt_err_set(err, DT_DATA, "corrupt BMP: %u palette entries (at most 256)", colors);
		size_t pal_off = 14 + (size_t)hsize;
		if (pal_off + 4 * (size_t)colors > len || pal_off + 4 * (size_t)colors > data_off)
			return dt_err_set(err, DT_DATA, "corrupt BMP: the %u-entry palette runs past the pixel data",
					  colors);
		memset(palette, 0, sizeof(palette));
		for (uint32_t i = 0; i < colors; i++) {
			const uint8_t *e = buf + pal_off + 4 * i;
			palette[i][0] = e[2];
			palette[i][1] = e[1];
			palette[i][2] = e[0];
		}
	}
	const uint64_t stride = (uw * bpp + 31) / 32 * 4;
	if (data_off > len || stride * uh > len - data_off)
		return dt_err_set(err, DT_DATA, "corrupt BMP: %llu rows of %llu bytes from offset %u need more than "
				  "the file's %zu bytes", (unsigned long long)uh, (unsigned long long)stride, data_off, len);
	const int from = bpp == 32 ? 4 : 3;
	struct dt_image raw = { 0 };
	enum dt_status st = dt__image_alloc(&raw, uh, uw, from, "BMP", err);
	if (st)
		return st;
	for (uint64_t y = 0; y < uh; y++) {
		const uint8_t *row = buf + data_off + stride * (top_down ? y : uh - 1 - y);
		uint8_t *dst = raw.pixels + y * uw * (uint64_t)from;
		for (uint64_t x = 0; x < uw; x++, dst += from) {
			if (bpp == 8) {
				uint8_t v = row[x];
				if (v >= colors) {
					dt_image_release(&raw);
					return dt_err_set(err, DT_DATA, "corrupt BMP: colour index %u beyond the %u-entry "
							  "palette", v, colors);
				}
				memcpy(dst, palette[v], 3);
			} else {
				const uint8_t *p = row + x * (uint64_t)(bpp / 8);
				dst[0] = p[2];
				dst[1] = p[1];
				dst[2] = p[0];
				if (bpp == 32)
					dst[3] = p[3];
			}
		}
	}
	if ((st = dt__image_alloc(out, uh, uw, channels, "BMP", err))) {
		dt_image_release(&raw);
		return st;
	}
	dt_image_convert(out->pixels, channels, raw.pixels, from, (size_t)(uh * uw));
	dt_image_release(&raw);
	return DT_OK;
}

/* ---- GIF ----------------------------------------------------------------- */

struct gif_src {
	const uint8_t *buf;
	size_t len, pos;
};

static int gif_read(GifFileType *g, GifByteType *dst, int n)
{
	struct gif_src *s = g->UserData;
	size_t k = s->len - s->pos;
	if (n < 0)
		return 0;
	if (k > (size_t)n)
		k = (size_t)n;
	memcpy(dst, s->buf + s->pos, k);
	s->pos += k;
	return (int)k;
}

static enum dt_status gif_fail(GifFileType *g, const char *what, struct dt_err *err)
{
	const char *why = GifErrorString(g->Error);
	return dt_err_set(err, DT_DATA, "corrupt GIF: %s: %s", what, why ? why : "unknown error");
}

/* Reads records up to the first frame into *raster (its descriptor in
 * g->Image) and the transparent index of its graphics control block. */
static enum dt_status gif_first_frame(GifFileType *g, uint8_t **raster, int *transparent, struct dt_err *err)
{
	for (int records = 0; records < 1 << 16; records++) {
		GifRecordType rt;
		if (DGifGetRecordType(g, &rt) == GIF_ERROR)
			return gif_fail(g, "record", err);
		if (rt == EXTENSION_RECORD_TYPE) {
			int code;
			GifByteType *ext;
			if (DGifGetExtension(g, &code, &ext) == GIF_ERROR)
				return gif_fail(g, "extension", err);
			if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4)
				*transparent = (ext[1] & 1) ? ext[4] : -1;
			for (int blocks = 0; ext; blocks++) {
				if (blocks > 1 << 16 || DGifGetExtensionNext(g, &ext) == GIF_ERROR)
					return gif_fail(g, "extension block", err);
			}
			continue;
		}
		if (rt != IMAGE_DESC_RECORD_TYPE)
			return dt_err_set(err, DT_DATA, "corrupt GIF: no frame before the end of the file");
		if (DGifGetImageDesc(g) == GIF_ERROR)
			return gif_fail(g, "frame descriptor", err);
		const uint64_t w = (uint64_t)g->Image.Width, h = (uint64_t)g->Image.Height;
		struct dt_image fr = { 0 };
		enum dt_status st = dt__image_alloc(&fr, h, w, 1, "GIF frame", err);
		if (st)
			return st;
		static const int start[4] = { 0, 4, 2, 1 }, step[4] = { 8, 8, 4, 2 };
		const int passes = g->Image.Interlace ? 4 : 1;
		for (int p = 0; p < passes; p++) {
			for (uint64_t y = g->Image.Interlace ? (uint64_t)start[p] : 0; y < h;
			     y += g->Image.Interlace ? (uint64_t)step[p] : 1) {
				if (DGifGetLine(g, fr.pixels + y * w, (int)w) == GIF_ERROR) {
					dt_image_release(&fr);
					return gif_fail(g, "pixels", err);
				}
			}
		}
		*raster = fr.pixels;
		return DT_OK;
	}
	return dt_err_set(err, DT_DATA, "corrupt GIF: more than 65536 records before the first frame");
}

enum dt_status dt__image_decode_gif(const uint8_t *buf, size_t len, int channels, struct dt_image *out,
				    struct dt_err *err)
{
	struct gif_src src = { buf, len, 0 };
	int code = 0;
	GifFileType *g = DGifOpen(&src, gif_read, &code);
	if (!g) {
		const char *why = GifErrorString(code);
		return dt_err_set(err, DT_DATA, "corrupt GIF: %s", why ? why : "cannot open");
	}
	uint8_t *raster = NULL;
	int transparent = -1;
	enum dt_status st = gif_first_frame(g, &raster, &transparent, err);
	struct dt_image rgba = { 0 };
	if (!st) {
		const ColorMapObject *cm = g->Image.ColorMap ? g->Image.ColorMap : g->SColorMap;
		uint64_t sw = (uint64_t)g->SWidth, sh = (uint64_t)g->SHeight;
		if (sw == 0 || sh == 0) { /* no screen size: the frame's own */
			sw = (uint64_t)g->Image.Width;
			sh = (uint64_t)g->Image.Height;
		}
		if (!cm || !cm->Colors)
			st = dt_err_set(err, DT_DATA, "corrupt GIF: the first frame has no colour table");
		else if (!(st = dt__image_alloc(&rgba, sh, sw, 4, "GIF", err)))
			memset(rgba.pixels, 0, (size_t)(sw * sh * 4));
		const uint64_t fw = (uint64_t)g->Image.Width, fh = (uint64_t)g->Image.Height;
		const uint64_t left = (uint64_t)g->Image.Left, top = (uint64_t)g->Image.Top;
		for (uint64_t y = 0; !st && y < fh && top + y < sh; y++) {
			for (uint64_t x = 0; x < fw && left + x < sw; x++) {
				int v = raster[y * fw + x];
				if (v == transparent)
					continue;
				if (v >= cm->ColorCount) {
					st = dt_err_set(err, DT_DATA, "corrupt GIF: colour index %d beyond the %d-entry "
							"colour table", v, cm->ColorCount);
					break;
				}
				uint8_t *d = rgba.pixels + ((top + y) * sw + left + x) * 4;
				d[0] = cm->Colors[v].Red;
				d[1] = cm->Colors[v].Green;
				d[2] = cm->Colors[v].Blue;
				d[3] = 255;
			}
		}
	}
	free(raster);
	DGifCloseFile(g, &code);
	if (!st && !(st = dt__image_alloc(out, (uint64_t)rgba.height, (uint64_t)rgba.width, channels, "GIF", err)))
		dt_image_convert(out->pixels, channels, rgba.pixels, 4, (size_t)rgba.height * (size_t)rgba.width);
	dt_image_release(&rgba);
	return st;
}
