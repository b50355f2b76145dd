/* TEMPORARY link stubs for the container reader; deleted when native/src/model.c lands. */
#include "colibri.h"
cb_status cb_model_open(const char *p, int32_t v, cb_model **o) { (void)p; (void)v; *o = 0; return CB_E_UNSUPPORTED; }
void cb_model_close(cb_model *m) { (void)m; }
const char *cb_model_last_error(const cb_model *m) { (void)m; return "unimplemented"; }
cb_status cb_model_get_info(const cb_model *m, cb_model_info *o) { (void)m; (void)o; return CB_E_UNSUPPORTED; }
cb_status cb_model_moe_layer(cb_model *m, int32_t l, cb_moe_layer *o) { (void)m; (void)l; (void)o; return CB_E_UNSUPPORTED; }
cb_status cb_model_tensor_f32(cb_model *m, const char *n, const float **d, int64_t *s, int32_t *nd) { (void)m; (void)n; (void)d; (void)s; (void)nd; return CB_E_UNSUPPORTED; }
