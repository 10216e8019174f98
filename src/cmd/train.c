#include "cmd/cmd.h"

int dt_cmd_train(int argc, char **argv)
{
	struct dt_err err = DT_ERR_INIT;
	(void)argc; (void)argv;
	dt_err_set(&err, DT_INTERNAL, "train: being written");
	return dt_cmd_report(&err);
}
