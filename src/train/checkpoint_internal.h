/*
 * checkpoint_internal.h — what checkpoint.c, checkpoint_st.c,
 * checkpoint_state.c and checkpoint_integrity.c share; not for other modules.
 */
#ifndef DT_TRAIN_CHECKPOINT_INTERNAL_H
#define DT_TRAIN_CHECKPOINT_INTERNAL_H

#include "train/checkpoint.h"

/* Opens `path` and parses its header (every layout rule); on success *fd_out
 * is the open file, which the caller closes. */
enum dt_status dt__st_open_fd(const char *path, struct dt_st_file **out, int *fd_out, struct dt_err *err) DT_MUST_CHECK;
/* pread of exactly len bytes at `at`; a short file is DT_CKPT. */
enum dt_status dt__st_read_at(int fd, const char *path, void *buf, size_t len, uint64_t at,
			      struct dt_err *err) DT_MUST_CHECK;

/* dt_ckpt_load that also says whether a failure was a different model (or
 * optimizer): restore does not fall back to older checkpoints for that. */
enum dt_status dt__ckpt_load(const char *path, struct dt_ckpt_contents *into, int *mismatch,
			     struct dt_err *err) DT_MUST_CHECK;

/* The model signature (checkpoint.h, item 4) of the variables file f holds:
 * its tensors but global_step and the optimizer slots, each with its dtype. */
void dt__ckpt_file_signature(const struct dt_st_file *f, char *buf, size_t cap);
/* f's model_signature against `want`; `whose` names want's source in the message. */
enum dt_status dt__ckpt_check_signature(const struct dt_st_file *f, const char *want, const char *whose,
					struct dt_err *err) DT_MUST_CHECK;

/* The length of the variable name in `name` when it is "<variable>/<an
 * optimizer's slot suffix>" (TensorFlow's names: Adam, Adam_1, Momentum,
 * Adagrad); 0 otherwise. */
size_t dt__ckpt_slot_base(const char *name);

/* mkdir -p; DT_IO naming the part that could not be made. */
enum dt_status dt__ckpt_make_dirs(const char *dir, struct dt_err *err) DT_MUST_CHECK;

#endif
