/* The log cleaner's per-record work, in C (kernel/log/offset_map.py has the same in
 * Python, for an install without a C compiler, and tests/unit/test_cleaner_c.py keeps
 * the two in agreement).
 *
 * OffsetMap is Kafka's SkimpyOffsetMap: key digest -> last offset, in at most
 * log.cleaner.dedupe.buffer.size bytes (24 per slot: a 16-byte MD5 and an 8-byte
 * offset, as Kafka's). The table starts small and grows by rehashing up to that size,
 * so a log of few keys does not cost the whole buffer. Each key is hashed with a salt
 * of the map's own: a producer who crafts MD5 collisions cannot aim them at another
 * producer's key without knowing it.
 *
 * Its two walks of a batch's (decompressed) records section run without the GIL, so
 * the broker's event loop keeps running while a cleaner thread is in them:
 *   put_records: every keyed record's offset into the map (the map's build);
 *   retain_records: which records a clean keeps (Kafka's shouldRetainRecord), the kept
 *     ones re-encoded with timestamp deltas from a new base (Kafka's rebuilt batch).
 * A map is owned by one cleaner thread; a second caller while a walk runs is refused.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_varint.h"
#include <string.h>

/* ---------------------------------------------------------------- MD5 (RFC 1321) */

typedef struct {
    uint32_t state[4];
    uint64_t length;
    unsigned char block[64];
    size_t used;
} Md5;

static const uint32_t MD5_K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
    0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
    0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
    0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
    0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
    0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
    0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
    0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
    0xeb86d391,
};
static const unsigned char MD5_S[64] = {
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
    5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
};

#define MD5_ROTATE(x, n) (((x) << (n)) | ((x) >> (32 - (n))))
#define MD5_STEP(f, a, b, c, d, i, g)                                  \
    do {                                                               \
        uint32_t t = a + (f) + MD5_K[i] + m[g];                        \
        a = d;                                                         \
        d = c;                                                         \
        c = b;                                                         \
        b = b + MD5_ROTATE(t, MD5_S[i]);                               \
    } while (0)

static void md5_block(uint32_t state[4], const unsigned char *p)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
               (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    /* the four rounds apart, so the message index of each step is a constant */
    for (int i = 0; i < 16; i++)
        MD5_STEP((b & c) | (~b & d), a, b, c, d, i, i);
    for (int i = 16; i < 32; i++)
        MD5_STEP((d & b) | (~d & c), a, b, c, d, i, (5 * i + 1) & 15);
    for (int i = 32; i < 48; i++)
        MD5_STEP(b ^ c ^ d, a, b, c, d, i, (3 * i + 5) & 15);
    for (int i = 48; i < 64; i++)
        MD5_STEP(c ^ (b | ~d), a, b, c, d, i, (7 * i) & 15);
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
}

static void md5_init(Md5 *md5)
{
    md5->state[0] = 0x67452301;
    md5->state[1] = 0xefcdab89;
    md5->state[2] = 0x98badcfe;
    md5->state[3] = 0x10325476;
    md5->length = 0;
    md5->used = 0;
}

static void md5_update(Md5 *md5, const unsigned char *data, size_t n)
{
    md5->length += n;
    while (n > 0) {
        size_t take = 64 - md5->used;
        if (take > n)
            take = n;
        memcpy(md5->block + md5->used, data, take);
        md5->used += take;
        data += take;
        n -= take;
        if (md5->used == 64) {
            md5_block(md5->state, md5->block);
            md5->used = 0;
        }
    }
}

static void md5_final(Md5 *md5, unsigned char out[16])
{
    uint64_t bits = md5->length * 8;
    size_t used = md5->used;
    md5->block[used++] = 0x80;
    if (used > 56) {
        memset(md5->block + used, 0, 64 - used);
        md5_block(md5->state, md5->block);
        used = 0;
    }
    memset(md5->block + used, 0, 56 - used);
    for (int i = 0; i < 8; i++)
        md5->block[56 + i] = (unsigned char)(bits >> (8 * i));
    md5_block(md5->state, md5->block);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            out[4 * i + j] = (unsigned char)(md5->state[i] >> (8 * j));
}

/* ---------------------------------------------------------------- the record walk */

static Py_ssize_t zigzag_size(int64_t value)
{
    uint64_t raw = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 1;
    while (raw >= 0x80) {
        raw >>= 7;
        n++;
    }
    return n;
}

static unsigned char *write_zigzag(unsigned char *out, int64_t value)
{
    uint64_t raw = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (raw >= 0x80) {
        *out++ = (unsigned char)(raw | 0x80);
        raw >>= 7;
    }
    *out++ = (unsigned char)raw;
    return out;
}

typedef struct {
    Py_ssize_t start, end;     /* the record, its length prefix included */
    Py_ssize_t ts_start;       /* its timestamp delta varint */
    Py_ssize_t after_ts;       /* the byte after it */
    int64_t timestamp_delta, offset_delta;
    Py_ssize_t key_start;
    int64_t key_size, value_size; /* -1: null */
} RecordSpan;

/* One record at *pos, as kernel/protocol/records.iter_records reads it; 0 if malformed. */
static int read_record(const unsigned char *data, Py_ssize_t total, Py_ssize_t *pos,
                       RecordSpan *r)
{
    int64_t size, headers, header_key, header_value;
    r->start = *pos;
    if (!read_zigzag(data, total, pos, 5, &size) || size < 1 || size > total - *pos)
        return 0;
    r->end = *pos + (Py_ssize_t)size;
    *pos += 1; /* attributes */
    r->ts_start = *pos;
    if (!read_zigzag(data, r->end, pos, 10, &r->timestamp_delta))
        return 0;
    r->after_ts = *pos;
    if (!read_zigzag(data, r->end, pos, 5, &r->offset_delta))
        return 0;
    if (!read_zigzag(data, r->end, pos, 5, &r->key_size) || r->key_size < -1)
        return 0;
    r->key_start = *pos;
    if (r->key_size > 0) {
        if (r->key_size > r->end - *pos)
            return 0;
        *pos += (Py_ssize_t)r->key_size;
    }
    if (!read_zigzag(data, r->end, pos, 5, &r->value_size) || r->value_size < -1)
        return 0;
    if (r->value_size > 0) {
        if (r->value_size > r->end - *pos)
            return 0;
        *pos += (Py_ssize_t)r->value_size;
    }
    if (!read_zigzag(data, r->end, pos, 5, &headers) || headers < 0)
        return 0;
    for (int64_t h = 0; h < headers; h++) {
        if (!read_zigzag(data, r->end, pos, 5, &header_key) || header_key < 0 ||
            header_key > r->end - *pos)
            return 0;
        *pos += (Py_ssize_t)header_key;
        if (!read_zigzag(data, r->end, pos, 5, &header_value) || header_value < -1)
            return 0;
        if (header_value > 0) {
            if (header_value > r->end - *pos)
                return 0;
            *pos += (Py_ssize_t)header_value;
        }
    }
    return *pos == r->end;
}

/* ---------------------------------------------------------------- the offset map */

#define SLOT_BYTES 24
#define INITIAL_SLOTS 4096

typedef struct {
    unsigned char hash[16];
    int64_t offset; /* -1: an empty slot */
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *table;
    Py_ssize_t capacity;  /* slots allocated */
    Py_ssize_t max_slots; /* what the dedupe buffer holds */
    Py_ssize_t size;
    int64_t latest_offset;
    unsigned char salt[16];
    int busy;
} OffsetMap;

static Slot *new_table(Py_ssize_t capacity)
{
    Slot *table = PyMem_RawMalloc((size_t)capacity * sizeof(Slot));
    if (table != NULL)
        for (Py_ssize_t i = 0; i < capacity; i++)
            table[i].offset = -1;
    return table;
}

static void digest(const OffsetMap *map, const unsigned char *key, Py_ssize_t n,
                   unsigned char out[16])
{
    Md5 md5;
    md5_init(&md5);
    md5_update(&md5, map->salt, 16);
    md5_update(&md5, key, (size_t)n);
    md5_final(&md5, out);
}

/* The slot of ``hash``, or the empty slot where it would go (linear probing); NULL when
 * it is absent from a table without an empty slot. */
static Slot *find(Slot *table, Py_ssize_t capacity, const unsigned char hash[16])
{
    uint64_t h;
    memcpy(&h, hash, 8);
    /* h * capacity / 2^64: a position in [0, capacity) without a division */
    Py_ssize_t i = (Py_ssize_t)(((unsigned __int128)h * (uint64_t)capacity) >> 64);
    for (Py_ssize_t probes = 0; probes < capacity; probes++) {
        Slot *slot = &table[i];
        if (slot->offset < 0 || memcmp(slot->hash, hash, 16) == 0)
            return slot;
        if (++i == capacity)
            i = 0;
    }
    return NULL;
}

/* Room for one more entry: grows the table (x4, up to max_slots) past 3/4 full. 0 if
 * the memory for it could not be had. */
static int reserve(OffsetMap *map)
{
    if (map->capacity == map->max_slots || (map->size + 1) * 4 <= map->capacity * 3)
        return 1;
    Py_ssize_t capacity = map->capacity * 4;
    if (capacity > map->max_slots || capacity / 4 != map->capacity)
        capacity = map->max_slots;
    Slot *table = new_table(capacity);
    if (table == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < map->capacity; i++)
        if (map->table[i].offset >= 0) /* the new table is larger: always a slot */
            *find(table, capacity, map->table[i].hash) = map->table[i];
    PyMem_RawFree(map->table);
    map->table = table;
    map->capacity = capacity;
    return 1;
}

static int64_t map_get(const OffsetMap *map, const unsigned char *key, Py_ssize_t n)
{
    unsigned char hash[16];
    digest(map, key, n, hash);
    const Slot *slot = find(map->table, map->capacity, hash);
    return slot == NULL ? -1 : slot->offset;
}

static int claim(OffsetMap *map)
{
    if (map->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the offset map is in use by another thread");
        return 0;
    }
    map->busy = 1;
    return 1;
}

static int OffsetMap_init(OffsetMap *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"memory", "salt", NULL};
    Py_ssize_t memory;
    Py_buffer salt;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ny*", kwlist, &memory, &salt))
        return -1;
    if (salt.len != 16) {
        PyBuffer_Release(&salt);
        PyErr_SetString(PyExc_ValueError, "the salt must be 16 bytes");
        return -1;
    }
    memcpy(self->salt, salt.buf, 16);
    PyBuffer_Release(&salt);
    if (memory / SLOT_BYTES <= 0) {
        PyErr_Format(PyExc_ValueError, "the offset map needs at least %d bytes, got %zd",
                     SLOT_BYTES, memory);
        return -1;
    }
    self->max_slots = memory / SLOT_BYTES;
    self->capacity = self->max_slots < INITIAL_SLOTS ? self->max_slots : INITIAL_SLOTS;
    PyMem_RawFree(self->table);
    self->table = new_table(self->capacity);
    if (self->table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->size = 0;
    self->latest_offset = -1;
    return 0;
}

static void OffsetMap_dealloc(OffsetMap *self)
{
    PyMem_RawFree(self->table);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *OffsetMap_clear(OffsetMap *self, PyObject *Py_UNUSED(ignored))
{
    if (!claim(self))
        return NULL;
    Py_ssize_t capacity = self->max_slots < INITIAL_SLOTS ? self->max_slots : INITIAL_SLOTS;
    Slot *table = new_table(capacity);
    self->busy = 0;
    if (table == NULL)
        return PyErr_NoMemory();
    PyMem_RawFree(self->table); /* the grown table goes back: a map between cleans is small */
    self->table = table;
    self->capacity = capacity;
    self->size = 0;
    self->latest_offset = -1;
    Py_RETURN_NONE;
}

static PyObject *OffsetMap_get(OffsetMap *self, PyObject *arg)
{
    Py_buffer key;
    if (PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0)
        return NULL;
    if (!claim(self)) { /* a walk may be growing the table */
        PyBuffer_Release(&key);
        return NULL;
    }
    int64_t offset = map_get(self, key.buf, key.len);
    self->busy = 0;
    PyBuffer_Release(&key);
    return PyLong_FromLongLong(offset);
}

enum { WALK_OK, WALK_FULL, WALK_MALFORMED, WALK_NO_MEMORY };

static PyObject *walk_error(int status, Py_ssize_t index)
{
    if (status == WALK_NO_MEMORY)
        return PyErr_NoMemory();
    PyErr_Format(PyExc_ValueError, "record %zd of the batch is malformed", index);
    return NULL;
}

/* put_records(records, count, base_offset, start, max_entries) -> (read, full) */
static PyObject *OffsetMap_put_records(OffsetMap *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count, max_entries;
    long long base_offset, start;
    if (!PyArg_ParseTuple(args, "y*nLLn", &view, &count, &base_offset, &start, &max_entries))
        return NULL;
    if (!claim(self)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *data = view.buf;
    Py_ssize_t total = view.len, pos = 0, index = 0;
    int status = WALK_OK;
    Py_BEGIN_ALLOW_THREADS
    for (; index < count; index++) {
        RecordSpan r;
        if (!read_record(data, total, &pos, &r)) {
            status = WALK_MALFORMED;
            break;
        }
        if (r.key_size < 0 || base_offset + r.offset_delta < start)
            continue;
        if (self->size >= max_entries) {
            status = WALK_FULL;
            break;
        }
        unsigned char hash[16];
        digest(self, data + r.key_start, (Py_ssize_t)r.key_size, hash);
        if (!reserve(self)) {
            status = WALK_NO_MEMORY;
            break;
        }
        Slot *slot = find(self->table, self->capacity, hash);
        if (slot == NULL) { /* max_entries above the slots */
            status = WALK_FULL;
            break;
        }
        if (slot->offset < 0) {
            memcpy(slot->hash, hash, 16);
            self->size++;
        }
        slot->offset = base_offset + r.offset_delta;
    }
    if (status == WALK_OK && pos != total)
        status = WALK_MALFORMED;
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyBuffer_Release(&view);
    if (status == WALK_FULL)
        return Py_BuildValue("nO", index, Py_True);
    if (status != WALK_OK)
        return walk_error(status, index);
    return Py_BuildValue("nO", index, Py_False);
}

/* retain_records(records, count, base_offset, first_timestamp, keep_tombstones,
 *                base_timestamp | None, tombstone_base_timestamp | None)
 *   -> (kept, invalid, tombstones kept, kept records | None, base timestamp,
 *       max timestamp of the kept records, -1 if none)
 * The kept records re-encoded with timestamp deltas from a new base: base_timestamp
 * (a batch's delete horizon) if given, else tombstone_base_timestamp if a tombstone is
 * kept (the horizon a first clean stamps), else the first kept record's timestamp;
 * their offset deltas unchanged. None when every record is kept and the base is
 * unchanged (the batch is kept as it is). */
static PyObject *OffsetMap_retain_records(OffsetMap *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, first_timestamp;
    int keep_tombstones;
    PyObject *base_arg, *tombstone_base_arg;
    if (!PyArg_ParseTuple(args, "y*nLLpOO", &view, &count, &base_offset, &first_timestamp,
                          &keep_tombstones, &base_arg, &tombstone_base_arg))
        return NULL;
    long long fixed_base = 0, tombstone_base = 0;
    if ((base_arg != Py_None && (fixed_base = PyLong_AsLongLong(base_arg)) == -1 &&
         PyErr_Occurred()) ||
        (tombstone_base_arg != Py_None &&
         (tombstone_base = PyLong_AsLongLong(tombstone_base_arg)) == -1 && PyErr_Occurred())) {
        PyBuffer_Release(&view);
        return NULL;
    }
    /* every record takes at least 7 bytes (a length and six fields of one byte): more
     * claimed than fit is malformed, and bounds what the spans below may take */
    if (count < 0 || count > view.len / 7) {
        PyBuffer_Release(&view);
        return walk_error(WALK_MALFORMED, 0);
    }
    if (!claim(self)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    RecordSpan *kept = PyMem_RawMalloc(((size_t)count + 1) * sizeof(RecordSpan));
    if (kept == NULL) {
        self->busy = 0;
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    const unsigned char *data = view.buf;
    Py_ssize_t total = view.len, pos = 0, index = 0, n_kept = 0, invalid = 0, out_size = 0;
    int status = WALK_OK, tombstones = 0;
    int64_t first_kept_delta = 0, max_kept_delta = INT64_MIN;
    Py_BEGIN_ALLOW_THREADS
    for (; index < count; index++) {
        RecordSpan r;
        if (!read_record(data, total, &pos, &r)) {
            status = WALK_MALFORMED;
            break;
        }
        int64_t offset = base_offset + r.offset_delta;
        int keep;
        if (offset > self->latest_offset)
            keep = 1; /* beyond what the map covers */
        else if (r.key_size < 0) {
            invalid++;
            keep = 0;
        } else if (offset < map_get(self, data + r.key_start, (Py_ssize_t)r.key_size))
            keep = 0; /* a later record of the key exists */
        else
            keep = r.value_size >= 0 || keep_tombstones;
        if (!keep)
            continue;
        if (n_kept == 0)
            first_kept_delta = r.timestamp_delta;
        if (r.timestamp_delta > max_kept_delta)
            max_kept_delta = r.timestamp_delta;
        tombstones |= r.value_size < 0;
        kept[n_kept++] = r;
    }
    if (status == WALK_OK && pos != total)
        status = WALK_MALFORMED;
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (status != WALK_OK) {
        PyMem_RawFree(kept);
        PyBuffer_Release(&view);
        return walk_error(status, index);
    }
    /* a tombstone kept stamps the batch: rebuilt, even if its base happens not to move */
    int stamped = base_arg == Py_None && tombstones && tombstone_base_arg != Py_None;
    long long base = base_arg != Py_None ? fixed_base
                     : stamped ? tombstone_base : first_timestamp + first_kept_delta;
    long long max_timestamp = n_kept ? first_timestamp + max_kept_delta : -1;
    PyObject *out = Py_None;
    if (n_kept == count && base == first_timestamp && !stamped) {
        Py_INCREF(out);
    } else {
        /* each kept record: a new length, attributes 0, the new timestamp delta, and
         * the rest of it (offset delta, key, value, headers) as it was */
        int64_t shift = (int64_t)(first_timestamp - base);
        for (Py_ssize_t i = 0; i < n_kept; i++) {
            RecordSpan *r = &kept[i];
            Py_ssize_t length = 1 + zigzag_size(r->timestamp_delta + shift) +
                                (r->end - r->after_ts);
            out_size += zigzag_size(length) + length;
        }
        out = PyBytes_FromStringAndSize(NULL, out_size);
        if (out != NULL) {
            unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
            for (Py_ssize_t i = 0; i < n_kept; i++) {
                RecordSpan *r = &kept[i];
                int64_t delta = r->timestamp_delta + shift;
                Py_ssize_t length = 1 + zigzag_size(delta) + (r->end - r->after_ts);
                w = write_zigzag(w, length);
                *w++ = 0; /* attributes: unused; Kafka writes 0, as the Python walk does */
                w = write_zigzag(w, delta);
                memcpy(w, data + r->after_ts, (size_t)(r->end - r->after_ts));
                w += r->end - r->after_ts;
            }
        }
    }
    PyMem_RawFree(kept);
    PyBuffer_Release(&view);
    if (out == NULL)
        return NULL;
    return Py_BuildValue("nnONLL", n_kept, invalid, tombstones ? Py_True : Py_False, out,
                         base, max_timestamp);
}

static PyObject *OffsetMap_digest(OffsetMap *self, PyObject *arg);

static PyMethodDef OffsetMap_methods[] = {
    {"digest", (PyCFunction)OffsetMap_digest, METH_O,
     "The salted MD5 of a key, as the map stores it."},
    {"clear", (PyCFunction)OffsetMap_clear, METH_NOARGS,
     "Empty the map (and give back a grown table)."},
    {"get", (PyCFunction)OffsetMap_get, METH_O, "The last offset of a key, -1 if absent."},
    {"put_records", (PyCFunction)OffsetMap_put_records, METH_VARARGS,
     "put_records(records, count, base_offset, start, max_entries) -> (read, full)"},
    {"retain_records", (PyCFunction)OffsetMap_retain_records, METH_VARARGS,
     "retain_records(records, count, base_offset, first_timestamp, keep_tombstones, "
     "base_timestamp, tombstone_base_timestamp) -> (kept count, invalid, tombstones, "
     "kept records, base_ts, max_ts)"},
    {NULL, NULL, 0, NULL},
};

static PyObject *OffsetMap_digest(OffsetMap *self, PyObject *arg)
{
    Py_buffer key;
    if (PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0)
        return NULL;
    unsigned char hash[16];
    digest(self, key.buf, key.len, hash);
    PyBuffer_Release(&key);
    return PyBytes_FromStringAndSize((const char *)hash, 16);
}

static PyObject *OffsetMap_get_size(OffsetMap *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->size);
}

static PyObject *OffsetMap_get_slots(OffsetMap *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->max_slots);
}

static PyObject *OffsetMap_get_allocated(OffsetMap *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->capacity * (Py_ssize_t)sizeof(Slot));
}

static PyObject *OffsetMap_get_latest(OffsetMap *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->latest_offset);
}

static int OffsetMap_set_latest(OffsetMap *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "latest_offset cannot be deleted");
        return -1;
    }
    long long offset = PyLong_AsLongLong(value);
    if (offset == -1 && PyErr_Occurred())
        return -1;
    self->latest_offset = offset;
    return 0;
}

static PyGetSetDef OffsetMap_getset[] = {
    {"size", (getter)OffsetMap_get_size, NULL, "keys in the map", NULL},
    {"slots", (getter)OffsetMap_get_slots, NULL, "keys the dedupe buffer holds", NULL},
    {"allocated_bytes", (getter)OffsetMap_get_allocated, NULL,
     "bytes of the table as grown so far", NULL},
    {"latest_offset", (getter)OffsetMap_get_latest, (setter)OffsetMap_set_latest,
     "the last offset the map covers", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject OffsetMapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kernel.log._cleaner.OffsetMap",
    .tp_doc = "Kafka's SkimpyOffsetMap: salted MD5 of a key -> its last offset.",
    .tp_basicsize = sizeof(OffsetMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)OffsetMap_init,
    .tp_dealloc = (destructor)OffsetMap_dealloc,
    .tp_methods = OffsetMap_methods,
    .tp_getset = OffsetMap_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cleaner", "The log cleaner's per-record work, in C.", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cleaner(void)
{
    if (PyType_Ready(&OffsetMapType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&OffsetMapType);
    if (PyModule_AddObject(m, "OffsetMap", (PyObject *)&OffsetMapType) < 0) {
        Py_DECREF(&OffsetMapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
