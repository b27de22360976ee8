/* The record walk of a decompressed records section, in C.
 *
 * A compressed batch's records must be walked on every leader append (as Kafka's
 * LogValidator does), and in Python that walk was most of a compressed produce's cost.
 * This is the same walk as kernel/log/validator.py's walk_records, answering only whether
 * the section is valid: on False the caller runs the Python walk, which names the
 * problem. tests/unit/test_records_scan.py keeps the two in agreement.
 *
 * No state: the module holds nothing between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_varint.h"

static int scan(const unsigned char *data, Py_ssize_t total, Py_ssize_t count,
                int check_offsets, int compacted)
{
    Py_ssize_t pos = 0;
    int64_t size, delta, key_size, value_size, headers, header_key, header_value, ignored;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (pos >= total)
            return 0;
        if (!read_zigzag(data, total, &pos, 5, &size))
            return 0;
        if (size < 1 || size > total - pos)
            return 0;
        Py_ssize_t end = pos + (Py_ssize_t)size;
        pos += 1; /* attributes, unused in v2 */
        if (!read_zigzag(data, total, &pos, 10, &ignored)) /* timestamp delta */
            return 0;
        if (!read_zigzag(data, total, &pos, 5, &delta))
            return 0;
        if (!read_zigzag(data, total, &pos, 5, &key_size))
            return 0;
        if (key_size > 0)
            pos += (Py_ssize_t)key_size; /* < 2^35: no overflow; bounds checked below */
        else if (key_size < -1)
            return 0;
        if (!read_zigzag(data, total, &pos, 5, &value_size))
            return 0;
        if (value_size > 0)
            pos += (Py_ssize_t)value_size;
        else if (value_size < -1)
            return 0;
        if (!read_zigzag(data, total, &pos, 5, &headers) || headers < 0)
            return 0;
        for (int64_t h = 0; h < headers; h++) {
            if (!read_zigzag(data, total, &pos, 5, &header_key) || header_key < 0)
                return 0;
            pos += (Py_ssize_t)header_key;
            if (!read_zigzag(data, total, &pos, 5, &header_value))
                return 0;
            if (header_value > 0)
                pos += (Py_ssize_t)header_value;
            if (pos > end)
                break;
        }
        if (pos != end)
            return 0;
        if (check_offsets && delta != index)
            return 0;
        if (compacted && key_size < 0)
            return 0;
    }
    return pos == total;
}

static PyObject *records_valid(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    int check_offsets, compacted;
    if (!PyArg_ParseTuple(args, "y*npp", &view, &count, &check_offsets, &compacted))
        return NULL;
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = scan((const unsigned char *)view.buf, view.len, count, check_offsets, compacted);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"records_valid", records_valid, METH_VARARGS,
     "records_valid(data, count, check_offsets, compacted) -> bool: whether "
     "scan_records(data, count, ...) would pass."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "The record walk of kernel/log/validator.py, in C.", 0,
    methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void)
{
    return PyModuleDef_Init(&module);
}
