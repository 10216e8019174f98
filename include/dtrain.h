/*
 * dtrain.h — the public C API of libdtrain.
 *
 * (Filled in as the library grows; see docs/API.md.)
 */
#ifndef DTRAIN_H
#define DTRAIN_H

#define DTRAIN_VERSION "0.1.0"

#endif
