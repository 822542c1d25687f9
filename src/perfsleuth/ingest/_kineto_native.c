/* Kineto Chrome-trace JSON -> flat columns, in one pass over yyjson's document.
 *
 * Why native: the typed msgspec decode and the Arrow column building it fed were half of the
 * ingest time (a Python object per event and per field). Here the file is parsed by yyjson
 * (compiled from the yyjson wheel's own yyjson.c at build time: see setup.py), with the GIL
 * released, and the fields perfsleuth reads are written straight into typed buffers (bytearrays
 * that grow in place and are handed over as they are) that numpy and Arrow wrap without a copy. Strings are interned per column (first-occurrence order), so Python sees one str per
 * distinct category / name, never one per event.
 *
 * Memory stays bounded: the Python side feeds the traceEvents array in blocks; a structural scan
 * (strings and nesting) finds the last complete element of the buffer, that batch is parsed in
 * place as one array, its fields are copied out, and the bytes are dropped.
 *
 * The contract with the Python side (kineto_native.py):
 *   - an event whose every field has the JSON type the strict schema wants is "regular": its
 *     fields land in the columns (only events that become rows: ph "X", or ph "i" with cat
 *     "cpu_instant_event");
 *   - any other event (a string where an int belongs, an args that is not an object, a number
 *     beyond uint64 ...) is returned whole, as Python objects with its index, for the lenient
 *     coercion the reader applies to odd values. No event is silently dropped here.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <math.h>
#include "yyjson.h"

/* --- interned strings (one table per column) ------------------------------------------------- */

typedef struct {
    const char **ptr;
    size_t *len;
    int32_t *slots; /* open addressing: index + 1, 0 = empty */
    size_t count, cap, nslots;
} strtab;

static inline uint64_t load_word(const char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* every byte of a string shorter than 8 in one word (two overlapping 4-byte loads, or the 1-3 bytes) */
static inline uint64_t short_word(const char *s, size_t n) {
    if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, s, 4);
        memcpy(&hi, s + n - 4, 4);
        return ((uint64_t)hi << 32) | lo;
    }
    if (n == 0) return 0;
    return ((uint64_t)(unsigned char)s[0] << 16) | ((uint64_t)(unsigned char)s[n >> 1] << 8) | (unsigned char)s[n - 1];
}

static uint64_t hash_bytes(const char *s, size_t n) {
    /* 8 bytes at a time (kernel names are long); only for interning, not for anything an attacker can pick */
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = load_word(s + i);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    uint64_t w = n >= 8 ? load_word(s + n - 8) : short_word(s, n); /* the tail: fixed-size loads, no memcpy call */
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
}

static int strtab_init(strtab *t) {
    t->count = 0;
    t->cap = 64;
    t->nslots = 256;
    t->ptr = malloc(t->cap * sizeof(char *));
    t->len = malloc(t->cap * sizeof(size_t));
    t->slots = calloc(t->nslots, sizeof(int32_t));
    return t->ptr && t->len && t->slots;
}

static void strtab_free(strtab *t) {
    for (size_t i = 0; t->ptr && i < t->count; i++) free((void *)t->ptr[i]);
    free(t->ptr);
    free(t->len);
    free(t->slots);
}

static int strtab_grow(strtab *t) {
    size_t ns = t->nslots * 2;
    int32_t *slots = calloc(ns, sizeof(int32_t));
    if (!slots) return 0;
    for (size_t i = 0; i < t->count; i++) {
        uint64_t h = hash_bytes(t->ptr[i], t->len[i]) & (ns - 1);
        while (slots[h]) h = (h + 1) & (ns - 1);
        slots[h] = (int32_t)(i + 1);
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = ns;
    return 1;
}

/* index of the string, inserting it; -2 on memory failure */
static int32_t strtab_get(strtab *t, const char *s, size_t n) {
    uint64_t h = hash_bytes(s, n) & (t->nslots - 1);
    for (;;) {
        int32_t v = t->slots[h];
        if (!v) break;
        size_t i = (size_t)(v - 1);
        if (t->len[i] == n && memcmp(t->ptr[i], s, n) == 0) return (int32_t)i;
        h = (h + 1) & (t->nslots - 1);
    }
    if (t->count == t->cap) {
        size_t nc = t->cap * 2;
        const char **p = realloc(t->ptr, nc * sizeof(char *));
        if (!p) return -2;
        t->ptr = p;
        size_t *l = realloc(t->len, nc * sizeof(size_t));
        if (!l) return -2;
        t->len = l;
        t->cap = nc;
    }
    char *copy = malloc(n ? n : 1); /* the text it points into is dropped batch by batch */
    if (!copy) return -2;
    memcpy(copy, s, n);
    t->ptr[t->count] = copy;
    t->len[t->count] = n;
    t->slots[h] = (int32_t)(t->count + 1);
    t->count++;
    if (t->count * 2 > t->nslots && !strtab_grow(t)) return -2;
    return (int32_t)(t->count - 1);
}

static PyObject *strtab_list(strtab *t) {
    PyObject *out = PyList_New((Py_ssize_t)t->count);
    if (!out) return NULL;
    for (size_t i = 0; i < t->count; i++) {
        PyObject *s = PyUnicode_DecodeUTF8(t->ptr[i], (Py_ssize_t)t->len[i], "surrogatepass");
        if (!s) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, s);
    }
    return out;
}

/* --- the fields ------------------------------------------------------------------------------ */

/* integer args, in this order (the Python side names them the same way) */
enum {
    A_CORRELATION, A_EXTERNAL_ID, A_EXTERNAL_ID_LEGACY, A_DEVICE, A_STREAM, A_BYTES, A_IN_NELEMS, A_OUT_NELEMS,
    A_GROUP_SIZE, A_SEQ, A_MEM_BYTES, A_MEM_ALLOCATED, A_MEM_RESERVED, A_MEM_DEVICE, A_EV_IDX, N_INT_ARGS
};
static const char *INT_ARG_KEYS[N_INT_ARGS] = {
    "correlation", "External id", "external id", "device", "stream", "bytes", "In msg nelems", "Out msg nelems",
    "Group size", "Seq", "Bytes", "Total Allocated", "Total Reserved", "Device Id", "Ev Idx"};
enum { S_COLL_NAME, S_DTYPE, S_PG_NAME, S_PG_RANKS, N_STR_ARGS };
static const char *STR_ARG_KEYS[N_STR_ARGS] = {"Collective name", "dtype", "Process Group Name", "Process Group Ranks"};

static size_t INT_ARG_LEN[N_INT_ARGS], STR_ARG_LEN[N_STR_ARGS];
static unsigned char key_first[256]; /* first bytes of the keys above */

#define KEY_MAX_LEN 24
static int8_t KEYS_OF_LEN[KEY_MAX_LEN][N_INT_ARGS + N_STR_ARGS + 1]; /* key indices by length (str keys after ints), -1 ends */

static void init_keys(void) {
    int fill[KEY_MAX_LEN] = {0};
    memset(KEYS_OF_LEN, -1, sizeof KEYS_OF_LEN);
    for (int a = 0; a < N_INT_ARGS + N_STR_ARGS; a++) {
        const char *key = a < N_INT_ARGS ? INT_ARG_KEYS[a] : STR_ARG_KEYS[a - N_INT_ARGS];
        size_t n = strlen(key);
        if (a < N_INT_ARGS) INT_ARG_LEN[a] = n; else STR_ARG_LEN[a - N_INT_ARGS] = n;
        key_first[(unsigned char)key[0]] = 1;
        KEYS_OF_LEN[n][fill[n]++] = (int8_t)a;
    }
}

/* string columns: cat, name, pid/tid/stream labels, the four string args */
enum { T_CAT, T_NAME, T_PID, T_TID, T_STREAM, T_ARG0, N_TABLES = T_ARG0 + N_STR_ARGS };

/* tags of an integer cell */
#define TAG_NULL 0
#define TAG_INT 1   /* int64 value */
#define TAG_STR 2   /* a string: value is its index in the column's table */
#define TAG_BIG 3   /* an integer in (INT64_MAX, UINT64_MAX]: value holds its bits */
#define TAG_RAW 4   /* an integer beyond 64 bits (int|str fields only): value is its index in "bigs" */

/* Every column lives in a bytearray from the start: it grows in place (realloc) and is handed to
 * Python as it is at the end, so no column is ever copied and its pages are touched once. */
#define N_COLS (11 + 2 * N_INT_ARGS + N_STR_ARGS)

typedef struct {
    void **ptr;  /* the cols field that points into the bytearray */
    size_t elem; /* bytes per row */
} colref;

typedef struct {
    size_t n, cap;
    int64_t *index;
    int32_t *cat, *name;
    double *ts, *dur;
    uint8_t *ts_ok, *dur_ok;
    int64_t *pid, *tid;
    uint8_t *pid_tag, *tid_tag;
    int64_t *iarg[N_INT_ARGS];
    uint8_t *iarg_tag[N_INT_ARGS];
    int32_t *sarg[N_STR_ARGS];
    strtab tabs[N_TABLES];
    char *ranks_buf; /* formatted "Process Group Ranks" lists, kept alive for the tables */
    size_t ranks_len, ranks_cap;
    /* Ev Idx over every regular event (not only rows) */
    int64_t ev_count, ev_min, ev_max;
    uint64_t ev_big_max;
    int64_t ev_big_count;
    int check_finite;
    PyObject *bigs; /* Python ints of the TAG_RAW cells */
    PyObject *obj[N_COLS]; /* the bytearrays the column pointers point into */
    colref refs[N_COLS];
    int ncols;
    int iarg_slot[N_INT_ARGS]; /* registry slot of each int arg's values (its tags: the next slot) */
    size_t iarg_rows[N_INT_ARGS]; /* rows [0, iarg_rows) of a live int arg's column are written (later ones: null once filled) */
} cols;

static int cols_register(cols *c, void **ptr, size_t elem) {
    colref *ref = &c->refs[c->ncols];
    ref->ptr = ptr;
    ref->elem = elem;
    PyObject *o = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(c->cap * elem));
    c->obj[c->ncols++] = o;
    if (!o) return 0;
    *ptr = PyByteArray_AS_STRING(o);
    return 1;
}

/* an int arg's columns exist only once a row has a value for it (most args are on few kinds of
 * event, some on none: a column that stays null is never allocated and Python sees None) */
static int cols_register_lazy(cols *c, void **ptr, size_t elem) {
    c->refs[c->ncols].ptr = ptr;
    c->refs[c->ncols].elem = elem;
    c->obj[c->ncols++] = NULL;
    *ptr = NULL;
    return 1;
}

/* allocate a lazy column when a row first has a value for it (the rows before it are nulls, filled in by fill_nulls) */
static int cols_make_live(cols *c, int slot) {
    colref *ref = &c->refs[slot];
    PyObject *o = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(c->cap * ref->elem));
    if (!o) return 0;
    c->obj[slot] = o;
    *ref->ptr = PyByteArray_AS_STRING(o);
    return 1;
}

/* an int arg's cells are written only on the rows that have it: the rows since its last value are
 * null (value 0, tag 0), written here when the next value (or the end) comes */
static void fill_nulls(cols *c, int a, size_t upto) {
    size_t from = c->iarg_rows[a];
    if (from >= upto) return;
    memset(c->iarg[a] + from, 0, (upto - from) * sizeof(int64_t));
    memset(c->iarg_tag[a] + from, TAG_NULL, upto - from);
    c->iarg_rows[a] = upto;
}

static int cols_init(cols *c, size_t cap) {
    memset(c, 0, sizeof(*c));
    c->cap = cap;
    int ok = cols_register(c, (void **)&c->index, 8) && cols_register(c, (void **)&c->cat, 4) &&
             cols_register(c, (void **)&c->name, 4) && cols_register(c, (void **)&c->ts, 8) &&
             cols_register(c, (void **)&c->dur, 8) && cols_register(c, (void **)&c->ts_ok, 1) &&
             cols_register(c, (void **)&c->dur_ok, 1) && cols_register(c, (void **)&c->pid, 8) &&
             cols_register(c, (void **)&c->tid, 8) && cols_register(c, (void **)&c->pid_tag, 1) &&
             cols_register(c, (void **)&c->tid_tag, 1);
    for (int i = 0; ok && i < N_INT_ARGS; i++) {
        c->iarg_slot[i] = c->ncols;
        ok = cols_register_lazy(c, (void **)&c->iarg[i], 8) && cols_register_lazy(c, (void **)&c->iarg_tag[i], 1);
    }
    for (int i = 0; ok && i < N_STR_ARGS; i++) ok = cols_register(c, (void **)&c->sarg[i], 4);
    for (int i = 0; i < N_TABLES; i++) ok = strtab_init(&c->tabs[i]) && ok;
    c->ranks_cap = 1 << 16;
    c->ranks_buf = NULL;
    c->bigs = PyList_New(0);
    return ok && c->bigs;
}

static int cols_reserve(cols *c, size_t want) {
    if (want <= c->cap) return 1;
    size_t cap = c->cap * 3 / 2 + 1024;
    if (cap < want) cap = want;
    for (int i = 0; i < c->ncols; i++) {
        if (!c->obj[i]) continue; /* a lazy column not allocated yet */
        if (PyByteArray_Resize(c->obj[i], (Py_ssize_t)(cap * c->refs[i].elem)) < 0) return 0;
        *c->refs[i].ptr = PyByteArray_AS_STRING(c->obj[i]);
    }
    c->cap = cap;
    return 1;
}

static void cols_free(cols *c) {
    for (int i = 0; i < c->ncols; i++) Py_CLEAR(c->obj[i]);
    c->ncols = 0;
    for (int i = 0; i < N_TABLES; i++) strtab_free(&c->tabs[i]);
    Py_XDECREF(c->bigs);
    c->bigs = NULL;
}

/* new columns for the rows after a piece was handed over (take): the same registry, rows from 0,
 * each int arg lazy again; the interned strings, the ranks lists and the event counts carry on */
static int cols_renew(cols *c, size_t cap) {
    c->cap = cap;
    c->n = 0;
    for (int i = 0; i < c->ncols; i++) {
        int lazy = 0;
        for (int a = 0; a < N_INT_ARGS; a++) lazy |= (i == c->iarg_slot[a] || i == c->iarg_slot[a] + 1);
        Py_CLEAR(c->obj[i]);
        *c->refs[i].ptr = NULL;
        if (lazy) continue;
        PyObject *o = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(cap * c->refs[i].elem));
        if (!o) return 0;
        c->obj[i] = o;
        *c->refs[i].ptr = PyByteArray_AS_STRING(o);
    }
    for (int a = 0; a < N_INT_ARGS; a++) c->iarg_rows[a] = 0;
    return 1;
}

/* --- generic conversion (metadata and irregular events) -------------------------------------- */

static PyObject *to_py_at(yyjson_val *v, int depth);

static PyObject *to_py(yyjson_val *v) { return to_py_at(v, 0); }

static PyObject *to_py_at(yyjson_val *v, int depth) {
    if (depth > 1000) {
        PyErr_SetString(PyExc_RecursionError, "an event nests arrays or objects too deeply to decode");
        return NULL;
    }
    switch (yyjson_get_type(v)) {
    case YYJSON_TYPE_NULL: Py_RETURN_NONE;
    case YYJSON_TYPE_BOOL: return PyBool_FromLong(yyjson_get_bool(v));
    case YYJSON_TYPE_NUM:
        if (yyjson_is_uint(v)) return PyLong_FromUnsignedLongLong(yyjson_get_uint(v));
        if (yyjson_is_sint(v)) return PyLong_FromLongLong(yyjson_get_sint(v));
        return PyFloat_FromDouble(yyjson_get_real(v));
    case YYJSON_TYPE_RAW: { /* a number beyond 64 bits: as Python's json would read it */
        const char *s = yyjson_get_raw(v);
        size_t n = yyjson_get_len(v);
        int is_float = 0;
        for (size_t i = 0; i < n; i++) if (s[i] == '.' || s[i] == 'e' || s[i] == 'E') is_float = 1;
        PyObject *text = PyUnicode_FromStringAndSize(s, (Py_ssize_t)n);
        if (!text) return NULL;
        PyObject *out = is_float ? PyFloat_FromString(text) : PyLong_FromUnicodeObject(text, 10);
        Py_DECREF(text);
        return out;
    }
    case YYJSON_TYPE_STR: return PyUnicode_DecodeUTF8(yyjson_get_str(v), (Py_ssize_t)yyjson_get_len(v), "surrogatepass");
    case YYJSON_TYPE_ARR: {
        PyObject *out = PyList_New((Py_ssize_t)yyjson_arr_size(v));
        if (!out) return NULL;
        size_t i, max;
        yyjson_val *x;
        yyjson_arr_foreach(v, i, max, x) {
            PyObject *item = to_py_at(x, depth + 1);
            if (!item) { Py_DECREF(out); return NULL; }
            PyList_SET_ITEM(out, (Py_ssize_t)i, item);
        }
        return out;
    }
    case YYJSON_TYPE_OBJ: {
        PyObject *out = PyDict_New();
        if (!out) return NULL;
        size_t i, max;
        yyjson_val *k, *x;
        yyjson_obj_foreach(v, i, max, k, x) {
            PyObject *key = PyUnicode_DecodeUTF8(yyjson_get_str(k), (Py_ssize_t)yyjson_get_len(k), "surrogatepass");
            PyObject *item = key ? to_py_at(x, depth + 1) : NULL;
            if (!item || PyDict_SetItem(out, key, item) < 0) {
                Py_XDECREF(key); Py_XDECREF(item); Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(key);
            Py_DECREF(item);
        }
        return out;
    }
    default: Py_RETURN_NONE;
    }
}

/* --- one event ------------------------------------------------------------------------------- */

static inline int key_is(yyjson_val *k, const char *lit, size_t n) {
    return yyjson_get_len(k) == n && memcmp(yyjson_get_str(k), lit, n) == 0;
}

static inline int is_null(yyjson_val *v) { return v == NULL || yyjson_is_null(v); }

static inline int nonfinite(yyjson_val *v) { return v && yyjson_is_real(v) && !isfinite(yyjson_get_real(v)); }

/* an integer cell: 1 ok (tag/value set), 0 not an integer of 64 bits */
static inline int int_cell(yyjson_val *v, int allow_str, int64_t *val, uint8_t *tag) {
    if (is_null(v)) { *tag = TAG_NULL; *val = 0; return 1; }
    if (yyjson_is_sint(v)) { *tag = TAG_INT; *val = yyjson_get_sint(v); return 1; }
    if (yyjson_is_uint(v)) {
        uint64_t u = yyjson_get_uint(v);
        if (u <= (uint64_t)INT64_MAX) { *tag = TAG_INT; *val = (int64_t)u; }
        else { *tag = TAG_BIG; *val = (int64_t)u; }
        return 1;
    }
    if (allow_str && yyjson_is_str(v)) { *tag = TAG_STR; return 1; }
    return 0;
}

/* an integer beyond 64 bits: kept as a Python int, as a JSON decoder gives it (the reader says it cannot use it) */
static inline int raw_cell(cols *c, yyjson_val *v, int64_t *val, uint8_t *tag) {
    if (!v || !yyjson_is_raw(v)) return 0;
    const char *s = yyjson_get_raw(v);
    size_t n = yyjson_get_len(v);
    for (size_t i = 0; i < n; i++) if (s[i] == '.' || s[i] == 'e' || s[i] == 'E') return 0; /* a float: irregular */
    PyObject *text = PyUnicode_FromStringAndSize(s, (Py_ssize_t)n);
    PyObject *num = text ? PyLong_FromUnicodeObject(text, 10) : NULL;
    Py_XDECREF(text);
    if (!num) { PyErr_Clear(); return 0; }
    *val = (int64_t)PyList_GET_SIZE(c->bigs);
    int rc = PyList_Append(c->bigs, num);
    Py_DECREF(num);
    if (rc < 0) { PyErr_Clear(); return 0; }
    *tag = TAG_RAW;
    return 1;
}

static inline int num_cell(yyjson_val *v, double *val, uint8_t *ok) {
    if (is_null(v)) { *ok = 0; *val = 0.0; return 1; }
    if (yyjson_is_real(v)) { *ok = 1; *val = yyjson_get_real(v); return 1; }
    if (yyjson_is_sint(v)) { *ok = 1; *val = (double)yyjson_get_sint(v); return 1; }
    if (yyjson_is_uint(v)) { *ok = 1; *val = (double)yyjson_get_uint(v); return 1; }
    return 0;
}

static int format_ranks(cols *c, yyjson_val *arr, const char **out, size_t *outlen) {
    /* Python's str(list_of_ints): "[0, 1, 2]"; 0 when an element is no 64-bit integer */
    size_t need = 2 + yyjson_arr_size(arr) * 22;
    if (!c->ranks_buf || c->ranks_len + need > c->ranks_cap) {
        /* a new block; old blocks stay alive (they are referenced by the table), kept in a chain */
        size_t cap = need > c->ranks_cap ? need : c->ranks_cap;
        char *blk = malloc(cap + sizeof(char *));
        if (!blk) return -1;
        *(char **)blk = c->ranks_buf ? c->ranks_buf - sizeof(char *) : NULL;
        c->ranks_buf = blk + sizeof(char *);
        c->ranks_len = 0;
        c->ranks_cap = cap;
    }
    char *p = c->ranks_buf + c->ranks_len, *start = p;
    *p++ = '[';
    size_t i, max;
    yyjson_val *x;
    yyjson_arr_foreach(arr, i, max, x) {
        if (i) { *p++ = ','; *p++ = ' '; }
        if (yyjson_is_sint(x)) p += sprintf(p, "%lld", (long long)yyjson_get_sint(x));
        else if (yyjson_is_uint(x)) p += sprintf(p, "%llu", (unsigned long long)yyjson_get_uint(x));
        else return 0;
    }
    *p++ = ']';
    *out = start;
    *outlen = (size_t)(p - start);
    c->ranks_len += *outlen;
    return 1;
}

static void free_ranks(cols *c) {
    if (!c->ranks_buf) return;
    char *blk = c->ranks_buf - sizeof(char *);
    while (blk) {
        char *prev = *(char **)blk;
        free(blk);
        blk = prev ? prev : NULL;
    }
    c->ranks_buf = NULL;
}

/* 1 row written or event skipped, 0 irregular, -1 memory error */
static int one_event(cols *c, yyjson_val *ev, int64_t index) {
    if (!yyjson_is_obj(ev)) return 0;
    yyjson_val *ph = NULL, *cat = NULL, *name = NULL, *pid = NULL, *tid = NULL, *ts = NULL, *dur = NULL, *args = NULL;
    size_t i, max;
    yyjson_val *k, *v;
    yyjson_obj_foreach(ev, i, max, k, v) {
        size_t n = yyjson_get_len(k);
        const char *s = yyjson_get_str(k);
        switch (n) {
        case 2:
            if (s[0] == 'p' && s[1] == 'h') ph = v;
            else if (s[0] == 't' && s[1] == 's') ts = v;
            break;
        case 3:
            if (memcmp(s, "cat", 3) == 0) cat = v;
            else if (memcmp(s, "pid", 3) == 0) pid = v;
            else if (memcmp(s, "tid", 3) == 0) tid = v;
            else if (memcmp(s, "dur", 3) == 0) dur = v;
            break;
        case 4:
            if (memcmp(s, "name", 4) == 0) name = v;
            else if (memcmp(s, "args", 4) == 0) args = v;
            break;
        }
    }
    /* the strict schema: ph/name str, cat str|null, pid/tid int|str|null, ts/dur number|null, args object */
    if (ph && !yyjson_is_str(ph)) return 0;
    if (name && !yyjson_is_str(name)) return 0;
    if (cat && !yyjson_is_str(cat) && !yyjson_is_null(cat)) return 0;
    if (args && !yyjson_is_obj(args)) return 0;
    int64_t pidv = 0, tidv = 0;
    uint8_t pidt, tidt, tsok, durok;
    double tsv, durv;
    if (!int_cell(pid, 1, &pidv, &pidt) && !raw_cell(c, pid, &pidv, &pidt)) return 0;
    if (!int_cell(tid, 1, &tidv, &tidt) && !raw_cell(c, tid, &tidv, &tidt)) return 0;
    if (!num_cell(ts, &tsv, &tsok) || !num_cell(dur, &durv, &durok)) return 0;
    yyjson_val *iv[N_INT_ARGS] = {0}, *sv[N_STR_ARGS] = {0};
    uint32_t present = 0; /* bit a: the event has int arg a (most have one or two of the fifteen) */
    if (args) {
        yyjson_obj_foreach(args, i, max, k, v) {
            size_t n = yyjson_get_len(k);
            const char *s = yyjson_get_str(k);
            if (n >= KEY_MAX_LEN || !key_first[(unsigned char)s[0]]) continue; /* most args are none of ours */
            for (const int8_t *a = KEYS_OF_LEN[n]; *a >= 0; a++) {
                int k = *a;
                if (k < N_INT_ARGS) { if (memcmp(INT_ARG_KEYS[k], s, n) == 0) { iv[k] = v; present |= 1u << k; break; } }
                else if (memcmp(STR_ARG_KEYS[k - N_INT_ARGS], s, n) == 0) { sv[k - N_INT_ARGS] = v; break; }
            }
        }
    }
    int64_t ival[N_INT_ARGS] = {0};
    uint8_t itag[N_INT_ARGS] = {TAG_NULL};
    for (uint32_t m = present; m; m &= m - 1) { /* in arg order, as the bigs list is filled */
        int a = __builtin_ctz(m);
        if (!int_cell(iv[a], a == A_STREAM, &ival[a], &itag[a]) && !raw_cell(c, iv[a], &ival[a], &itag[a])) return 0;
    }
    for (int a = 0; a < N_STR_ARGS; a++) {
        if (is_null(sv[a]) || yyjson_is_str(sv[a])) continue;
        if (a == S_PG_RANKS && yyjson_is_arr(sv[a])) {
            yyjson_val *x;
            size_t j, jm;
            yyjson_arr_foreach(sv[a], j, jm, x) if (!yyjson_is_int(x)) return 0;
            continue;
        }
        return 0;
    }
    if (c->check_finite && (nonfinite(ts) || nonfinite(dur))) return 0;
    /* regular: Ev Idx counts for every event */
    if (itag[A_EV_IDX] == TAG_INT) {
        int64_t e = ival[A_EV_IDX];
        if (c->ev_count == 0 || e < c->ev_min) c->ev_min = e;
        if (c->ev_count == 0 || e > c->ev_max) c->ev_max = e;
        c->ev_count++;
    } else if (itag[A_EV_IDX] == TAG_RAW) {
        c->ev_big_count++;
    } else if (itag[A_EV_IDX] == TAG_BIG) {
        uint64_t u = (uint64_t)ival[A_EV_IDX];
        if (c->ev_big_count == 0 || u > c->ev_big_max) c->ev_big_max = u;
        c->ev_big_count++;
    }
    /* a row: "X" events, and the allocator's instant events */
    const char *phs = ph ? yyjson_get_str(ph) : "";
    size_t phn = ph ? yyjson_get_len(ph) : 0;
    int is_cat_str = cat && yyjson_is_str(cat);
    int keep = (phn == 1 && phs[0] == 'X') ||
               (phn == 1 && phs[0] == 'i' && is_cat_str && key_is(cat, "cpu_instant_event", 17));
    if (!keep) return 1;
    if (!cols_reserve(c, c->n + 1)) return -1;
    size_t r = c->n++;
    c->index[r] = index;
    c->cat[r] = is_cat_str ? strtab_get(&c->tabs[T_CAT], yyjson_get_str(cat), yyjson_get_len(cat)) : -1;
    c->name[r] = name ? strtab_get(&c->tabs[T_NAME], yyjson_get_str(name), yyjson_get_len(name))
                      : strtab_get(&c->tabs[T_NAME], "", 0);
    if (c->cat[r] == -2 || c->name[r] == -2) return -1;
    c->ts[r] = tsv; c->ts_ok[r] = tsok;
    c->dur[r] = durv; c->dur_ok[r] = durok;
    if (pidt == TAG_STR) pidv = strtab_get(&c->tabs[T_PID], yyjson_get_str(pid), yyjson_get_len(pid));
    if (tidt == TAG_STR) tidv = strtab_get(&c->tabs[T_TID], yyjson_get_str(tid), yyjson_get_len(tid));
    if (pidv == -2 && pidt == TAG_STR) return -1;
    if (tidv == -2 && tidt == TAG_STR) return -1;
    c->pid[r] = pidv; c->pid_tag[r] = pidt;
    c->tid[r] = tidv; c->tid_tag[r] = tidt;
    if (itag[A_STREAM] == TAG_STR) {
        ival[A_STREAM] = strtab_get(&c->tabs[T_STREAM], yyjson_get_str(iv[A_STREAM]), yyjson_get_len(iv[A_STREAM]));
        if (ival[A_STREAM] == -2) return -1;
    }
    for (uint32_t m = present & ~(1u << A_EV_IDX); m; m &= m - 1) { /* Ev Idx is only counted (above), never a column */
        int a = __builtin_ctz(m);
        if (itag[a] == TAG_NULL) continue; /* a null: left to fill_nulls */
        if (!c->iarg[a] && (!cols_make_live(c, c->iarg_slot[a]) || !cols_make_live(c, c->iarg_slot[a] + 1))) return -1;
        fill_nulls(c, a, r);
        c->iarg[a][r] = ival[a];
        c->iarg_tag[a][r] = itag[a];
        c->iarg_rows[a] = r + 1;
    }
    for (int a = 0; a < N_STR_ARGS; a++) {
        int32_t idx = -1;
        if (sv[a] && yyjson_is_str(sv[a])) {
            idx = strtab_get(&c->tabs[T_ARG0 + a], yyjson_get_str(sv[a]), yyjson_get_len(sv[a]));
        } else if (sv[a] && yyjson_is_arr(sv[a])) {
            const char *s;
            size_t n;
            int ok = format_ranks(c, sv[a], &s, &n);
            if (ok < 0) return -1;
            if (ok == 0) return 0; /* cannot happen: checked above */
            idx = strtab_get(&c->tabs[T_ARG0 + a], s, n);
        }
        if (idx == -2) return -1;
        c->sarg[a][r] = idx;
    }
    return 1;
}

/* --- results ------------------------------------------------------------------------------- */

/* a column handed to Python: its bytearray, cut to the rows written (the reader lets go of it) */
#define TAKE(ptr, n) take_col(c, (void **)&(ptr), (n))
static PyObject *take_col(cols *c, void **field, size_t nbytes) {
    for (int i = 0; i < c->ncols; i++) {
        if (c->refs[i].ptr != field) continue;
        if (!c->obj[i]) Py_RETURN_NONE; /* a lazy column no row filled: all null */
        PyObject *out = c->obj[i];
        c->obj[i] = NULL;
        *field = NULL;
        if (PyByteArray_Resize(out, (Py_ssize_t)nbytes) < 0) { Py_DECREF(out); return NULL; }
        return out;
    }
    PyErr_SetString(PyExc_RuntimeError, "a column was handed over twice");
    return NULL;
}

static int put(PyObject *d, const char *key, PyObject *v) {
    if (!v) return 0;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc == 0;
}

static PyObject *build_result(cols *c, PyObject *irregular, size_t total) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    size_t n = c->n;
    int ok = put(d, "rows", PyLong_FromSize_t(n)) && put(d, "events", PyLong_FromSize_t(total)) &&
             put(d, "index", TAKE(c->index, n * 8)) && put(d, "cat", TAKE(c->cat, n * 4)) &&
             put(d, "name", TAKE(c->name, n * 4)) && put(d, "ts", TAKE(c->ts, n * 8)) &&
             put(d, "dur", TAKE(c->dur, n * 8)) && put(d, "ts_ok", TAKE(c->ts_ok, n)) &&
             put(d, "dur_ok", TAKE(c->dur_ok, n)) && put(d, "pid", TAKE(c->pid, n * 8)) &&
             put(d, "tid", TAKE(c->tid, n * 8)) && put(d, "pid_tag", TAKE(c->pid_tag, n)) &&
             put(d, "tid_tag", TAKE(c->tid_tag, n));
    for (int a = 0; a < N_INT_ARGS; a++)
        if (c->iarg[a]) fill_nulls(c, a, n);
    PyObject *ints = ok ? PyDict_New() : NULL, *tags = ok ? PyDict_New() : NULL, *strs = ok ? PyDict_New() : NULL;
    PyObject *tabs = ok ? PyDict_New() : NULL;
    ok = ok && ints && tags && strs && tabs;
    for (int a = 0; ok && a < N_INT_ARGS; a++)
        ok = put(ints, INT_ARG_KEYS[a], TAKE(c->iarg[a], n * 8)) && put(tags, INT_ARG_KEYS[a], TAKE(c->iarg_tag[a], n));
    for (int a = 0; ok && a < N_STR_ARGS; a++) ok = put(strs, STR_ARG_KEYS[a], TAKE(c->sarg[a], n * 4));
    static const char *TAB_NAMES[N_TABLES] = {"cat", "name", "pid", "tid", "stream",
                                              "Collective name", "dtype", "Process Group Name", "Process Group Ranks"};
    for (int t = 0; ok && t < N_TABLES; t++) ok = put(tabs, TAB_NAMES[t], strtab_list(&c->tabs[t]));
    if (ok) {
        ok = put(d, "int_args", ints) && put(d, "int_tags", tags) && put(d, "str_args", strs) && put(d, "strings", tabs);
    } else {
        Py_XDECREF(ints); Py_XDECREF(tags); Py_XDECREF(strs); Py_XDECREF(tabs);
    }
    PyObject *ev = ok ? Py_BuildValue("(LLLKL)", (long long)c->ev_count, (long long)c->ev_min, (long long)c->ev_max,
                                      (unsigned long long)c->ev_big_max, (long long)c->ev_big_count) : NULL;
    ok = ok && put(d, "ev_idx", ev);
    if (ok) {
        Py_INCREF(c->bigs);
        ok = put(d, "bigs", c->bigs);
    }
    if (ok) {
        Py_INCREF(irregular);
        ok = put(d, "irregular", irregular);
    }
    if (!ok) { Py_DECREF(d); return NULL; }
    return d;
}

/* --- the streaming reader -------------------------------------------------------------------- */

typedef struct {
    cols c;
    char *buf;          /* unconsumed text, then YYJSON_PADDING_SIZE spare bytes */
    size_t len, cap;
    size_t base;        /* offset of buf[0] in the text the caller fed (the whole file's, if it adds its start) */
    size_t scan;        /* how far buf has been scanned */
    int depth, in_str, esc;
    size_t last_sep;    /* position in buf of the last ',' at depth 0 found by the scan (or SIZE_MAX) */
    int closed;         /* the array's ']' was seen */
    size_t close_pos;   /* its position in buf */
    int64_t next_index; /* index of the first element in buf */
    int64_t seps;       /* separators consumed */
    int finished;       /* finish() handed the columns over */
    PyObject *irregular;
    char *tmp;          /* the batch being parsed, "[" + elements + "]" + padding */
    size_t tmp_cap;
    char *pool;         /* yyjson's values for one batch (reused: no page faults per batch) */
    size_t pool_cap;
    yyjson_alc alc;
    char *error;        /* first input error, with its offset */
    size_t error_pos;
} reader;

static void reader_free(PyObject *cap) {
    reader *r = PyCapsule_GetPointer(cap, "perfsleuth.kineto_reader");
    if (!r) return;
    free_ranks(&r->c);
    cols_free(&r->c);
    free(r->buf);
    free(r->tmp);
    free(r->pool);
    free(r->error);
    Py_XDECREF(r->irregular);
    free(r);
}

/* reader(rows_hint=0): ``rows_hint`` is how many rows the caller expects (from the text's size):
 * the columns are reserved for that many up front (pages no row reaches are never touched), so they
 * are not copied as they grow */
static PyObject *reader_new(PyObject *self, PyObject *args) {
    Py_ssize_t hint = 0;
    if (!PyArg_ParseTuple(args, "|n", &hint)) return NULL;
    reader *r = calloc(1, sizeof(reader));
    if (!r) return PyErr_NoMemory();
    if (!cols_init(&r->c, hint > 1024 ? (size_t)hint : 1024)) { cols_free(&r->c); free(r); return PyErr_NoMemory(); }
    r->cap = 1 << 20;
    r->buf = malloc(r->cap + YYJSON_PADDING_SIZE);
    r->irregular = PyList_New(0);
    r->last_sep = (size_t)-1;
    if (!r->buf || !r->irregular) { free(r->buf); Py_XDECREF(r->irregular); cols_free(&r->c); free(r); return PyErr_NoMemory(); }
    PyObject *cap = PyCapsule_New(r, "perfsleuth.kineto_reader", reader_free);
    if (!cap) { free(r->buf); Py_DECREF(r->irregular); cols_free(&r->c); free(r); }
    return cap;
}

static int ensure_tmp(reader *r, size_t end) {
    if (end + 2 + YYJSON_PADDING_SIZE > r->tmp_cap) {
        size_t cap = end + 2 + YYJSON_PADDING_SIZE;
        char *t = realloc(r->tmp, cap);
        if (!t) return 0;
        r->tmp = t;
        r->tmp_cap = cap;
    }
    size_t need = yyjson_read_max_memory_usage(end + 2, YYJSON_READ_INSITU);
    if (need > r->pool_cap) {
        free(r->pool);
        r->pool = malloc(need);
        r->pool_cap = r->pool ? need : 0;
        if (!r->pool) return 0;
    }
    return 1;
}

/* the batch's text: what is left of earlier blocks (``head``), then the start of the block being fed (``more``) */
typedef struct {
    const char *head;
    size_t head_len;
    const char *more;
    size_t more_len;
} batch_text;

static void fill_tmp(reader *r, batch_text t) {
    yyjson_alc_pool_init(&r->alc, r->pool, r->pool_cap); /* the pool is empty again for each parse */
    size_t end = t.head_len + t.more_len;
    r->tmp[0] = '[';
    memcpy(r->tmp + 1, t.head, t.head_len);
    if (t.more_len) memcpy(r->tmp + 1 + t.head_len, t.more, t.more_len);
    r->tmp[end + 1] = ']';
    memset(r->tmp + end + 2, 0, YYJSON_PADDING_SIZE);
}

static void set_error(reader *r, const char *msg, size_t pos) {
    if (r->error) return;
    r->error = strdup(msg);
    r->error_pos = pos;
}

/* no event nests deeper than this (a corrupted file could nest a million deep; Python's decoders stop near here) */
#define MAX_DEPTH 1000

/* bytes that matter to the scan, outside and inside strings */
static unsigned char OUT_SPECIAL[256], IN_SPECIAL[256];

static void init_scan(void) {
    const char *out = "\"{}[],";
    for (const char *p = out; *p; p++) OUT_SPECIAL[(unsigned char)*p] = 1;
    IN_SPECIAL['"'] = 1;
    IN_SPECIAL['\\'] = 1;
}

/* scan buf[scan:len] for strings, nesting, ',' and the closing ']' at depth 0 */
static void scan_text(reader *r) {
    const unsigned char *b = (const unsigned char *)r->buf;
    size_t i = r->scan, n = r->len;
    int depth = r->depth, in_str = r->in_str, esc = r->esc;
    while (i < n && !r->closed) {
        if (in_str) {
            if (esc) { esc = 0; i++; continue; }
            while (i < n && !IN_SPECIAL[b[i]]) i++;
            if (i >= n) break;
            if (b[i] == '\\') esc = 1;
            else in_str = 0;
            i++;
            continue;
        }
        while (i < n && !OUT_SPECIAL[b[i]]) i++;
        if (i >= n) break;
        switch (b[i]) {
        case '"': in_str = 1; break;
        case '{': case '[':
            if (++depth > MAX_DEPTH) { set_error(r, "too deep", (size_t)r->next_index); r->closed = 1; r->close_pos = i; }
            break;
        case '}':
            if (depth == 0) { set_error(r, "an unmatched '}' in the traceEvents array", r->base + i); r->closed = 1; r->close_pos = i; }
            else depth--;
            break;
        case ']':
            if (depth == 0) { r->closed = 1; r->close_pos = i; }
            else depth--;
            break;
        case ',':
            if (depth == 0) r->last_sep = i;
            break;
        }
        i++;
    }
    r->scan = i;
    r->depth = depth;
    r->in_str = in_str;
    r->esc = esc;
}

static int has_literal(const char *s, size_t n) {
    return memmem(s, n, "NaN", 3) != NULL || memmem(s, n, "Infinity", 8) != NULL;
}

static int all_space(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t') return 0;
    return 1;
}

/* parse ``t`` (complete elements, separators between them) as one array; 1 ok, 0 input error
 * (``quiet``: 0 = not a batch, nothing recorded), -1 memory. Only a quiet parse may have ``more``
 * text: the error and NaN paths read the batch's text as buf[0:end). */
static int parse_text(reader *r, batch_text t, int quiet) {
    size_t end = t.head_len + t.more_len;
    /* an empty batch (only whitespace) is nothing */
    if (all_space(t.head, t.head_len) && all_space(t.more, t.more_len)) {
        if (r->next_index > 0 || r->seps > 0) { set_error(r, "an empty element (a comma with no event after it)", r->base + end); return 0; }
        return 1;
    }
    /* the batch becomes "[" + elements + "]" in a buffer of the reader's (parsed in place) */
    if (!ensure_tmp(r, end)) return -1;
    yyjson_read_err err;
    yyjson_read_flag flg = YYJSON_READ_INSITU | YYJSON_READ_BIGNUM_AS_RAW;
    yyjson_doc *doc;
    Py_BEGIN_ALLOW_THREADS /* the copy reads the reader's buffer and the fed block (held by the caller); the parse only the copy */
    fill_tmp(r, t);
    doc = yyjson_read_opts(r->tmp, end + 2, flg, &r->alc, &err);
    Py_END_ALLOW_THREADS
    int literals = 0;
    char *copy = NULL;
    if (!doc && quiet) return 0;
    if (!doc && t.more_len) return 0; /* cannot happen: only quiet parses are given more text */
    if (!doc && has_literal(r->buf, end)) {
        /* NaN/Infinity (Python's json.dumps writes them): read them, and keep the text of their events */
        literals = 1;
        Py_BEGIN_ALLOW_THREADS
        fill_tmp(r, t);
        doc = yyjson_read_opts(r->tmp, end + 2, flg | YYJSON_READ_ALLOW_INF_AND_NAN, &r->alc, &err);
        Py_END_ALLOW_THREADS
        copy = r->buf; /* still the original text: the parse was in a copy */
    }
    if (!doc) {
        size_t pos = err.pos > 0 ? err.pos - 1 : 0;
        char msg[256];
        snprintf(msg, sizeof msg, "%s", err.msg ? err.msg : "invalid JSON");
        set_error(r, msg, r->base + pos);
        return 0;
    }
    yyjson_val *root = yyjson_doc_get_root(doc);
    /* element byte spans are needed only for events with literals: recover them by a second scan of the copy */
    size_t *starts = NULL, nstarts = 0;
    if (literals) {
        size_t count = yyjson_arr_size(root);
        starts = malloc((count + 1) * sizeof(size_t));
        if (!starts) { yyjson_doc_free(doc); return -1; }
        int depth = 0, in_str = 0, esc = 0;
        starts[nstarts++] = 0;
        for (size_t i = 0; i < end; i++) {
            char ch = copy[i];
            if (in_str) { if (esc) esc = 0; else if (ch == '\\') esc = 1; else if (ch == '"') in_str = 0; continue; }
            if (ch == '"') in_str = 1;
            else if (ch == '{' || ch == '[') depth++;
            else if (ch == '}' || ch == ']') depth--;
            else if (ch == ',' && depth == 0 && nstarts <= count) starts[nstarts++] = i + 1;
        }
    }
    r->c.check_finite = literals;
    int rc = 1;
    size_t i, max;
    yyjson_val *ev;
    yyjson_arr_foreach(root, i, max, ev) {
        int64_t index = r->next_index + (int64_t)i;
        int got;
        int has_nonfinite = 0;
        if (literals) {
            /* any non-finite number anywhere in the event sends it to the caller as text */
            yyjson_val *end_v = unsafe_yyjson_get_next(ev);
            for (yyjson_val *x = ev; x < end_v; x++) if (yyjson_is_real(x) && !isfinite(yyjson_get_real(x))) { has_nonfinite = 1; break; }
        }
        if (has_nonfinite) {
            size_t a = starts[i], b = (i + 1 < nstarts) ? starts[i + 1] - 1 : end;
            PyObject *text = PyBytes_FromStringAndSize(copy + a, (Py_ssize_t)(b - a));
            PyObject *item = text ? Py_BuildValue("(nOn)", (Py_ssize_t)index, text, (Py_ssize_t)(r->base + a)) : NULL;
            Py_XDECREF(text);
            if (!item || PyList_Append(r->irregular, item) < 0) { Py_XDECREF(item); rc = -1; break; }
            Py_DECREF(item);
            continue;
        }
        got = one_event(&r->c, ev, index);
        if (got < 0) { rc = -1; break; }
        if (got == 0) {
            PyObject *obj = to_py(ev);
            PyObject *item = obj ? Py_BuildValue("(nNO)", (Py_ssize_t)index, obj, Py_None) : NULL;
            if (!item || PyList_Append(r->irregular, item) < 0) { Py_XDECREF(item); rc = -1; break; }
            Py_DECREF(item);
        }
    }
    r->next_index += (int64_t)yyjson_arr_size(root);
    yyjson_doc_free(doc);
    free(starts);
    return rc;
}

/* parse buf[0:end) */
static int parse_batch(reader *r, size_t end, int quiet) {
    batch_text t = {r->buf, end, NULL, 0};
    return parse_text(r, t, quiet);
}

/* drop buf[0:upto) once parsed; what is left starts at an element boundary, so its scan restarts there */
static void consume_parsed(reader *r, size_t upto) {
    memmove(r->buf, r->buf + upto, r->len - upto);
    r->len -= upto;
    r->base += upto;
    if (r->closed) {
        r->close_pos -= upto;
        r->scan -= upto;
    } else {
        r->seps++;
        r->scan = 0;
        r->depth = r->in_str = r->esc = 0;
    }
    r->last_sep = (size_t)-1;
}

/* consume buf[0:upto): the complete elements; upto is one past a separator, or the close */
static int consume(reader *r, size_t elems_end, size_t upto) {
    int rc = parse_batch(r, elems_end, 0);
    if (rc < 0) return -1;
    consume_parsed(r, upto);
    return rc;
}

/* The cheap way to the last complete element: the last "}" followed by "," (after whitespace) is
 * a candidate cut; "[" + text + "]" parses only if it is one (a cut inside a string leaves it
 * unterminated, one inside nesting leaves it unbalanced), so a parse that succeeds proves the cut
 * and no byte had to be scanned. 1 consumed, 0 no candidate worked (scan instead), -1 memory. */
static int fast_cut(reader *r) {
    if (r->scan != 0 || r->len < 2) return 0; /* a scan is under way: let it finish */
    const char *b = r->buf;
    size_t i = r->len;
    for (int tries = 0; tries < 4; tries++) {
        const char *comma = NULL;
        while (i > 1) {
            const char *c = memrchr(b, ',', i);
            if (!c) return 0;
            size_t j = (size_t)(c - b);
            size_t k = j;
            while (k > 0 && (b[k - 1] == ' ' || b[k - 1] == '\n' || b[k - 1] == '\r' || b[k - 1] == '\t')) k--;
            i = j;
            if (k > 0 && b[k - 1] == '}') { comma = c; break; }
        }
        if (!comma) return 0;
        size_t sep = (size_t)(comma - b);
        int rc = parse_batch(r, sep, 1);
        if (rc < 0) return -1;
        if (rc == 1) {
            consume_parsed(r, sep + 1);
            return 1;
        }
    }
    return 0;
}

/* keep ``rest`` (the partial element after a parsed cut) as the reader's text: buf held
 * buf[0:len) + the block up to its separator, which are consumed */
static int keep_rest(reader *r, size_t consumed, const char *rest, size_t n) {
    if (n > r->cap) {
        size_t cap = r->cap;
        while (cap < n) cap *= 2;
        char *b = realloc(r->buf, cap + YYJSON_PADDING_SIZE);
        if (!b) return 0;
        r->buf = b;
        r->cap = cap;
    }
    memcpy(r->buf, rest, n);
    r->len = n;
    r->base += consumed;
    r->seps++;
    r->scan = 0;
    r->depth = r->in_str = r->esc = 0;
    r->last_sep = (size_t)-1;
    return 1;
}

/* fast_cut on the text buf + block without first appending the block to buf (that copy is the
 * one saved): the last candidate cuts of the block are tried, the batch "[" + buf + block up to
 * the cut + "]" is put together in the parse buffer. 1 consumed, 0 no candidate in the block,
 * 2 candidates failed (scan instead), -1 memory. */
static int fast_cut_block(reader *r, const char *b, size_t n) {
    if (r->scan != 0) return 0; /* a scan is under way: let it finish */
    size_t i = n;
    int tried = 0;
    while (tried < 4 && i > 1) {
        const char *c = memrchr(b, ',', i);
        if (!c) break;
        size_t sep = (size_t)(c - b), k = sep;
        while (k > 0 && (b[k - 1] == ' ' || b[k - 1] == '\n' || b[k - 1] == '\r' || b[k - 1] == '\t')) k--;
        i = sep;
        if (k == 0 || b[k - 1] != '}') continue; /* not after an object (or its '}' is in buf: left to fast_cut) */
        tried++;
        batch_text t = {r->buf, r->len, b, sep};
        int rc = parse_text(r, t, 1);
        if (rc < 0) return -1;
        if (rc == 1) return keep_rest(r, r->len + sep + 1, b + sep + 1, n - sep - 1) ? 1 : -1;
    }
    return tried ? 2 : 0;
}

/* feed(reader, data): append text of the array (after its '['), parse what is complete */
static PyObject *reader_feed(PyObject *self, PyObject *args) {
    PyObject *cap;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "Oy*", &cap, &view)) return NULL;
    reader *r = PyCapsule_GetPointer(cap, "perfsleuth.kineto_reader");
    if (!r) { PyBuffer_Release(&view); return NULL; }
    if (r->closed || r->error || r->finished) { PyBuffer_Release(&view); Py_RETURN_FALSE; }
    size_t n = (size_t)view.len;
    int rc = fast_cut_block(r, view.buf, n);
    if (rc == 1 || rc < 0) {
        PyBuffer_Release(&view);
        if (rc < 0) return PyErr_Occurred() ? NULL : PyErr_NoMemory();
        Py_RETURN_FALSE;
    }
    int block_failed = rc == 2;
    if (r->len + n > r->cap) {
        size_t cap2 = r->cap;
        while (cap2 < r->len + n) cap2 *= 2;
        char *b = realloc(r->buf, cap2 + YYJSON_PADDING_SIZE);
        if (!b) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
        r->buf = b;
        r->cap = cap2;
    }
    memcpy(r->buf + r->len, view.buf, n);
    r->len += n;
    PyBuffer_Release(&view);
    rc = block_failed ? 0 : fast_cut(r);
    if (rc == 0) { /* no candidate parsed: find the boundary by scanning */
        scan_text(r);
        if (r->closed && !r->error) rc = consume(r, r->close_pos, r->close_pos);
        else if (r->last_sep != (size_t)-1) rc = consume(r, r->last_sep, r->last_sep + 1);
    }
    if (rc < 0) return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    return PyBool_FromLong(r->closed);
}

/* finish(reader) -> dict of columns; "closed" says whether the array ended, "tail" is the text after it */
static PyObject *reader_finish(PyObject *self, PyObject *args) {
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap)) return NULL;
    reader *r = PyCapsule_GetPointer(cap, "perfsleuth.kineto_reader");
    if (!r) return NULL;
    if (r->finished) { PyErr_SetString(PyExc_RuntimeError, "finish() was already called on this reader"); return NULL; }
    r->finished = 1;
    if (!r->closed && !r->error) { /* the last block: scan it for the array's end */
        scan_text(r);
        int rc = 1;
        if (r->closed && !r->error) rc = consume(r, r->close_pos, r->close_pos);
        else if (!r->closed && r->last_sep != (size_t)-1) rc = consume(r, r->last_sep, r->last_sep + 1); /* for the error's place */
        if (rc < 0) return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    free(r->tmp); /* the text and the parser's memory are done with before the columns move to Python */
    free(r->pool);
    r->tmp = r->pool = NULL;
    r->tmp_cap = r->pool_cap = 0;
    PyObject *d = build_result(&r->c, r->irregular, (size_t)r->next_index);
    if (!d) return NULL;
    size_t tail_at = r->closed ? r->close_pos + 1 : r->len;
    int ok = put(d, "closed", PyBool_FromLong(r->closed && !r->error)) &&
             put(d, "tail", PyBytes_FromStringAndSize(r->buf + (tail_at < r->len ? tail_at : r->len),
                                                     (Py_ssize_t)(tail_at < r->len ? r->len - tail_at : 0))) &&
             put(d, "tail_offset", PyLong_FromSize_t(r->base + tail_at)) &&
             put(d, "end_offset", PyLong_FromSize_t(r->base + r->len)) &&
             put(d, "error", r->error ? PyUnicode_FromString(r->error) : (Py_INCREF(Py_None), Py_None)) &&
             put(d, "error_pos", PyLong_FromSize_t(r->error_pos)) && put(d, "in_string", PyBool_FromLong(r->in_str)) &&
             put(d, "depth", PyLong_FromLong(r->depth));
    if (!ok) { Py_DECREF(d); return NULL; }
    return d;
}

/* take(reader, min_rows): once the reader holds at least ``min_rows`` rows, hand them over (the same
 * columns as finish() gives, without the end-of-array fields) and go on with new columns, so the caller
 * can convert them while the rest of the file is read; None before that, or after an input error */
static PyObject *reader_take(PyObject *self, PyObject *args) {
    PyObject *cap;
    Py_ssize_t min_rows;
    if (!PyArg_ParseTuple(args, "On", &cap, &min_rows)) return NULL;
    reader *r = PyCapsule_GetPointer(cap, "perfsleuth.kineto_reader");
    if (!r) return NULL;
    if (r->finished) { PyErr_SetString(PyExc_RuntimeError, "take() after finish()"); return NULL; }
    if (min_rows < 1 || r->c.n < (size_t)min_rows || r->error) Py_RETURN_NONE;
    PyObject *d = build_result(&r->c, r->irregular, (size_t)r->next_index);
    if (!d) return NULL;
    if (!cols_renew(&r->c, (size_t)min_rows + (size_t)min_rows / 4 + 1024)) { Py_DECREF(d); return PyErr_NoMemory(); }
    return d;
}

static PyMethodDef methods[] = {
    {"reader", reader_new, METH_VARARGS, "reader(rows_hint=0): a new reader of one traceEvents array."},
    {"feed", reader_feed, METH_VARARGS, "feed(reader, data) -> True once the array's ']' was read."},
    {"finish", reader_finish, METH_VARARGS, "finish(reader) -> the columns, interned strings and irregular events."},
    {"take", reader_take, METH_VARARGS, "take(reader, min_rows) -> the rows so far once there are min_rows of them, else None."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kineto_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kineto_native(void) {
    init_keys();
    init_scan();
    return PyModule_Create(&module);
}
