/* The zigzag varint reader of the C record walks (_scan.c, _cleaner.c): one copy. */
#ifndef KAFKERNEL_VARINT_H
#define KAFKERNEL_VARINT_H

#include <Python.h>
#include <stdint.h>

/* A zigzag varint of at most max_bytes bytes at *pos; 0 when it runs past the end or
 * is too long. 5 bytes of 7 bits fit in 64 bits, and so does any varlong that encodes
 * an int64 (what a longer one would overflow into is not read). */
static inline int read_zigzag(const unsigned char *data, Py_ssize_t total, Py_ssize_t *pos,
                              int max_bytes, int64_t *value)
{
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*pos >= total)
            return 0;
        unsigned char b = data[(*pos)++];
        if (shift < 64)
            raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 1;
        }
        shift += 7;
    }
    return 0;
}

#endif
