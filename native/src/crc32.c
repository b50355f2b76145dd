/* crc32.c — table-driven CRC-32 (IEEE 802.3, reflected 0xEDB88320), the same
 * checksum as Python's zlib.crc32, used by the .colibri reader (model.c). */
#include "model_internal.h"

static uint32_t crc_table[256];
static int crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
    crc_ready = 1;   /* idempotent: racing initialisers write identical values */
}

uint32_t cb_crc32(const void *data, size_t n) {
    if (!crc_ready) crc_init();
    const uint8_t *p = (const uint8_t *)data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}
