/* model_internal.h — private structures of the .colibri reader (model.c, model_parse.c).
 * Offsets and codes mirror colibri_dist/format/spec.py and docs/FORMAT.md. */
#ifndef CB_MODEL_INTERNAL_H
#define CB_MODEL_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include "colibri.h"

#define CBF_HEADER_SIZE 512
#define CBF_DATA_START 4096
#define CBF_ENTRY_SIZE 384
#define CBF_VERSION 1
#define CBF_MAX_LAYERS 1024
#define CBF_MAX_NDIM 4
#define CBF_MIXED (-1)          /* header scheme_code "mixed": each expert matrix in the cb_dtype its descriptor names */
enum { CBF_TENSOR = 0, CBF_EXPERT = 1, CBF_SHARED = 2, CBF_ROUTER = 3, CBF_BIAS = 4, CBF_SHARED_GATE = 5,
       CBF_MATRIX = 6, CBF_DENSE_MLP = 7 /* whole-model entries: read by the Python engine, skipped here */ };
enum { CBF_F32 = 0, CBF_U8 = 4 };

typedef struct {
    int32_t dtype, rows, cols, scale_count;
    int64_t data_off, data_bytes, scale_off, zero_off;
} cbf_matrix;

typedef struct {
    char name[128];
    uint16_t kind, dtype;
    int32_t layer, expert;
    uint32_t ndim;
    int64_t shape[CBF_MAX_NDIM];
    uint64_t offset, nbytes;
    uint32_t crc;
    cbf_matrix mats[3];
    int64_t bias_off[3];          /* blob offsets of the f32 gate/up/down biases; all 0 = none */
} cbf_entry;

typedef struct {
    int32_t is_moe;
    const float *router, *bias, *shared_gate;
    cb_expert *experts;           /* [n_experts] */
    const cb_expert **expert_ptrs;/* [n_experts] -> experts[e] */
    cb_expert shared;
    int32_t has_shared;
} cbf_layer;

struct cb_model {
    int fd;
    const uint8_t *map;
    size_t size;
    cb_model_info info;
    uint8_t moe_mask[CBF_MAX_LAYERS / 8];
    int32_t scheme;               /* cb_dtype of every expert matrix, or CBF_MIXED */
    int32_t shared_gate;          /* 1: each MoE layer has a sigmoid shared gate */
    int32_t act;                  /* cb_act of the routed experts (header expert_act) */
    float alpha, limit;           /* CB_ACT_SWIGLU_OAI's parameters (header swiglu_alpha, swiglu_limit) */
    uint64_t n_entries;
    cbf_entry *entries;
    cbf_layer *layers;            /* [info.n_layers] */
    char path[256];
    char last_error[512];
};

uint32_t cb_crc32(const void *data, size_t n);
/* model_parse.c: header, table and layer assembly; messages via cb_fail(). */
cb_status cbf_parse_header(cb_model *m, const uint8_t *raw, uint64_t *table_off, uint64_t *table_count,
                           uint32_t *table_crc);
cb_status cbf_parse_entries(cb_model *m, uint64_t table_off, uint64_t count, int32_t verify);
cb_status cbf_check_meta(cb_model *m, const uint8_t *h);
cb_status cbf_build_layers(cb_model *m);
#endif
