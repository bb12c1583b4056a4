/* Runs the fuzz target over every file of the corpus (and any files given),
 * so that `make test` replays it with any compiler, libFuzzer or not. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	static uint8_t buf[1 << 20];
	size_t n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	/* Every prefix too: truncation is the commonest damage. */
	for (size_t cut = 0; cut < n; cut++)
		LLVMFuzzerTestOneInput(buf, cut);
	return 0;
}

int main(int argc, char **argv)
{
	int files = 0;
	for (int i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		if (!d) {
			if (run_file(argv[i]) == 0)
				files++;
			continue;
		}
		struct dirent *de;
		while ((de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
			if (run_file(path) == 0)
				files++;
		}
		closedir(d);
	}
	printf("replayed %d inputs\n", files);
	return files > 0 ? 0 : 1;
}
