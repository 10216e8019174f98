/*
 * dt_test.h — dtrain's test harness: registration, assertions, helpers.
 *
 * Why our own runner and not Criterion: docs/TESTING.md. In short: ~400
 * lines give us exactly what the project needs (a process per test, a
 * timeout per test, a temp dir per test removed afterwards, a process group
 * per test so stray children are killed, parallel runs, one summary line)
 * with no extra dependency and no behaviour we cannot read.
 *
 * A test:
 *     DT_TEST(crc32c, check_value) {
 *         DT_CHECK_UINT_EQ(dt_crc32c("123456789", 9), 0xE3069283u);
 *     }
 *     DT_TEST_TIMEOUT(train, mlp_learns, 120) { ... }   // seconds
 *
 * Each test runs in its own forked process, in its own process group, with
 * an empty temporary directory (dt_test_tmpdir()) that is removed after it.
 * A failed check prints file:line and both sides, then ends the test.
 * DT_SKIP("reason") ends the test as skipped; the reason is printed.
 */
#ifndef DT_TEST_H
#define DT_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef void (*dt_test_fn)(void);

void dt_test_register(const char *suite, const char *name, dt_test_fn fn, int timeout_s);

#define DT__TEST(suite, name, timeout)                                            \
	static void dt_test_##suite##__##name(void);                              \
	__attribute__((constructor)) static void dt_test_reg_##suite##__##name(void) \
	{                                                                         \
		dt_test_register(#suite, #name, dt_test_##suite##__##name, timeout); \
	}                                                                         \
	static void dt_test_##suite##__##name(void)

#define DT_TEST(suite, name) DT__TEST(suite, name, 60)
#define DT_TEST_TIMEOUT(suite, name, seconds) DT__TEST(suite, name, seconds)

_Noreturn void dt_test_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
_Noreturn void dt_test_skip(const char *reason);

#define DT_SKIP(reason) dt_test_skip(reason)

#define DT_CHECK(cond)                                                        \
	do {                                                                  \
		if (!(cond))                                                  \
			dt_test_fail(__FILE__, __LINE__, "check failed: %s", #cond); \
	} while (0)

#define DT_CHECK_INT_EQ(a, b)                                                             \
	do {                                                                              \
		long long dt_a_ = (long long)(a), dt_b_ = (long long)(b);                 \
		if (dt_a_ != dt_b_)                                                       \
			dt_test_fail(__FILE__, __LINE__, "%s == %s\n    left:  %lld\n    right: %lld", \
				     #a, #b, dt_a_, dt_b_);                               \
	} while (0)

#define DT_CHECK_UINT_EQ(a, b)                                                            \
	do {                                                                              \
		unsigned long long dt_a_ = (unsigned long long)(a), dt_b_ = (unsigned long long)(b); \
		if (dt_a_ != dt_b_)                                                       \
			dt_test_fail(__FILE__, __LINE__, "%s == %s\n    left:  %llu (0x%llx)\n    right: %llu (0x%llx)", \
				     #a, #b, dt_a_, dt_a_, dt_b_, dt_b_);                 \
	} while (0)

#define DT_CHECK_NEAR(a, b, tol)                                                          \
	do {                                                                              \
		double dt_a_ = (double)(a), dt_b_ = (double)(b), dt_t_ = (double)(tol);   \
		if (!(fabs(dt_a_ - dt_b_) <= dt_t_))                                      \
			dt_test_fail(__FILE__, __LINE__, "%s ≈ %s (tolerance %g)\n    left:  %.9g\n    right: %.9g", \
				     #a, #b, dt_t_, dt_a_, dt_b_);                        \
	} while (0)

#define DT_CHECK_STR_EQ(a, b)                                                             \
	do {                                                                              \
		const char *dt_a_ = (a), *dt_b_ = (b);                                    \
		if (!dt_a_ || !dt_b_ || strcmp(dt_a_, dt_b_) != 0)                        \
			dt_test_fail(__FILE__, __LINE__, "%s == %s\n    left:  \"%s\"\n    right: \"%s\"", \
				     #a, #b, dt_a_ ? dt_a_ : "(null)", dt_b_ ? dt_b_ : "(null)"); \
	} while (0)

#define DT_CHECK_CONTAINS(hay, needle)                                                    \
	do {                                                                              \
		const char *dt_h_ = (hay), *dt_n_ = (needle);                             \
		if (!dt_h_ || !strstr(dt_h_, dt_n_))                                      \
			dt_test_fail(__FILE__, __LINE__, "%s contains %s\n    text:   \"%s\"\n    wanted: \"%s\"", \
				     #hay, #needle, dt_h_ ? dt_h_ : "(null)", dt_n_);     \
	} while (0)

/* Checks that a dtrain call returned DT_OK; prints the error message if not.
 * `errp` is the struct dt_err * the call filled (never NULL). */
#define DT_CHECK_OK(expr, errp)                                                           \
	do {                                                                              \
		int dt_st_ = (int)(expr);                                                 \
		if (dt_st_ != 0)                                                          \
			dt_test_fail(__FILE__, __LINE__, "%s returned status %d: %s", #expr, \
				     dt_st_, (errp)->msg);                                \
	} while (0)

/* The test's private temporary directory (exists, empty at start). */
const char *dt_test_tmpdir(void);
/* Writes "<tmpdir>/<name>" into buf and returns buf. */
char *dt_test_path(char *buf, size_t cap, const char *name);
/* Writes a file (for fixtures); fails the test on error. */
void dt_test_write_file(const char *path, const void *data, size_t len);

/* Result of running a program with dt_test_run. */
struct dt_run {
	int exit_code;   /* exit status, or 128+signal if killed */
	int timed_out;
	char *out;       /* captured stdout, NUL-terminated, owned */
	char *err;       /* captured stderr, NUL-terminated, owned */
	double seconds;
};

/* Runs argv (argv[0] may be "dtrain", replaced by $DTRAIN_BIN) with extra
 * environment entries "K=V" (NULL-terminated, may be NULL), stdin from
 * /dev/null, killing it after timeout_s. */
void dt_test_run(struct dt_run *r, const char *const *argv, const char *const *env, double timeout_s);
void dt_run_release(struct dt_run *r);
/* Path of the dtrain binary under test. */
const char *dt_test_dtrain_bin(void);

#endif
