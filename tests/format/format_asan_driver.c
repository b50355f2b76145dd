/* format_asan_driver.c — opens each .colibri file given on the command line with
 * cb_model_open(verify=1) and walks every layer and a tensor lookup; built with
 * ASan+UBSan by tests/format/test_format_fuzz.py so damaged files prove memory-safe. */
#include <stdio.h>
#include "colibri.h"
int main(int argc, char **argv) {
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        cb_model *m = 0;
        cb_status s = cb_model_open(argv[i], 1, &m);
        if (s == CB_OK) {
            cb_model_info info; cb_model_get_info(m, &info);
            cb_moe_layer L;
            for (int l = -1; l <= info.n_layers; l++) cb_model_moe_layer(m, l, &L);
            const float *d; int64_t shape[4]; int32_t nd;
            cb_model_tensor_f32(m, "model.norm.weight", &d, shape, &nd);
            cb_model_close(m);
        } else bad++;
    }
    printf("%d rejected of %d\n", bad, argc - 1);
    return 0;
}
