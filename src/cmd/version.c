#include <stdio.h>

#include "tensor/blas.h"
#include <jansson.h>
#include <yaml.h>
#include <zlib.h>

#include "cmd/cmd.h"
#include "dtrain.h"

int dt_cmd_version(int argc, char **argv)
{
	struct dt_option opts[] = { DT_OPT_END };
	struct dt_args args;
	int code;
	if (!dt_cmd_parse(opts, argc, argv, "dtrain version", &args, &code))
		return code;
	dt_args_release(&args);
	printf("dtrain %s\n", DTRAIN_VERSION);
	struct dt_blas_info blas = dt_blas_info();
	printf("blas: %s (core %s, %s)\n", blas.config, blas.core, blas.core_source);
	printf("zlib %s, jansson %s, libyaml %s\n", zlibVersion(), JANSSON_VERSION, yaml_get_version_string());
	return 0;
}
