/* guarded.h — test buffers that end at a PROT_NONE page, so a kernel reading past the last byte faults. */
#ifndef CB_GUARDED_H
#define CB_GUARDED_H
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>

/* `bytes` writable bytes ending right before an inaccessible page; *map / *map_bytes are what to munmap. */
static unsigned char *guarded(size_t bytes, unsigned char **map, size_t *map_bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), body = (bytes + page - 1) / page * page;
    *map_bytes = body + page;
    *map = mmap(NULL, *map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (*map == MAP_FAILED) return NULL;
    mprotect(*map + body, page, PROT_NONE);
    return *map + body - bytes;
}
#endif
