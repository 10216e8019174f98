/*
 * tensor.h — a float array with a shape, as the kernels and layers see it.
 *
 * A `struct dt_tensor` never owns its data: it is a view into a buffer that
 * someone else allocated (a model's flat parameter buffer, an activation
 * buffer, a test's array). Data is dense and row-major; the last dimension
 * is contiguous. Images are NHWC, (B, H, W, C).
 *
 * The struct is transparent because kernels walk the data directly.
 */
#ifndef DT_TENSOR_TENSOR_H
#define DT_TENSOR_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define DT_TENSOR_MAX_DIMS 4

/* Element types of the tensors a model reads: float features and targets,
 * int32 token ids and class labels. */
enum dt_dtype { DT_FLOAT32, DT_INT32 };
/* "float32", "int32". */
const char *dt_dtype_name(enum dt_dtype t);

struct dt_tensor {
	float *data;                        /* borrowed, (shape[0], ..., shape[ndim-1]) */
	int ndim;                           /* 0 (a scalar) .. DT_TENSOR_MAX_DIMS */
	int64_t shape[DT_TENSOR_MAX_DIMS];  /* each >= 0 */
};

/* A view of `data` with the given shape (ndim <= DT_TENSOR_MAX_DIMS). */
struct dt_tensor dt_tensor_view(float *data, int ndim, const int64_t *shape);
/* Number of elements: the product of the dimensions (1 for a scalar). */
size_t dt_tensor_count(const struct dt_tensor *t);
/* Number of elements of a shape given as an array. */
size_t dt_shape_count(int ndim, const int64_t *shape);
/* Writes the shape as "(64, 28, 28, 1)" into buf (truncated to cap). */
void dt_shape_format(char *buf, size_t cap, int ndim, const int64_t *shape);

/*
 * Denormal floats (below 1.2e-38) make every multiply that touches them
 * take a slow microcode path on x86, and training produces them: softmax
 * probabilities of classes the model is sure are wrong underflow into them
 * and flow back through every matmul, and Adam's second moment decays into
 * them (measured: 15% of a Fashion-MNIST cnn run's time). Like TensorFlow's
 * compute threads, the model and optimizer entry points flush them to zero
 * (FTZ and DAZ in MXCSR) for the duration of the call and then restore the
 * caller's mode. Results stay deterministic. A no-op without SSE.
 */
struct dt_fp_mode {
	unsigned saved;
};
/* Turns flushing on in the calling thread; returns the mode to restore. */
struct dt_fp_mode dt_fp_flush_denormals(void);
void dt_fp_restore(struct dt_fp_mode mode);

#endif
