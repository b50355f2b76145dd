/* simd_levels.c — prints the SIMD levels this CPU/OS runs (for `make check`).
 *   simd_levels           names of the supported levels, one line, space separated
 *   simd_levels --report  one line per level: "run <name>" or "skip <name>: lacks <flags>" (to stderr)
 */
#include <stdio.h>
#include <string.h>
#include "colibri.h"

int main(int argc, char **argv) {
    static const int levels[] = {CB_SIMD_SCALAR, CB_SIMD_AVX2, CB_SIMD_AVX512, CB_SIMD_AMX};
    int report = argc > 1 && strcmp(argv[1], "--report") == 0;
    for (int i = 0; i < 4; i++) {
        const char *name = cb_simd_level_name(levels[i]), *missing = cb_simd_missing(levels[i]);
        if (report && missing[0]) fprintf(stderr, "== simd level %s: skipped, this CPU/OS lacks %s\n", name, missing);
        else if (report) fprintf(stderr, "== simd level %s: runs\n", name);
        else if (!missing[0]) printf("%s%s", i ? " " : "", name);
    }
    if (!report) printf("\n");
    return 0;
}
