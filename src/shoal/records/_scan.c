/*
 * shoal.records._scan: record-level validation of a v2 batch's records section.
 *
 * The records section is the bytes after the 61-byte batch header, decompressed when the
 * batch is compressed. Each record is checked exactly as Kafka's DefaultRecord.readFrom
 * and LogValidator check it on produce (messages are theirs where Kafka has one):
 *
 *   length            varint (zigzag, max 5 bytes), >= 0, fits what is left
 *   attributes        int8 (unused)
 *   timestampDelta    varlong (max 10 bytes)
 *   offsetDelta       varint, must equal the record's index in the batch
 *   keyLength, key    varint: -1 null, < -1 invalid, must fit the record
 *   valueLength, value
 *   headerCount       varint, >= 0, not more than the bytes left in the record
 *   [headerKeyLength (>= 0), headerKey (valid UTF-8), headerValueLength (-1 null), value]*
 *
 * and the fields must use exactly `length` bytes. After `count` records nothing may remain;
 * fewer bytes than `count` records is an error too.
 *
 * The scanner is a resumable state machine: a compressed batch is fed chunk by chunk as it
 * is decompressed, and a chunk may end anywhere, even inside a varint (up to 9 bytes are
 * carried over inside the scanner). Key, value and header value bytes are skipped without
 * being held, so memory stays constant whatever sizes the records claim. Scanning runs with
 * the GIL released (for buffers of at least GIL_RELEASE_MIN bytes) directly on the caller's
 * buffer (buffer protocol, no copy).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Below this many bytes the scan is shorter than a GIL hand-off could take. */
#define GIL_RELEASE_MIN 65536

#define UNUSED(x) ((void)(x))

enum phase {
    PH_LEN = 0, /* at a record boundary: the record's length varint */
    PH_ATTR,
    PH_TS,
    PH_OFF,
    PH_KEYLEN,
    PH_KEY,
    PH_VALLEN,
    PH_VAL,
    PH_HCOUNT,
    PH_HKEYLEN,
    PH_HKEY,
    PH_HVALLEN,
    PH_HVAL,
    PH_END /* all fields read: record-level checks */
};

static const char *const FIELD_NAMES[] = {
    "length", "attributes", "timestamp delta", "offset delta", "key size", "key",
    "value size", "value", "header count", "header key size", "header key",
    "header value size", "header value", "end",
};

typedef struct {
    /* configuration */
    int64_t count;   /* records the batch declares */
    int64_t base_ts; /* the batch's baseTimestamp */
    int compressed;  /* only changes the wording of one message, as Kafka's */
    /* progress */
    int64_t done; /* complete records */
    int64_t min_ts, max_ts, first_null_key;
    uint64_t scanned; /* bytes fed so far */
    int phase;
    /* the record being read */
    int32_t rec_len;
    int64_t rec_left; /* bytes of the record body not read yet */
    int64_t ts;
    int32_t off_delta, key_size, value_size, header_count, headers_left;
    int64_t field_left; /* bytes left in the current key/value/header field */
    /* UTF-8 state inside a header key */
    int u_need;
    uint8_t u_lo, u_hi;
    /* a varint cut by the end of a chunk */
    uint8_t carry[10];
    int ncarry;
    /* failure */
    int failed;
    int64_t err_index;
    char msg[400];
} scan_t;

static void
scan_init(scan_t *s, int64_t count, int64_t base_ts, int compressed)
{
    memset(s, 0, sizeof(*s));
    s->count = count;
    s->base_ts = base_ts;
    s->compressed = compressed;
    s->min_ts = INT64_MAX;
    s->max_ts = INT64_MIN;
    s->first_null_key = -1;
    s->err_index = -1;
    s->phase = PH_LEN;
}

/* ---- UTF-8 (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF) ---------------- */

/* Validate p[0..n) continuing from (need, lo, hi); returns 0 on an invalid byte. */
static inline int
utf8_step(const uint8_t *p, size_t n, int *need, uint8_t *lo, uint8_t *hi)
{
    int nd = *need;
    uint8_t l = *lo, h = *hi;
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (nd == 0) {
            if (c < 0x80) {
                i++;
                /* ASCII run: 8 bytes at a time */
                while (i + 8 <= n) {
                    uint64_t w;
                    memcpy(&w, p + i, 8);
                    if (w & 0x8080808080808080ULL)
                        break;
                    i += 8;
                }
                continue;
            }
            if (c >= 0xC2 && c <= 0xDF) {
                nd = 1; l = 0x80; h = 0xBF;
            } else if (c == 0xE0) {
                nd = 2; l = 0xA0; h = 0xBF; /* no overlong 3-byte forms */
            } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
                nd = 2; l = 0x80; h = 0xBF;
            } else if (c == 0xED) {
                nd = 2; l = 0x80; h = 0x9F; /* no surrogates U+D800..U+DFFF */
            } else if (c == 0xF0) {
                nd = 3; l = 0x90; h = 0xBF; /* no overlong 4-byte forms */
            } else if (c >= 0xF1 && c <= 0xF3) {
                nd = 3; l = 0x80; h = 0xBF;
            } else if (c == 0xF4) {
                nd = 3; l = 0x80; h = 0x8F; /* nothing above U+10FFFF */
            } else {
                return 0; /* 0x80..0xC1 lead, 0xF5..0xFF */
            }
        } else {
            if (c < l || c > h)
                return 0;
            l = 0x80;
            h = 0xBF;
            nd--;
        }
        i++;
    }
    *need = nd;
    *lo = l;
    *hi = h;
    return 1;
}

/* ---- varints, as Kafka's ByteUtils reads them ---------------------------------------------- */

#define V_NEED 0  /* ran out of bytes */
#define V_LONG -1 /* too long */

/* Zigzag int32 (readVarint): returns the bytes used, V_NEED or V_LONG. Like Java, bits of the
 * 5th byte beyond bit 31 are dropped; only its continuation bit is an error. */
static inline int
dec_varint(const uint8_t *p, size_t avail, int32_t *out, uint32_t *raw)
{
    uint32_t r = 0;
    size_t k;
    for (k = 0; k < 4; k++) {
        uint8_t b;
        if (k >= avail)
            return V_NEED;
        b = p[k];
        r |= (uint32_t)(b & 0x7F) << (7 * k);
        if (!(b & 0x80)) {
            *out = (int32_t)((r >> 1) ^ (0U - (r & 1U)));
            return (int)k + 1;
        }
    }
    if (avail < 5)
        return V_NEED;
    r |= (uint32_t)p[4] << 28;
    if (p[4] & 0x80) {
        *raw = r;
        return V_LONG;
    }
    *out = (int32_t)((r >> 1) ^ (0U - (r & 1U)));
    return 5;
}

/* Zigzag int64 (readVarlong): at most 10 bytes, the 10th without its continuation bit. */
static inline int
dec_varlong(const uint8_t *p, size_t avail, int64_t *out, uint64_t *raw)
{
    uint64_t v = 0;
    int shift = 0;
    size_t k = 0;
    for (;;) {
        uint8_t b;
        if (k >= avail)
            return V_NEED;
        b = p[k++];
        if (!(b & 0x80)) {
            v |= (uint64_t)b << shift;
            break;
        }
        v |= (uint64_t)(b & 0x7F) << shift;
        shift += 7;
        if (shift > 63) {
            *raw = v;
            return V_LONG;
        }
    }
    *out = (int64_t)((v >> 1) ^ (0ULL - (v & 1ULL)));
    return (int)k;
}

/* ---- the scanner ---------------------------------------------------------------------------- */

#define FAIL(...)                                                  \
    do {                                                           \
        snprintf(s->msg, sizeof(s->msg), __VA_ARGS__);             \
        s->failed = 1;                                             \
        if (s->err_index < 0)                                      \
            s->err_index = s->done;                                \
        goto fail;                                                 \
    } while (0)

/* Result of reading one varint field. */
#define RV_OK 1
#define RV_MORE 0 /* the chunk ended inside it: carried over, feed more */
#define RV_ERR -1 /* s->msg is set */

static void
underflow(scan_t *s, const char *what)
{
    snprintf(s->msg, sizeof(s->msg),
             "Found invalid record structure: the record payload of %d bytes ends inside its %s",
             (int)s->rec_len, what);
}

/*
 * Read a varint (is_long: varlong) at p[*i..n). In a record (bounded), it may not run past
 * the record's end. A varint cut by the end of a non-final chunk is carried over; in the
 * final chunk it is an error.
 */
static int
read_vint(scan_t *s, const uint8_t *p, size_t n, size_t *i, int is_long, int bounded,
          int final, int64_t *out)
{
    const uint8_t *src;
    uint8_t tmp[10];
    size_t maxlen = is_long ? 10 : 5;
    size_t lim = maxlen, avail, have = n - *i;
    int buffer_short, r;
    int32_t v32 = 0;
    int64_t v64 = 0;
    uint32_t raw32 = 0;
    uint64_t raw64 = 0;

    if (bounded && (int64_t)lim > s->rec_left)
        lim = (size_t)s->rec_left;
    if (s->ncarry) {
        size_t nc = (size_t)s->ncarry, take = lim - nc; /* nc < lim: carried bytes fit the bound */
        if (take > have)
            take = have;
        memcpy(tmp, s->carry, nc);
        memcpy(tmp + nc, p + *i, take);
        src = tmp;
        avail = nc + take;
        buffer_short = (take == have) && avail < lim;
    } else {
        src = p + *i;
        avail = have < lim ? have : lim;
        buffer_short = have < lim;
    }
    r = is_long ? dec_varlong(src, avail, &v64, &raw64) : dec_varint(src, avail, &v32, &raw32);
    if (r > 0) {
        *i += (size_t)r - (size_t)s->ncarry;
        s->ncarry = 0;
        if (bounded)
            s->rec_left -= r;
        *out = is_long ? v64 : (int64_t)v32;
        return RV_OK;
    }
    if (r == V_LONG) {
        if (is_long)
            snprintf(s->msg, sizeof(s->msg),
                     "%sVarlong is too long, most significant bit in the 10th byte is set, "
                     "converted value: %llx",
                     bounded ? "Found invalid record structure: " : "", (unsigned long long)raw64);
        else
            snprintf(s->msg, sizeof(s->msg),
                     "%sVarint is too long, the most significant bit in the 5th byte is set, "
                     "converted value: %x",
                     bounded ? "Found invalid record structure: " : "", (unsigned)raw32);
        return RV_ERR;
    }
    if (buffer_short && !final) {
        memcpy(s->carry, src, avail); /* avail < lim <= 10 */
        s->ncarry = (int)avail;
        *i = n;
        return RV_MORE;
    }
    if (!bounded) /* the record length itself, at the end of the data */
        snprintf(s->msg, sizeof(s->msg), "Incorrect declared batch size, premature EOF reached");
    else if (buffer_short)
        snprintf(s->msg, sizeof(s->msg),
                 "Invalid record size: expected %d bytes in record payload, but the record "
                 "payload reached EOF.",
                 (int)s->rec_len);
    else
        underflow(s, FIELD_NAMES[s->phase]);
    return RV_ERR;
}

/* The common case inline: no carried bytes, and the varint's whole span is in this chunk. */
static inline int
read_vint_fast(scan_t *s, const uint8_t *p, size_t n, size_t *i, int is_long, int bounded,
               int final, int64_t *out)
{
    if (s->ncarry == 0) {
        size_t lim = is_long ? 10 : 5;
        if (bounded && (int64_t)lim > s->rec_left)
            lim = (size_t)s->rec_left;
        if (n - *i >= lim) {
            int r;
            int64_t v64 = 0;
            int32_t v32 = 0;
            uint64_t raw64;
            uint32_t raw32;
            r = is_long ? dec_varlong(p + *i, lim, &v64, &raw64)
                        : dec_varint(p + *i, lim, &v32, &raw32);
            if (r > 0) {
                *out = is_long ? v64 : (int64_t)v32;
                *i += (size_t)r;
                if (bounded)
                    s->rec_left -= r;
                return RV_OK;
            }
        }
    }
    return read_vint(s, p, n, i, is_long, bounded, final, out);
}

/* Skip the current bytes field as far as this chunk goes; 1 when the field is complete. */
static inline int
skip_field(scan_t *s, size_t n, size_t *i)
{
    size_t have = n - *i;
    size_t take = (uint64_t)s->field_left < have ? (size_t)s->field_left : have;
    *i += take;
    s->field_left -= (int64_t)take;
    s->rec_left -= (int64_t)take;
    return s->field_left == 0;
}

/*
 * Scan p[0..n) as the next bytes of the records section. final: nothing follows. Returns 0,
 * or -1 with s->msg / s->err_index set (the scanner is then dead).
 */
static int
scan_feed(scan_t *s, const uint8_t *p, size_t n, int final)
{
    size_t i = 0;
    int64_t v;
    int r;

    if (s->failed)
        return -1;
    s->scanned += n;
    for (;;) {
        switch (s->phase) {
        case PH_LEN:
            if (i == n && s->ncarry == 0) {
                if (final && s->done < s->count)
                    FAIL("Incorrect declared batch size, premature EOF reached");
                return 0;
            }
            if (s->done >= s->count) {
                s->err_index = s->count - 1;
                FAIL("Incorrect declared batch size, records still remaining in file");
            }
            if (i == n) { /* only a carried partial varint: need more, or EOF */
                if (final)
                    FAIL("Incorrect declared batch size, premature EOF reached");
                return 0;
            }
            r = read_vint_fast(s, p, n, &i, 0, 0, final, &v);
            if (r == RV_MORE)
                return 0;
            if (r == RV_ERR)
                goto fail_msg;
            if (v < 0)
                FAIL("Invalid record size: the record payload size %d is negative", (int)v);
            s->rec_len = (int32_t)v;
            s->rec_left = v;
            if (final && (uint64_t)v > (uint64_t)(n - i))
                FAIL("Invalid record size: expected %d bytes in record payload, but instead the "
                     "buffer has only %llu remaining bytes.",
                     (int)v, (unsigned long long)(n - i));
            s->phase = PH_ATTR;
            /* fall through */
        case PH_ATTR:
            if (s->rec_left == 0) {
                underflow(s, "attributes");
                goto fail_msg;
            }
            if (i == n)
                goto need_more;
            i++; /* record attributes: unused in v2 */
            s->rec_left--;
            s->phase = PH_TS;
            /* fall through */
        case PH_TS:
            r = read_vint_fast(s, p, n, &i, 1, 1, final, &v);
            if (r != RV_OK)
                goto vint_stop;
            s->ts = (int64_t)((uint64_t)s->base_ts + (uint64_t)v); /* Java long arithmetic */
            s->phase = PH_OFF;
            /* fall through */
        case PH_OFF:
            r = read_vint_fast(s, p, n, &i, 0, 1, final, &v);
            if (r != RV_OK)
                goto vint_stop;
            s->off_delta = (int32_t)v;
            s->phase = PH_KEYLEN;
            /* fall through */
        case PH_KEYLEN:
            r = read_vint_fast(s, p, n, &i, 0, 1, final, &v);
            if (r != RV_OK)
                goto vint_stop;
            if (v < -1)
                FAIL("Found invalid record structure: key size %d is negative", (int)v);
            if (v > s->rec_left)
                FAIL("Found invalid record structure: key size %d is larger than the %lld bytes "
                     "left in the record",
                     (int)v, (long long)s->rec_left);
            s->key_size = (int32_t)v;
            s->field_left = v < 0 ? 0 : v;
            s->phase = PH_KEY;
            /* fall through */
        case PH_KEY:
            if (!skip_field(s, n, &i))
                goto need_more;
            s->phase = PH_VALLEN;
            /* fall through */
        case PH_VALLEN:
            r = read_vint_fast(s, p, n, &i, 0, 1, final, &v);
            if (r != RV_OK)
                goto vint_stop;
            if (v < -1)
                FAIL("Found invalid record structure: value size %d is negative", (int)v);
            if (v > s->rec_left)
                FAIL("Found invalid record structure: value size %d is larger than the %lld "
                     "bytes left in the record",
                     (int)v, (long long)s->rec_left);
            s->value_size = (int32_t)v;
            s->field_left = v < 0 ? 0 : v;
            s->phase = PH_VAL;
            /* fall through */
        case PH_VAL:
            if (!skip_field(s, n, &i))
                goto need_more;
            s->phase = PH_HCOUNT;
            /* fall through */
        case PH_HCOUNT:
            r = read_vint_fast(s, p, n, &i, 0, 1, final, &v);
            if (r != RV_OK)
                goto vint_stop;
            if (v < 0)
                FAIL("Found invalid number of record headers %d", (int)v);
            if (v > s->rec_left)
                FAIL("Found invalid number of record headers. %d is larger than the remaining "
                     "size of the buffer",
                     (int)v);
            s->header_count = s->headers_left = (int32_t)v;
            s->phase = s->headers_left ? PH_HKEYLEN : PH_END;
            continue;
        case PH_HKEYLEN:
            r = read_vint_fast(s, p, n, &i, 0, 1, final, &v);
            if (r != RV_OK)
                goto vint_stop;
            if (v < 0)
                FAIL("Invalid negative header key size %d", (int)v);
            if (v > s->rec_left)
                FAIL("Found invalid record structure: header key size %d is larger than the %lld "
                     "bytes left in the record",
                     (int)v, (long long)s->rec_left);
            s->field_left = v;
            s->u_need = 0;
            s->phase = PH_HKEY;
            /* fall through */
        case PH_HKEY: {
            size_t have = n - i;
            size_t take = (uint64_t)s->field_left < have ? (size_t)s->field_left : have;
            if (!utf8_step(p + i, take, &s->u_need, &s->u_lo, &s->u_hi))
                FAIL("Invalid header key: the key of header %d is not valid UTF-8",
                     (int)(s->header_count - s->headers_left));
            i += take;
            s->field_left -= (int64_t)take;
            s->rec_left -= (int64_t)take;
            if (s->field_left)
                goto need_more;
            if (s->u_need)
                FAIL("Invalid header key: the key of header %d is not valid UTF-8",
                     (int)(s->header_count - s->headers_left));
            s->phase = PH_HVALLEN;
        }
            /* fall through */
        case PH_HVALLEN:
            r = read_vint_fast(s, p, n, &i, 0, 1, final, &v);
            if (r != RV_OK)
                goto vint_stop;
            if (v < -1)
                FAIL("Found invalid record structure: header value size %d is negative", (int)v);
            if (v > s->rec_left)
                FAIL("Found invalid record structure: header value size %d is larger than the "
                     "%lld bytes left in the record",
                     (int)v, (long long)s->rec_left);
            s->field_left = v < 0 ? 0 : v;
            s->phase = PH_HVAL;
            /* fall through */
        case PH_HVAL:
            if (!skip_field(s, n, &i))
                goto need_more;
            s->headers_left--;
            s->phase = s->headers_left ? PH_HKEYLEN : PH_END;
            continue;
        case PH_END:
            if (s->rec_left != 0)
                FAIL("Invalid record size: expected to read %d bytes in record payload, but "
                     "instead read %lld",
                     (int)s->rec_len, (long long)(s->rec_len - s->rec_left));
            if ((int64_t)s->off_delta != s->done)
                FAIL("Inner record DefaultRecord(offset=%d, timestamp=%lld, key=%d bytes, "
                     "value=%d bytes) inside the %srecord batch does not have incremental "
                     "offsets, expected offset is %lld",
                     (int)s->off_delta, (long long)s->ts, s->key_size < 0 ? 0 : (int)s->key_size,
                     s->value_size < 0 ? 0 : (int)s->value_size,
                     s->compressed ? "compressed " : "", (long long)s->done);
            if (s->ts < s->min_ts)
                s->min_ts = s->ts;
            if (s->ts > s->max_ts)
                s->max_ts = s->ts;
            if (s->key_size < 0 && s->first_null_key < 0)
                s->first_null_key = s->done;
            s->done++;
            s->phase = PH_LEN;
            continue;
        default:
            FAIL("internal error: bad scanner phase %d", s->phase);
        }

    vint_stop:
        if (r == RV_MORE)
            return 0;
        goto fail_msg;
    need_more:
        if (final)
            FAIL("Invalid record size: expected %d bytes in record payload, but the record "
                 "payload reached EOF.",
                 (int)s->rec_len);
        return 0;
    }

fail_msg:
    s->failed = 1;
    if (s->err_index < 0)
        s->err_index = s->done;
fail:
    return -1;
}

/* ---- Python glue ---------------------------------------------------------------------------- */

static PyObject *RecordError; /* ValueError subclass: args (message, batch_index) */

static PyObject *
raise_scan_error(const scan_t *s)
{
    PyObject *args = Py_BuildValue("(sL)", s->msg, (long long)s->err_index);
    if (args != NULL) {
        PyErr_SetObject(RecordError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static int
run_feed(scan_t *s, Py_buffer *view, int final)
{
    int rc;
    if (view->len >= GIL_RELEASE_MIN) {
        Py_BEGIN_ALLOW_THREADS
        rc = scan_feed(s, (const uint8_t *)view->buf, (size_t)view->len, final);
        Py_END_ALLOW_THREADS
    } else {
        rc = scan_feed(s, (const uint8_t *)view->buf, (size_t)view->len, final);
    }
    return rc;
}

typedef struct {
    PyObject_HEAD
    scan_t s;
    int busy;
} ScannerObject;

static int
Scanner_init(ScannerObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"count", "base_timestamp", "compressed", NULL};
    long long count, base_ts;
    int compressed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LL|p:RecordScanner", kwlist, &count, &base_ts,
                                     &compressed))
        return -1;
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must be >= 0");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "RecordScanner is in use by another thread");
        return -1;
    }
    scan_init(&self->s, count, base_ts, compressed);
    return 0;
}

static PyObject *
Scanner_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    UNUSED(args);
    UNUSED(kwds);
    ScannerObject *self = (ScannerObject *)type->tp_alloc(type, 0);
    if (self != NULL) {
        scan_init(&self->s, 0, 0, 0);
        self->busy = 0;
    }
    return (PyObject *)self;
}

PyDoc_STRVAR(Scanner_feed_doc,
"feed(data, final=False)\n--\n\n"
"Scan ``data`` (any contiguous bytes-like object) as the next bytes of the records\n"
"section. Everything is consumed: a chunk may end anywhere, the scanner carries what\n"
"it needs. ``final=True`` says nothing follows (``data`` may be empty): an incomplete\n"
"record or fewer records than the count is then an error. Raises RecordError(message,\n"
"batch_index); after an error every call raises it again.");

static PyObject *
Scanner_feed(ScannerObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"data", "final", NULL};
    Py_buffer view;
    int final = 0, rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|p:feed", kwlist, &view, &final))
        return NULL;
    if (self->busy) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "RecordScanner is in use by another thread");
        return NULL;
    }
    self->busy = 1;
    rc = run_feed(&self->s, &view, final);
    self->busy = 0;
    PyBuffer_Release(&view);
    if (rc)
        return raise_scan_error(&self->s);
    Py_RETURN_NONE;
}

static PyObject *
ts_or_none(int64_t done, int64_t v)
{
    if (done == 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong((long long)v);
}

static PyObject *
Scanner_get_records_done(ScannerObject *self, void *closure)
{
    UNUSED(closure);
    return PyLong_FromLongLong((long long)self->s.done);
}

static PyObject *
Scanner_get_min_ts(ScannerObject *self, void *closure)
{
    UNUSED(closure);
    return ts_or_none(self->s.done, self->s.min_ts);
}

static PyObject *
Scanner_get_max_ts(ScannerObject *self, void *closure)
{
    UNUSED(closure);
    return ts_or_none(self->s.done, self->s.max_ts);
}

static PyObject *
Scanner_get_first_null_key(ScannerObject *self, void *closure)
{
    UNUSED(closure);
    return PyLong_FromLongLong((long long)self->s.first_null_key);
}

static PyObject *
Scanner_get_scanned(ScannerObject *self, void *closure)
{
    UNUSED(closure);
    return PyLong_FromUnsignedLongLong((unsigned long long)self->s.scanned);
}

static PyObject *
Scanner_get_complete(ScannerObject *self, void *closure)
{
    UNUSED(closure);
    return PyBool_FromLong(!self->s.failed && self->s.done == self->s.count &&
                           self->s.phase == PH_LEN && self->s.ncarry == 0);
}

static PyGetSetDef Scanner_getset[] = {
    {"records_done", (getter)Scanner_get_records_done, NULL, "complete records so far", NULL},
    {"min_timestamp", (getter)Scanner_get_min_ts, NULL,
     "smallest baseTimestamp + timestampDelta so far (None before the first record)", NULL},
    {"max_timestamp", (getter)Scanner_get_max_ts, NULL,
     "largest baseTimestamp + timestampDelta so far (None before the first record)", NULL},
    {"first_null_key", (getter)Scanner_get_first_null_key, NULL,
     "index of the first record with a null key, or -1", NULL},
    {"scanned", (getter)Scanner_get_scanned, NULL, "bytes fed so far", NULL},
    {"complete", (getter)Scanner_get_complete, NULL,
     "every declared record read, at a record boundary, no error", NULL},
    {NULL},
};

static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))Scanner_feed, METH_VARARGS | METH_KEYWORDS,
     Scanner_feed_doc},
    {NULL},
};

PyDoc_STRVAR(Scanner_doc,
"RecordScanner(count, base_timestamp, compressed=False)\n--\n\n"
"Resumable validation of a v2 batch's (decompressed) records section, fed in chunks.\n"
"``count`` is the batch's record count, ``base_timestamp`` its baseTimestamp.\n"
"Not thread-safe: one thread feeds a scanner at a time (a concurrent call raises\n"
"RuntimeError).");

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shoal.records._scan.RecordScanner",
    .tp_basicsize = sizeof(ScannerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Scanner_doc,
    .tp_new = Scanner_new,
    .tp_init = (initproc)Scanner_init,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

PyDoc_STRVAR(scan_doc,
"scan(records, count, base_timestamp, compressed=False) -> (min_ts, max_ts, first_null_key)\n--\n\n"
"Validate a whole records section in one call (the data of an uncompressed batch).\n"
"Returns the smallest and largest record timestamp and the index of the first record\n"
"with a null key (-1 if none). Raises RecordError(message, batch_index).");

static PyObject *
scan_func(PyObject *module, PyObject *args, PyObject *kwds)
{
    UNUSED(module);
    static char *kwlist[] = {"records", "count", "base_timestamp", "compressed", NULL};
    Py_buffer view;
    long long count, base_ts;
    int compressed = 0, rc;
    scan_t s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*LL|p:scan", kwlist, &view, &count, &base_ts,
                                     &compressed))
        return NULL;
    if (count < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "count must be >= 0");
        return NULL;
    }
    scan_init(&s, count, base_ts, compressed);
    rc = run_feed(&s, &view, 1);
    PyBuffer_Release(&view);
    if (rc)
        return raise_scan_error(&s);
    if (s.done == 0)
        return Py_BuildValue("(OOL)", Py_None, Py_None, (long long)s.first_null_key);
    return Py_BuildValue("(LLL)", (long long)s.min_ts, (long long)s.max_ts,
                         (long long)s.first_null_key);
}

PyDoc_STRVAR(utf8_valid_doc,
"utf8_valid(data) -> bool\n--\n\n"
"Whether ``data`` is well-formed UTF-8 (the check applied to header keys).");

static PyObject *
utf8_valid_func(PyObject *module, PyObject *arg)
{
    UNUSED(module);
    Py_buffer view;
    int need = 0, ok;
    uint8_t lo = 0x80, hi = 0xBF;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    ok = utf8_step((const uint8_t *)view.buf, (size_t)view.len, &need, &lo, &hi) && need == 0;
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

/* ---- zstd frame structure ------------------------------------------------------------------- */

static inline uint32_t
le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/*
 * Walk p[0..n) as a sequence of zstd frames (RFC 8878) without decoding: frame headers,
 * block headers and sizes, checksums, skippable frames. Returns the number of frames, or -1
 * with msg set when the data is not whole frames (truncated, trailing bytes, reserved bits).
 */
static long long
zstd_walk(const uint8_t *p, size_t n, char *msg, size_t msglen)
{
    size_t pos = 0;
    long long frames = 0;
    if (n == 0) {
        snprintf(msg, msglen, "empty zstd payload");
        return -1;
    }
    while (pos < n) {
        uint32_t magic;
        if (n - pos < 4) {
            snprintf(msg, msglen, "truncated zstd frame magic at byte %zu", pos);
            return -1;
        }
        magic = le32(p + pos);
        if ((magic & 0xFFFFFFF0U) == 0x184D2A50U) { /* skippable frame */
            uint32_t size;
            if (n - pos < 8) {
                snprintf(msg, msglen, "truncated zstd skippable frame at byte %zu", pos);
                return -1;
            }
            size = le32(p + pos + 4);
            if ((uint64_t)size > (uint64_t)(n - pos - 8)) {
                snprintf(msg, msglen, "truncated zstd skippable frame at byte %zu", pos);
                return -1;
            }
            pos += 8 + (size_t)size;
            frames++;
            continue;
        }
        if (magic != 0xFD2FB528U) {
            snprintf(msg, msglen, "not a zstd frame at byte %zu (magic %08x)", pos, magic);
            return -1;
        }
        {
            static const size_t did_sizes[4] = {0, 1, 2, 4};
            uint8_t fhd;
            size_t hdr, fcs_flag, single;
            int checksum, last = 0;
            if (n - pos < 5) {
                snprintf(msg, msglen, "truncated zstd frame header at byte %zu", pos);
                return -1;
            }
            fhd = p[pos + 4];
            if (fhd & 0x08) {
                snprintf(msg, msglen, "zstd frame at byte %zu sets a reserved header bit", pos);
                return -1;
            }
            fcs_flag = fhd >> 6;
            single = (fhd >> 5) & 1;
            checksum = (fhd >> 2) & 1;
            hdr = 5U + (single ? 0U : 1U) + did_sizes[fhd & 3] +
                  (fcs_flag == 0 ? (single ? 1U : 0U) : ((size_t)1 << fcs_flag));
            if (n - pos < hdr) {
                snprintf(msg, msglen, "truncated zstd frame header at byte %zu", pos);
                return -1;
            }
            pos += hdr;
            while (!last) {
                uint32_t bh, type, bsize;
                size_t content;
                if (n - pos < 3) {
                    snprintf(msg, msglen, "truncated zstd block header at byte %zu", pos);
                    return -1;
                }
                bh = (uint32_t)p[pos] | ((uint32_t)p[pos + 1] << 8) | ((uint32_t)p[pos + 2] << 16);
                last = (int)(bh & 1);
                type = (bh >> 1) & 3;
                bsize = bh >> 3;
                if (type == 3) {
                    snprintf(msg, msglen, "zstd block at byte %zu has the reserved type", pos);
                    return -1;
                }
                content = type == 1 ? 1 : (size_t)bsize;
                pos += 3;
                if (n - pos < content) {
                    snprintf(msg, msglen, "truncated zstd block at byte %zu", pos - 3);
                    return -1;
                }
                pos += content;
            }
            if (checksum) {
                if (n - pos < 4) {
                    snprintf(msg, msglen, "truncated zstd frame checksum at byte %zu", pos);
                    return -1;
                }
                pos += 4;
            }
            frames++;
        }
    }
    return frames;
}

PyDoc_STRVAR(zstd_frames_doc,
"zstd_frames(data) -> int\n--\n\n"
"Check that ``data`` is a sequence of whole zstd frames (data or skippable) by walking\n"
"frame and block headers, without decoding. Returns the number of frames; raises\n"
"ValueError for empty, truncated or trailing data.");

static PyObject *
zstd_frames_func(PyObject *module, PyObject *arg)
{
    UNUSED(module);
    Py_buffer view;
    char msg[160];
    long long frames;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    frames = zstd_walk((const uint8_t *)view.buf, (size_t)view.len, msg, sizeof(msg));
    PyBuffer_Release(&view);
    if (frames < 0) {
        PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    return PyLong_FromLongLong(frames);
}

static PyMethodDef module_methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan_func, METH_VARARGS | METH_KEYWORDS, scan_doc},
    {"utf8_valid", (PyCFunction)utf8_valid_func, METH_O, utf8_valid_doc},
    {"zstd_frames", (PyCFunction)zstd_frames_func, METH_O, zstd_frames_doc},
    {NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "shoal.records._scan",
    .m_doc = "Record-level validation of Kafka v2 record batches (see shoal.records.validate).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
    PyObject *m;
    if (PyType_Ready(&ScannerType) < 0)
        return NULL;
    m = PyModule_Create(&scan_module);
    if (m == NULL)
        return NULL;
    RecordError = PyErr_NewExceptionWithDoc(
        "shoal.records._scan.RecordError",
        "A record that Kafka's broker would refuse: args are (message, batch_index).",
        PyExc_ValueError, NULL);
    if (RecordError == NULL || PyModule_AddObjectRef(m, "RecordError", RecordError) < 0 ||
        PyModule_AddObjectRef(m, "RecordScanner", (PyObject *)&ScannerType) < 0 ||
        PyModule_AddIntConstant(m, "GIL_RELEASE_MIN", GIL_RELEASE_MIN) < 0) {
        Py_XDECREF(RecordError);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
