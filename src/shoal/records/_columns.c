/*
 * shoal.records._columns: the records of v2 batches as columns, for Arrow.
 *
 * The Spark data source reads batches straight from object storage and hands Spark Arrow
 * record batches. Decoding each record into Python objects and building Arrow arrays from
 * them cost about 12 us a record (1 KiB values): most of a task's time. RecordColumns parses
 * the (decompressed) records sections of batches in C and keeps the fields as the buffers of
 * Arrow arrays (little-endian, Arrow's layout):
 *
 *   offsets     int64 per row (absolute: baseOffset + offsetDelta)
 *   timestamps  int64 microseconds per row (baseTimestamp + timestampDelta, or the batch's
 *               LogAppendTime), what Spark's timestamp column holds
 *   ts_types    int32 per row (0 CreateTime, 1 LogAppendTime)
 *   key, value  binary: validity bitmap (None when no null), int32 offsets (rows + 1), data
 *   headers     (with_headers) list<struct<key: string, value: binary>>: list validity (a
 *               record without headers is null, as Spark's Kafka source has it), int32 list
 *               offsets, then the entries' key offsets + data and value validity + offsets + data
 *
 * Records outside [lo, hi) are skipped. The bytes were checked when produced and their batch
 * CRC when read; parsing still checks every length against the record and the section, and
 * raises ValueError on a malformed record rather than reading past a buffer. Header keys are
 * copied as they are: the caller validates them as UTF-8 (Arrow's string check) when there are any.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable byte buffers ------------------------------------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} buf_t;

static int
buf_reserve(buf_t *b, Py_ssize_t extra)
{
    Py_ssize_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = PyMem_Realloc(b->data, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

static inline int
buf_put(buf_t *b, const void *src, Py_ssize_t n)
{
    if (buf_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int
buf_i64(buf_t *b, int64_t v)
{
    return buf_put(b, &v, 8);
}

static inline int
buf_i32(buf_t *b, int32_t v)
{
    return buf_put(b, &v, 4);
}

static void
buf_free(buf_t *b)
{
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- one binary column: validity bitmap, int32 offsets, data ------------------------------- */

typedef struct {
    buf_t validity; /* one bit per value, set when not null */
    buf_t offsets;  /* int32, count + 1 */
    buf_t data;
    Py_ssize_t count, nulls;
} binary_t;

static int
binary_init(binary_t *c)
{
    memset(c, 0, sizeof(*c));
    return buf_i32(&c->offsets, 0);
}

static void
binary_free(binary_t *c)
{
    buf_free(&c->validity);
    buf_free(&c->offsets);
    buf_free(&c->data);
}

/* Append one value (p == NULL: null). */
static int
binary_add(binary_t *c, const uint8_t *p, Py_ssize_t n)
{
    Py_ssize_t byte = c->count >> 3;
    if (byte >= c->validity.len) {
        if (buf_reserve(&c->validity, 1) < 0)
            return -1;
        c->validity.data[c->validity.len++] = 0;
    }
    if (p != NULL) {
        c->validity.data[byte] |= (char)(1 << (c->count & 7));
        if (c->data.len + n > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of values in one column: take() sooner");
            return -1;
        }
        if (buf_put(&c->data, p, n) < 0)
            return -1;
    } else {
        c->nulls++;
    }
    c->count++;
    return buf_i32(&c->offsets, (int32_t)c->data.len);
}

/* ---- Taken: a buffer handed over to Python without a copy ---------------------------------- */

/* take() hands each column's memory to a Taken object (read-only buffer protocol; Arrow wraps it
 * with pa.py_buffer) instead of copying it into bytes: a task's values are copied once, from the
 * records into the column, not twice. */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
} Taken;

static int
Taken_getbuffer(Taken *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : "", self->len, 1, flags);
}

static void
Taken_dealloc(Taken *self)
{
    PyMem_Free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Taken_as_buffer = {(getbufferproc)Taken_getbuffer, NULL};

static PyTypeObject TakenType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shoal.records._columns.Taken",
    .tp_basicsize = sizeof(Taken),
    .tp_dealloc = (destructor)Taken_dealloc,
    .tp_as_buffer = &Taken_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory of one taken column buffer (read-only buffer protocol).",
};

/* The buffer's memory as a Taken object; the buffer is left empty. */
static PyObject *
taken_of(buf_t *b)
{
    Taken *t = PyObject_New(Taken, &TakenType);
    if (t == NULL)
        return NULL;
    t->data = b->data;
    t->len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)t;
}

/* (validity or None, offsets, data, null count) */
static PyObject *
binary_take(binary_t *c)
{
    PyObject *validity;
    if (c->nulls) {
        validity = taken_of(&c->validity);
        if (validity == NULL)
            return NULL;
    } else {
        validity = Py_NewRef(Py_None);
    }
    return Py_BuildValue("(NNNn)", validity, taken_of(&c->offsets), taken_of(&c->data), c->nulls);
}

/* ---- varints ------------------------------------------------------------------------------- */

/* A zigzag varint of at most `max_bytes` bytes at *pos (< end). Returns 0, or -1 when it is
 * cut by `end` or too long. */
static inline int
read_varint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int max_bytes, int64_t *out)
{
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t i = *pos;
    for (int n = 0; n < max_bytes; n++) {
        if (i >= end)
            return -1;
        uint8_t b = p[i++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *pos = i;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* ---- RecordColumns ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    int with_headers;
    Py_ssize_t rows;
    buf_t offsets, timestamps, ts_types;
    binary_t keys, values;
    /* headers */
    buf_t hdr_validity, hdr_offsets;
    Py_ssize_t hdr_nulls, hdr_entries;
    binary_t hkeys, hvalues;
} Columns;

static void
columns_release(Columns *self)
{
    buf_free(&self->offsets);
    buf_free(&self->timestamps);
    buf_free(&self->ts_types);
    binary_free(&self->keys);
    binary_free(&self->values);
    buf_free(&self->hdr_validity);
    buf_free(&self->hdr_offsets);
    binary_free(&self->hkeys);
    binary_free(&self->hvalues);
}

static int
columns_reset(Columns *self)
{
    columns_release(self);
    self->rows = 0;
    self->hdr_nulls = 0;
    self->hdr_entries = 0;
    if (binary_init(&self->keys) < 0 || binary_init(&self->values) < 0 ||
        binary_init(&self->hkeys) < 0 || binary_init(&self->hvalues) < 0)
        return -1;
    return buf_i32(&self->hdr_offsets, 0);
}

static int
Columns_init(Columns *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"with_headers", NULL};
    int with_headers = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &with_headers))
        return -1;
    self->with_headers = with_headers;
    return columns_reset(self);
}

static void
Columns_dealloc(Columns *self)
{
    columns_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
malformed(Py_ssize_t index, const char *what)
{
    PyErr_Format(PyExc_ValueError, "malformed record %zd in batch: %s", index, what);
    return -1;
}

/* Parse one batch's records section; 0 or -1 with an exception set. */
static int
columns_add(Columns *self, const uint8_t *p, Py_ssize_t size, int64_t count, int64_t base_offset,
            int64_t base_ts, int64_t max_ts, int log_append, int64_t lo, int64_t hi)
{
    Py_ssize_t pos = 0;
    for (int64_t index = 0; index < count; index++) {
        int64_t length, ts_delta, off_delta, key_len, value_len, header_count, v;
        if (read_varint(p, &pos, size, 5, &length) < 0 || length < 0 || length > size - pos)
            return malformed(index, "record length");
        Py_ssize_t end = pos + (Py_ssize_t)length;
        pos += 1; /* attributes */
        if (pos > end || read_varint(p, &pos, end, 10, &ts_delta) < 0 ||
            read_varint(p, &pos, end, 5, &off_delta) < 0)
            return malformed(index, "timestamp or offset delta");
        if (read_varint(p, &pos, end, 5, &key_len) < 0 || key_len < -1 || key_len > end - pos)
            return malformed(index, "key length");
        const uint8_t *key = key_len >= 0 ? p + pos : NULL;
        pos += key_len > 0 ? (Py_ssize_t)key_len : 0;
        if (read_varint(p, &pos, end, 5, &value_len) < 0 || value_len < -1 || value_len > end - pos)
            return malformed(index, "value length");
        const uint8_t *value = value_len >= 0 ? p + pos : NULL;
        pos += value_len > 0 ? (Py_ssize_t)value_len : 0;
        if (read_varint(p, &pos, end, 5, &header_count) < 0 || header_count < 0 || header_count > end - pos)
            return malformed(index, "header count");
        int64_t offset = base_offset + off_delta;
        int keep = offset >= lo && offset < hi;
        if (keep && self->with_headers) {
            Py_ssize_t byte = self->rows >> 3;
            if (byte >= self->hdr_validity.len) {
                if (buf_reserve(&self->hdr_validity, 1) < 0)
                    return -1;
                self->hdr_validity.data[self->hdr_validity.len++] = 0;
            }
            if (header_count > 0)
                self->hdr_validity.data[byte] |= (char)(1 << (self->rows & 7));
            else
                self->hdr_nulls++;
        }
        for (int64_t h = 0; h < header_count; h++) {
            int64_t hk_len, hv_len;
            if (read_varint(p, &pos, end, 5, &hk_len) < 0 || hk_len < 0 || hk_len > end - pos)
                return malformed(index, "header key length");
            const uint8_t *hk = p + pos;
            pos += (Py_ssize_t)hk_len;
            if (read_varint(p, &pos, end, 5, &hv_len) < 0 || hv_len < -1 || hv_len > end - pos)
                return malformed(index, "header value length");
            const uint8_t *hv = hv_len >= 0 ? p + pos : NULL;
            pos += hv_len > 0 ? (Py_ssize_t)hv_len : 0;
            if (keep && self->with_headers) {
                if (binary_add(&self->hkeys, hk, (Py_ssize_t)hk_len) < 0 ||
                    binary_add(&self->hvalues, hv, hv_len > 0 ? (Py_ssize_t)hv_len : 0) < 0)
                    return -1;
                self->hdr_entries++;
            }
        }
        if (pos != end)
            return malformed(index, "fields do not fill the record's length");
        if (!keep)
            continue;
        if (self->with_headers && buf_i32(&self->hdr_offsets, (int32_t)self->hdr_entries) < 0)
            return -1;
        v = log_append ? max_ts : base_ts + ts_delta;
        if (buf_i64(&self->offsets, offset) < 0 || buf_i64(&self->timestamps, v * 1000) < 0 ||
            buf_i32(&self->ts_types, log_append ? 1 : 0) < 0 ||
            binary_add(&self->keys, key, key_len > 0 ? (Py_ssize_t)key_len : 0) < 0 ||
            binary_add(&self->values, value, value_len > 0 ? (Py_ssize_t)value_len : 0) < 0)
            return -1;
        self->rows++;
    }
    if (pos != size) {
        PyErr_Format(PyExc_ValueError, "%zd bytes left over after the batch's %lld records", size - pos,
                     (long long)count);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(Columns_add_doc,
"add(records, count, base_offset, base_timestamp, max_timestamp, log_append_time, lo, hi)\n--\n\n"
"Append the records with lo <= offset < hi of one batch's decompressed records section.\n"
"``log_append_time``: the batch is LogAppendTime, whose maxTimestamp is every record's\n"
"timestamp. Returns the rows now held.");

static PyObject *
Columns_add(Columns *self, PyObject *args)
{
    Py_buffer view;
    long long count, base_offset, base_ts, max_ts, lo, hi;
    int log_append;
    if (!PyArg_ParseTuple(args, "y*LLLLpLL", &view, &count, &base_offset, &base_ts, &max_ts, &log_append, &lo,
                          &hi))
        return NULL;
    int rc = columns_add(self, (const uint8_t *)view.buf, view.len, count, base_offset, base_ts, max_ts,
                         log_append, lo, hi);
    PyBuffer_Release(&view);
    if (rc < 0) {
        /* keep the columns consistent: drop what the failed batch half-added */
        columns_reset(self);
        return NULL;
    }
    return PyLong_FromSsize_t(self->rows);
}

PyDoc_STRVAR(Columns_take_doc,
"take()\n--\n\n"
"The rows held as Arrow buffers, and start over: a dict with ``rows``, ``offsets``,\n"
"``timestamps`` (int64 us), ``ts_types`` (int32), ``keys`` and ``values`` as (validity or\n"
"None, int32 offsets, data, null count), and with headers ``headers`` as (list validity or\n"
"None, int32 list offsets, null count, entries, header keys, header values). Each buffer is\n"
"the column's own memory, handed over without a copy (a read-only buffer object).");

static PyObject *
Columns_take(Columns *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *headers = Py_NewRef(Py_None);
    if (self->with_headers) {
        PyObject *validity = self->hdr_nulls ? taken_of(&self->hdr_validity) : Py_NewRef(Py_None);
        if (validity == NULL)
            goto fail;
        Py_DECREF(headers);
        headers = Py_BuildValue("(NNnnNN)", validity, taken_of(&self->hdr_offsets), self->hdr_nulls,
                                self->hdr_entries, binary_take(&self->hkeys), binary_take(&self->hvalues));
        if (headers == NULL)
            goto fail;
    }
    PyObject *out = Py_BuildValue(
        "{s:n,s:N,s:N,s:N,s:N,s:N,s:N}", "rows", self->rows, "offsets", taken_of(&self->offsets),
        "timestamps", taken_of(&self->timestamps), "ts_types", taken_of(&self->ts_types), "keys",
        binary_take(&self->keys), "values", binary_take(&self->values), "headers", headers);
    if (out == NULL || columns_reset(self) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
fail:
    Py_XDECREF(headers);
    return NULL;
}

static PyObject *
Columns_get_rows(Columns *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->rows);
}

static PyMethodDef Columns_methods[] = {
    {"add", (PyCFunction)Columns_add, METH_VARARGS, Columns_add_doc},
    {"take", (PyCFunction)Columns_take, METH_NOARGS, Columns_take_doc},
    {NULL},
};

static PyGetSetDef Columns_getset[] = {
    {"rows", (getter)Columns_get_rows, NULL, "Rows held (not yet taken).", NULL},
    {NULL},
};

PyDoc_STRVAR(Columns_doc,
"RecordColumns(with_headers=False)\n--\n\n"
"Collects the records of v2 batches as Arrow column buffers (see the module docstring).");

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shoal.records._columns.RecordColumns",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Columns_doc,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Columns_init,
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_methods = Columns_methods,
    .tp_getset = Columns_getset,
};

static struct PyModuleDef columns_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "shoal.records._columns",
    .m_doc = "The records of Kafka v2 batches as Arrow column buffers (see shoal.pipeline.columns).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__columns(void)
{
    if (PyType_Ready(&ColumnsType) < 0 || PyType_Ready(&TakenType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&columns_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "RecordColumns", (PyObject *)&ColumnsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
