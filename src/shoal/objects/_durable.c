/*
 * shoal.objects._durable: write a new file atomically and durably in one call, without the GIL.
 *
 *   write_new(temp_path, final_path, directory, data, chunk)
 *
 * creates temp_path (O_EXCL, mode 0600 like mkstemp), writes data in pieces of `chunk` bytes,
 * fsyncs it, lets the kernel drop its pages from the page cache (POSIX_FADV_DONTNEED: see
 * LocalObjectStorage), closes it, renames it to final_path and fsyncs `directory` (the parent of
 * both). On failure the temp file is removed and OSError is raised with errno and the path
 * the failing call was about; after a failed directory fsync the object is in place but not
 * known to be durable, and the caller treats the upload as failed, as it does any error.
 *
 * Why in C: the same steps from Python are about fifteen system calls, and each one releases
 * and re-takes the GIL. On a busy broker the event loop holds the GIL, so every re-take waits
 * for it: measured at saturation, the upload of a 2.2 MB WAL segment spent about 6 ms in those
 * steps against 2.5 ms for the same calls on an idle interpreter. Here the GIL is released
 * once for the whole sequence.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define UNUSED(x) ((void)(x))

static ssize_t write_all(int fd, const char *buf, Py_ssize_t len, Py_ssize_t chunk) {
    Py_ssize_t done = 0;
    while (done < len) {
        Py_ssize_t want = len - done < chunk ? len - done : chunk;
        ssize_t n = write(fd, buf + done, (size_t)want);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        done += n;
    }
    return 0;
}

/* open and fsync retried on EINTR, as Python's os functions do (PEP 475); close is not (on
 * Linux the descriptor is gone either way). */
static int open_retry(const char *path, int flags, mode_t mode) {
    int fd;
    do {
        fd = open(path, flags, mode);
    } while (fd < 0 && errno == EINTR);
    return fd;
}

static int fsync_retry(int fd) {
    int r;
    do {
        r = fsync(fd);
    } while (r != 0 && errno == EINTR);
    return r;
}

static PyObject *write_new(PyObject *self, PyObject *args) {
    UNUSED(self);
    PyObject *temp_obj = NULL, *final_obj = NULL, *dir_obj = NULL;
    Py_buffer data;
    Py_ssize_t chunk;
    if (!PyArg_ParseTuple(args, "O&O&O&y*n", PyUnicode_FSConverter, &temp_obj, PyUnicode_FSConverter,
                          &final_obj, PyUnicode_FSConverter, &dir_obj, &data, &chunk)) {
        Py_XDECREF(temp_obj);
        Py_XDECREF(final_obj);
        Py_XDECREF(dir_obj);
        return NULL;
    }
    if (chunk <= 0) {
        chunk = data.len > 0 ? data.len : 1;
    }
    const char *temp = PyBytes_AS_STRING(temp_obj);
    const char *final = PyBytes_AS_STRING(final_obj);
    const char *dir = PyBytes_AS_STRING(dir_obj);
    int err = 0;
    PyObject *failed = NULL; /* borrowed: which path the error is about */

    Py_BEGIN_ALLOW_THREADS
    int fd = open_retry(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        err = errno;
        failed = temp_obj;
    } else {
        int step = (int)write_all(fd, (const char *)data.buf, data.len, chunk);
        if (step == 0) {
            step = fsync_retry(fd);
        }
        if (step == 0) {
#ifdef POSIX_FADV_DONTNEED
            (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* advice only */
#endif
        } else {
            err = errno;
        }
        if (close(fd) != 0 && err == 0) {
            err = errno;
        }
        if (err == 0 && rename(temp, final) != 0) {
            err = errno;
        }
        if (err != 0) {
            failed = temp_obj;
            (void)unlink(temp);
        } else {
            int dfd = open_retry(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
            if (dfd < 0 || fsync_retry(dfd) != 0) {
                err = errno;
                failed = dir_obj;
            }
            if (dfd >= 0) {
                (void)close(dfd);
            }
        }
    }
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&data);
    PyObject *result = Py_None;
    if (err != 0) {
        errno = err;
        PyObject *name = PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(failed));
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, name);
        Py_XDECREF(name);
        result = NULL;
    } else {
        Py_INCREF(result);
    }
    Py_DECREF(temp_obj);
    Py_DECREF(final_obj);
    Py_DECREF(dir_obj);
    return result;
}

static PyMethodDef methods[] = {
    {"write_new", write_new, METH_VARARGS,
     "write_new(temp_path, final_path, directory, data, chunk): create temp_path, write data in "
     "chunk-byte pieces, fsync, drop its cached pages, rename to final_path, fsync directory; "
     "all without the GIL. Raises OSError (the temp file is removed)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "shoal.objects._durable",
    "Atomic, durable creation of a file in one GIL-free call.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__durable(void) { return PyModule_Create(&module); }
