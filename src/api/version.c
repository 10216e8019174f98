#include "dtrain.h"
const char *dtrain_version(void) { return DTRAIN_VERSION; }
