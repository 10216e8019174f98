/*
 * image_folder.h — a folder of images as Keras's image_dataset_from_directory
 * reads it (labels "inferred", label_mode "int").
 *
 *   DIR/<class>/.../<name>.{jpg,jpeg,png,bmp,gif}   (extension in any case)
 *
 * Classes are the sub-directories of DIR sorted by name (bytewise, so
 * "Roses" < "daisy"), class i being label i; names starting with '.' are
 * skipped (Keras would make ".ipynb_checkpoints" a class). Each class's
 * files are found recursively and sorted by their path. Other files are
 * ignored, as Keras ignores them. What a file holds is decided by its
 * bytes, not its extension (image.h).
 *
 * The split: the whole list in a seeded random order, the last
 * floor(validation_split * N) being the test split (Keras's validation
 * subset), the rest the training split; both keep the folder's order.
 *
 * Loading a split checks every one of its files by decoding it (JPEGs at
 * 1/8 scale, which still reads every byte) on --data_threads threads. A
 * file that fails is named with the decoder's reason and, by
 * --bad_images, fails the load (DT_DATA) or is left out with a warning.
 * Pixels are not kept: the input pipeline decodes each example again per
 * batch on its threads (dt_image_files_read), resizes it bilinearly to
 * (height, width) — first cropping the centre to the output's aspect
 * ratio with crop_to_aspect_ratio — and applies the random flip and crop
 * of the training split, so memory stays at one batch of pixels.
 */
#ifndef DT_DATA_IMAGE_FOLDER_H
#define DT_DATA_IMAGE_FOLDER_H

#include <stdint.h>
#include "base/err.h"

struct dt_image_files {
	uint32_t count;
	char **paths;            /* (count), owned */
	int height, width, channels; /* of every example after resizing */
	int crop_to_aspect_ratio;
	int random_flip;         /* the training split only */
	float random_crop;       /* fraction of each side kept; 0: none */
	int augment;             /* 1 for the training split: random flip and crop place */
	int threads;             /* decoding threads the pipeline uses */
	uint64_t seed;           /* augmentation draws come from it */
};

/* Reads, decodes and resizes example i into out (height, width, channels).
 * Augmentation draws depend only on (seed, epoch, i), so prefetch, threads
 * and resume give the same pixels. Unreadable or corrupt → DT_IO/DT_DATA
 * naming the file, with out zeroed. */
enum dt_status dt_image_files_read(const struct dt_image_files *f, uint32_t i, int64_t epoch, uint8_t *out,
				   struct dt_err *err) DT_MUST_CHECK;
void dt_image_files_free(struct dt_image_files *f);

#endif
