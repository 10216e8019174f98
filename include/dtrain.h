/*
 * dtrain.h — the public C API of libdtrain.
 *
 * (Filled in as the library grows; see docs/API.md.)
 */
#ifndef DTRAIN_H
#define DTRAIN_H

#define DTRAIN_VERSION "0.1.0"

#if defined(__GNUC__)
#define DTRAIN_API __attribute__((visibility("default")))
#else
#define DTRAIN_API
#endif

DTRAIN_API const char *dtrain_version(void);

#endif
