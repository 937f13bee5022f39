/*
** A C program as a user of the installed library writes it: built with
** nothing but `cc consumer.c $(pkg-config --cflags --libs distautograd)`.
** It prints the library version, the file the loader mapped, and what a
** context round trip gave; packaging/install_test.go checks them.
*/
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <distautograd.h>

/* The path of the libdistautograd file this process mapped. */
static void print_mapped_library(void) {
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[4096];
	if (!maps)
		return;
	while (fgets(line, sizeof line, maps)) {
		char *path = strchr(line, '/');
		if (path && strstr(path, "libdistautograd")) {
			printf("library %s", path);
			break;
		}
	}
	fclose(maps);
}

int main(void) {
	dac_context *ctx;
	int64_t id = 0;
	printf("header %s\n", DAC_VERSION_STRING);
	printf("version %s\n", dac_version());
	print_mapped_library();
	if (dac_init(3) != DAC_OK || dac_context_new(&ctx) != DAC_OK || dac_context_id(ctx, &id) != DAC_OK ||
	    dac_context_add_known_worker_id(ctx, 4) != DAC_OK || dac_context_release(id) != DAC_OK ||
	    dac_context_unref(ctx) != DAC_OK) {
		printf("error %s: %s\n", dac_status_string(dac_last_status()), dac_last_error());
		return 1;
	}
	printf("context %" PRId64 "\n", id);
	if (dac_context_retrieve(id, &ctx) == DAC_OK)
		return 1;
	printf("after release: %s\n", dac_last_error());
	return 0;
}
