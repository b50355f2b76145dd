/* crc32.c — cb_crc32, the .colibri reader's checksum (model.c, model_parse.c):
 * CRC-32 (IEEE 802.3, reflected 0xEDB88320), the same value as Python's
 * zlib.crc32. The implementation (PCLMULQDQ folding, table fallback) lives in
 * crc32_fast.c, shared with the Python reader through cffi. */
#include "model_internal.h"

uint32_t cb_crc32(const void *data, size_t n) { return cb_crc32_update(0, data, n); }
