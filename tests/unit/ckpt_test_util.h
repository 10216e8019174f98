/*
 * ckpt_test_util.h — helpers shared by the checkpoint tests
 * (tests/unit/test_checkpoint*.c): a small model with random parameters and
 * optimizer slots, saving it at a step, reading and damaging files, and
 * capturing this process's log.
 */
#ifndef DT_CKPT_TEST_UTIL_H
#define DT_CKPT_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "nn/hparams.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "train/checkpoint.h"

/* A small model (mlp on 8x8x1 inputs, 3 classes) with Adam, params and slots random. */
struct small {
	struct dt_hparams hp;
	struct dt_model *m;
	struct dt_optimizer opt;
	struct dt_ckpt_contents c;
};

/* mlp_base on side x side x 1 inputs, 3 classes, `optimizer`, slots random. */
void small_init(struct small *s, int side, const char *optimizer, uint64_t seed);
void small_release(struct small *s);
/* Saves s at `step` into dir (rng, pipeline position derived from step). */
void save_step(const char *dir, struct small *s, int64_t step, int keep);
/* The whole file (heap, caller frees). */
char *slurp(const char *path, size_t *len);
/* XORs 0x10 into the byte `at_from_end` bytes before the end of the file. */
void flip_byte(const char *path, long at_from_end);
/* Captures this process's stderr (the log) between the two calls; the
 * second returns what was written (heap, caller frees). */
void capture_start(void);
char *capture_end(void);

#endif
