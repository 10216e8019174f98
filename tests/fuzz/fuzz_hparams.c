/* libFuzzer target: the --hparams override parser (nn/hparams.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nn/hparams.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char *text = malloc(size + 1);
	memcpy(text, data, size);
	text[size] = '\0';
	struct dt_hparams hp;
	struct dt_err err = DT_ERR_INIT;
	if (dt_hparams_from_set("mlp_base", &hp, &err) == DT_OK &&
	    dt_hparams_parse(&hp, text, &err) == DT_OK)
		(void)dt_hparams_validate(&hp, &err);
	free(text);
	return 0;
}
