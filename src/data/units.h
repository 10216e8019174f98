/*
 * units.h — an epoch cut into units of one batch, dealt to trainers that do
 * not step together, and which units they have read: what lets an
 * asynchronous parameter-server checkpoint resume at another trainer count
 * with every example read once per epoch (docs/DATA.md, "Units").
 *
 * Epoch e's order is the whole dataset's, shuffled by (seed, e) as the
 * pipeline's shard 0 of 1 is; unit u is examples [u * B, (u + 1) * B) of it
 * (B the batch size), so an epoch has nu = floor(n / B) units (the rest,
 * fewer than a batch, is not read that epoch, as a pipeline's tail is not).
 *
 * A layout: `trainers` trainers, the first epoch they read (`first`), and a
 * base for some epochs: the units read there before this layout took over
 * (under another trainer count). In epoch e, the units not in e's base, in
 * increasing order, U_e (every unit when e has none), are dealt round-robin:
 * trainer j reads U_e[j], U_e[j + trainers], ...; when its share is read it
 * goes on to epoch e + 1. Its position is (epoch, taken): `taken` units of
 * its share of that epoch read. Without a base, trainer j of M reads units
 * j, j + M, ..., which is the global batches' slice j (pipeline.h).
 *
 * Every trainer's position in a layout gives the units read (the base, and
 * each one's share up to its position): dt_units_merge makes of them the
 * layout for another trainer count, whose base is exactly what was read, so
 * each unit of an epoch is read once across the change.
 *
 * A layout owns its bitmaps. Positions of a trainer that never reported
 * have epoch DT_UNITS_UNKNOWN: it read nothing (it starts at (first, 0)).
 */
#ifndef DT_DATA_UNITS_H
#define DT_DATA_UNITS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define DT_UNITS_UNKNOWN (-1)
#define DT_UNITS_MAX_TRAINERS 65536
#define DT_UNITS_MAX_EPOCHS 64     /* epochs with a base in one layout */

struct dt_units_epoch {
	int64_t epoch;
	int64_t unread;                 /* |U_e| */
	uint8_t *bits;                  /* ((nu + 7) / 8): bit u (byte u / 8, bit u % 8) set: unit u read */
};

struct dt_units_layout {
	int trainers;                   /* 1 .. DT_UNITS_MAX_TRAINERS */
	int64_t nu;                     /* units per epoch, >= 1 */
	int64_t first;                  /* the first epoch read, >= 0 */
	int n;                          /* epochs with a base, 0 .. DT_UNITS_MAX_EPOCHS */
	struct dt_units_epoch *base;     /* (n), increasing epochs, each >= first */
};

struct dt_units_pos {
	int64_t epoch, taken;
};

/* A fresh layout: no base, from epoch 0. */
void dt_units_init(struct dt_units_layout *l, int trainers, int64_t nu);
void dt_units_release(struct dt_units_layout *l);
void dt_units_copy(struct dt_units_layout *dst, const struct dt_units_layout *src);

/* Units trainer j reads in epoch e (its share). */
int64_t dt_units_share(const struct dt_units_layout *l, int j, int64_t epoch);
/* Moves a position past shares fully read (and an unknown one to (first, 0)). */
void dt_units_normalize(const struct dt_units_layout *l, int j, struct dt_units_pos *p);
/* The unit trainer j reads at `taken` of epoch e (taken < its share). With
 * `list` (the unread units of e, as dt_units_unread_list writes them, or NULL
 * when e has no base) it is a lookup. */
int64_t dt_units_at(const struct dt_units_layout *l, int j, int64_t taken, const int64_t *list);
/* The unread units of epoch e in increasing order into out (nu entries);
 * returns 0 when e has no base (U_e is then every unit: no list needed). */
int dt_units_unread_list(const struct dt_units_layout *l, int64_t epoch, int64_t *out);

/* The layout for `trainers` trainers that goes on from `l` where its
 * trainers are (pos: l->trainers positions): its base is every unit read. */
void dt_units_merge(const struct dt_units_layout *l, const struct dt_units_pos *pos, int trainers,
		    struct dt_units_layout *out);

/* The checkpoint's text (CHECKPOINTS.md): "M:nu:first" for the layout,
 * "e:HEX;e:HEX" for its base (lowercase hex of the bitmaps' bytes), and
 * "e:t,e:t" for the M positions ("-1:0" unknown). dt_units_format returns
 * heap strings (the caller frees). dt_units_parse takes what it wrote back,
 * checking everything (a hostile file is refused with DT_CKPT). */
void dt_units_format(const struct dt_units_layout *l, const struct dt_units_pos *pos, char **layout, char **base,
		     char **at);
enum dt_status dt_units_parse(const char *layout, const char *base, const char *at, struct dt_units_layout *out,
			      struct dt_units_pos **pos, struct dt_err *err) DT_MUST_CHECK;

#endif
