/* tallyspan._engine._scan: character-class scans for the language checks, in one pass of C.
 *
 * A class table is 65,536 bytes, one per BMP code point, each byte a set of up to eight class bits
 * (kana, han, hangul, a sign of Chinese, a Latin letter ...). The scans read a str's own buffer
 * (Latin-1, UCS-2 or UCS-4) and look each character up: a few instructions a character, where a
 * regex character class of thousands of han costs tens and the pure-Python counts about ninety.
 * Code points above the BMP are in no class (the pure-Python scans agree: tallyspan/_engine/_scripts.py).
 *
 * distinct_in_class gives the characters of a class that a text holds, each once: many ``char in text``
 * tests on one text (the checks' cheap gates) then cost one scan and lookups in a short str.
 *
 * without_whitespace is "".join(text.split()) without the list of words in between.
 *
 * repeat_units runs the repetition check's probes (tallyspan/_engine/_repetition.py) the same way: comparisons
 * of stretches of the text, without a slice or a call per try.
 *
 * Pure functions of their arguments: no state, no allocation but the result (and its buffer), no callbacks into
 * Python (numbers must be int objects, so no __index__ runs), so they cannot be re-entered or leak. Everything the Python side needs is checked here
 * (types, table length, indices), since a wrong argument must be an exception, never a crash of
 * the app the checks run in. tallyspan/_engine/_scripts.py holds the pure-Python equivalents, used where
 * this module was not built; tests/core/test_scan_extension.py keeps the two in agreement.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define TABLE_SIZE 0x10000
#define CLASS_BITS 8

/* Checks the argument count and the text (the first argument, a ready str); 0 on success, -1 with an
 * exception. */
static int
unpack_text(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t min_args, Py_ssize_t max_args,
            const char *name)
{
    if (nargs < min_args || nargs > max_args) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd to %zd arguments (%zd given)", name, min_args,
                     max_args, nargs);
        return -1;
    }
    if (!PyUnicode_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s() argument 1 must be str, not %.80s", name,
                     Py_TYPE(args[0])->tp_name);
        return -1;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(args[0]) < 0) {
        return -1;
    }
#endif
    return 0;
}

/* unpack_text, and the table (the second argument, bytes of TABLE_SIZE): gives the table's bytes. */
static int
unpack(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t min_args, Py_ssize_t max_args,
       const char *name, const unsigned char **table)
{
    if (unpack_text(args, nargs, min_args, max_args, name) < 0) {
        return -1;
    }
    if (!PyBytes_Check(args[1]) || PyBytes_GET_SIZE(args[1]) != TABLE_SIZE) {
        PyErr_Format(PyExc_ValueError, "%s() argument 2 must be bytes of length %d", name, TABLE_SIZE);
        return -1;
    }
    *table = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    return 0;
}

/* Runs BODY for each index from FIRST while CONDITION holds, stepping by STEP, with ``bits`` set to the
 * class bits of the character there (0 above the BMP). One loop per storage kind, so the kind is tested
 * once, not per character; for Latin-1 and UCS-2 the compiler drops the BMP test, always true there. */
#define FOR_EACH_UNIT(TYPE, data, table, FIRST, CONDITION, STEP, BODY)                                   \
    {                                                                                                    \
        const TYPE *units = (const TYPE *)(data);                                                        \
        for (Py_ssize_t index = (FIRST); CONDITION; index += (STEP)) {                                   \
            unsigned int bits = units[index] < TABLE_SIZE ? (table)[units[index]] : 0;                   \
            BODY                                                                                         \
        }                                                                                                \
    }

#define FOR_EACH_CHARACTER(kind, data, table, FIRST, CONDITION, STEP, BODY)                              \
    switch (kind) {                                                                                      \
    case PyUnicode_1BYTE_KIND:                                                                           \
        FOR_EACH_UNIT(Py_UCS1, data, table, FIRST, CONDITION, STEP, BODY)                                \
        break;                                                                                           \
    case PyUnicode_2BYTE_KIND:                                                                           \
        FOR_EACH_UNIT(Py_UCS2, data, table, FIRST, CONDITION, STEP, BODY)                                \
        break;                                                                                           \
    default:                                                                                             \
        FOR_EACH_UNIT(Py_UCS4, data, table, FIRST, CONDITION, STEP, BODY)                                \
        break;                                                                                           \
    }

/* An int argument as a Py_ssize_t. Only int objects: anything else could run Python code (__index__)
 * in the middle of a scan. 0 on success, -1 with an exception. */
static int
integer_of(PyObject *value, const char *what, Py_ssize_t *result)
{
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be int, not %.80s", what, Py_TYPE(value)->tp_name);
        return -1;
    }
    *result = PyLong_AsSsize_t(value);
    return *result == -1 && PyErr_Occurred() ? -1 : 0;
}

/* start and end, the optional arguments at ``position`` and after it, clamped as str.find clamps them:
 * negative counts from the end. */
static int
bounds(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t position, Py_ssize_t length, Py_ssize_t *start,
       Py_ssize_t *end)
{
    *start = 0;
    *end = length;
    if (nargs > position && args[position] != Py_None && integer_of(args[position], "start", start) < 0) {
        return -1;
    }
    if (nargs > position + 1 && args[position + 1] != Py_None
        && integer_of(args[position + 1], "end", end) < 0) {
        return -1;
    }
    if (*start < 0) {
        *start = *start + length < 0 ? 0 : *start + length;
    }
    if (*end < 0) {
        *end = *end + length < 0 ? 0 : *end + length;
    }
    if (*end > length) {
        *end = length;
    }
    return 0;
}

static int
mask_of(PyObject *value, unsigned int *mask)
{
    Py_ssize_t bits;
    if (integer_of(value, "mask", &bits) < 0) {
        return -1;
    }
    if (bits <= 0 || bits > 0xFF) {
        PyErr_SetString(PyExc_ValueError, "mask must be between 1 and 255");
        return -1;
    }
    *mask = (unsigned int)bits;
    return 0;
}

PyDoc_STRVAR(find_sign_doc,
             "find_sign(text, table, mask, first_mask, second_mask, start=None, /) -> int\n\n"
             "The lowest index in text[start:] of a character in one of mask's classes, or of one in "
             "first_mask's classes followed by one in second_mask's classes; -1 if there is none.");

static PyObject *
find_sign(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    const unsigned char *table;
    unsigned int mask, first_mask, second_mask;
    Py_ssize_t start, end;
    if (unpack(args, nargs, 5, 6, "find_sign", &table) < 0 || mask_of(args[2], &mask) < 0
        || mask_of(args[3], &first_mask) < 0 || mask_of(args[4], &second_mask) < 0) {
        return NULL;
    }
    PyObject *text = args[0];
    if (bounds(args, nargs, 5, PyUnicode_GET_LENGTH(text), &start, &end) < 0) { /* no end: at most 6 */
        return NULL;
    }
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    FOR_EACH_CHARACTER(kind, data, table, start, index < end, 1, {
        if (bits & mask) {
            return PyLong_FromSsize_t(index);
        }
        if ((bits & first_mask) && index + 1 < end && units[index + 1] < TABLE_SIZE
            && (table[units[index + 1]] & second_mask)) {
            return PyLong_FromSsize_t(index);
        }
    })
    return PyLong_FromLong(-1);
}

PyDoc_STRVAR(class_counts_doc,
             "class_counts(text, table, /) -> tuple of 8 ints\n\n"
             "How many characters of text are in each of the table's eight classes (bit 0 first).");

static PyObject *
class_counts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    const unsigned char *table;
    if (unpack(args, nargs, 2, 2, "class_counts", &table) < 0) {
        return NULL;
    }
    PyObject *text = args[0];
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    /* One increment per character into a histogram of the table's bytes, folded into the classes after. */
    Py_ssize_t histogram[256] = {0};
    FOR_EACH_CHARACTER(kind, data, table, 0, index < length, 1, { histogram[bits]++; })
    Py_ssize_t counts[CLASS_BITS] = {0};
    for (unsigned int bits = 1; bits < 256; bits++) {
        if (histogram[bits]) {
            for (int bit = 0; bit < CLASS_BITS; bit++) {
                if (bits & (1u << bit)) {
                    counts[bit] += histogram[bits];
                }
            }
        }
    }
    return Py_BuildValue("(nnnnnnnn)", counts[0], counts[1], counts[2], counts[3], counts[4], counts[5],
                         counts[6], counts[7]);
}

/* find_class and rfind_class: the first (or, with ``reverse``, the last) index in text[start:end] of a
 * character in one of mask's classes, or -1. */
static PyObject *
find_in_class(PyObject *const *args, Py_ssize_t nargs, const char *name, int reverse)
{
    const unsigned char *table;
    unsigned int mask;
    Py_ssize_t start, end;
    if (unpack(args, nargs, 3, 5, name, &table) < 0 || mask_of(args[2], &mask) < 0) {
        return NULL;
    }
    PyObject *text = args[0];
    if (bounds(args, nargs, 3, PyUnicode_GET_LENGTH(text), &start, &end) < 0) {
        return NULL;
    }
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    if (reverse) {
        FOR_EACH_CHARACTER(kind, data, table, end - 1, index >= start, -1, {
            if (bits & mask) {
                return PyLong_FromSsize_t(index);
            }
        })
    }
    else {
        FOR_EACH_CHARACTER(kind, data, table, start, index < end, 1, {
            if (bits & mask) {
                return PyLong_FromSsize_t(index);
            }
        })
    }
    return PyLong_FromLong(-1);
}

PyDoc_STRVAR(find_class_doc,
             "find_class(text, table, mask, start=None, end=None, /) -> int\n\n"
             "The lowest index in text[start:end] of a character in one of mask's classes, or -1.");

static PyObject *
find_class(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return find_in_class(args, nargs, "find_class", 0);
}

PyDoc_STRVAR(rfind_class_doc,
             "rfind_class(text, table, mask, start=None, end=None, /) -> int\n\n"
             "The highest index in text[start:end] of a character in one of mask's classes, or -1.");

static PyObject *
rfind_class(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return find_in_class(args, nargs, "rfind_class", 1);
}

/* The characters distinct_in_class found: a bit per BMP code point seen, and the characters in order. */
typedef struct {
    unsigned char seen[TABLE_SIZE / 8];
    Py_UCS4 *found;
    Py_ssize_t count;
    Py_ssize_t capacity;
    Py_UCS4 first[256]; /* found, until more than 256 */
} Distinct;

/* Notes ``unit`` (a BMP code point in the class) once; 0, or -1 with an exception. */
static int
note_distinct(Distinct *distinct, Py_UCS4 unit)
{
    unsigned char bit = (unsigned char)(1u << (unit & 7));
    if (distinct->seen[unit >> 3] & bit) {
        return 0;
    }
    distinct->seen[unit >> 3] |= bit;
    if (distinct->count == distinct->capacity) {
        Py_UCS4 *grown = PyMem_New(Py_UCS4, (size_t)distinct->capacity * 2);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(grown, distinct->found, (size_t)distinct->count * sizeof(Py_UCS4));
        if (distinct->found != distinct->first) {
            PyMem_Free(distinct->found);
        }
        distinct->found = grown;
        distinct->capacity *= 2;
    }
    distinct->found[distinct->count++] = unit;
    return 0;
}

PyDoc_STRVAR(distinct_in_class_doc,
             "distinct_in_class(text, table, mask, /) -> str\n\n"
             "Each character of text in one of mask's classes, once, in the order of its first occurrence.");

static PyObject *
distinct_in_class(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    const unsigned char *table;
    unsigned int mask;
    if (unpack(args, nargs, 3, 3, "distinct_in_class", &table) < 0 || mask_of(args[2], &mask) < 0) {
        return NULL;
    }
    PyObject *text = args[0];
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    Distinct distinct;
    memset(distinct.seen, 0, sizeof distinct.seen);
    distinct.found = distinct.first;
    distinct.count = 0;
    distinct.capacity = (Py_ssize_t)(sizeof distinct.first / sizeof distinct.first[0]);
    PyObject *result = NULL;
    FOR_EACH_CHARACTER(PyUnicode_KIND(text), data, table, 0, index < length, 1, {
        if ((bits & mask) && note_distinct(&distinct, units[index]) < 0) {
            goto failed;
        }
    })
    result = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, distinct.found, distinct.count);
failed:
    if (distinct.found != distinct.first) {
        PyMem_Free(distinct.found);
    }
    return result;
}

/* Whitespace as str.split() and str.isspace() see it. Every whitespace character is at or below U+3000
 * (tests/core/test_scan_extension.py holds this to str.split for every code point), so most CJK text is
 * told apart by one comparison, without a lookup in the Unicode database. */
#define IS_WHITESPACE(unit) ((unit) <= 0x3000 && Py_UNICODE_ISSPACE(unit))

#define COPY_WITHOUT_WHITESPACE(TYPE)                                                                    \
    {                                                                                                    \
        const TYPE *units = (const TYPE *)data;                                                          \
        TYPE *copy = (TYPE *)kept;                                                                       \
        for (Py_ssize_t index = 0; index < length; index++) {                                            \
            copy[count] = units[index];                                                                  \
            count += !IS_WHITESPACE(units[index]);                                                       \
        }                                                                                                \
    }

PyDoc_STRVAR(without_whitespace_doc,
             "without_whitespace(text, /) -> str\n\n"
             "text without its whitespace characters: \"\".join(text.split()).");

static PyObject *
without_whitespace(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (unpack_text(args, nargs, 1, 1, "without_whitespace") < 0) {
        return NULL;
    }
    PyObject *text = args[0];
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    /* The kept characters in a buffer of the text's width; the str made of them is of the narrowest width
     * they need (a text whose only wide character was a U+3000 gives a Latin-1 str). */
    void *kept = PyMem_Malloc(length > 0 ? (size_t)length * (size_t)kind : 1);
    if (kept == NULL) {
        return PyErr_NoMemory();
    }
    Py_ssize_t count = 0;
    switch (kind) {
    case PyUnicode_1BYTE_KIND:
        COPY_WITHOUT_WHITESPACE(Py_UCS1)
        break;
    case PyUnicode_2BYTE_KIND:
        COPY_WITHOUT_WHITESPACE(Py_UCS2)
        break;
    default:
        COPY_WITHOUT_WHITESPACE(Py_UCS4)
        break;
    }
    PyObject *result;
    if (count == length && PyUnicode_CheckExact(text)) {
        Py_INCREF(text);
        result = text;
    }
    else {
        result = PyUnicode_FromKindAndData(kind, kept, count);
    }
    PyMem_Free(kept);
    return result;
}

/* The first index in [from, to) of ``value``, or ``to``: the probes' scan for the next occurrence of a
 * probe's first character. Several characters a step where the width allows: libc's memchr for Latin-1,
 * four UCS-2 units per 64-bit word for UCS-2 (a unit of word ^ value that is zero is a match; the test
 * below is exact as to whether there is one, and the units of that word are then looked at one by one). */
static inline Py_ssize_t
next_unit_1(const Py_UCS1 *units, Py_ssize_t from, Py_ssize_t to, Py_UCS1 value)
{
    if (from >= to) {
        return to;
    }
    const Py_UCS1 *found = memchr(units + from, value, (size_t)(to - from));
    return found == NULL ? to : found - units;
}

static inline Py_ssize_t
next_unit_2(const Py_UCS2 *units, Py_ssize_t from, Py_ssize_t to, Py_UCS2 value)
{
    const uint64_t lows = 0x0001000100010001ULL, highs = 0x8000800080008000ULL;
    const uint64_t repeated = lows * value;
    Py_ssize_t index = from;
    for (; index + 4 <= to; index += 4) {
        uint64_t word;
        memcpy(&word, units + index, sizeof word);
        word ^= repeated;
        if ((word - lows) & ~word & highs) {
            break;
        }
    }
    for (; index < to; index++) {
        if (units[index] == value) {
            return index;
        }
    }
    return to;
}

static inline Py_ssize_t
next_unit_4(const Py_UCS4 *units, Py_ssize_t from, Py_ssize_t to, Py_UCS4 value)
{
    for (Py_ssize_t index = from; index < to; index++) {
        if (units[index] == value) {
            return index;
        }
    }
    return to;
}

/* The probes of tallyspan/_engine/_repetition.py: at each of ``probes`` evenly spaced positions, the next occurrence
 * of the ``probe_chars`` characters there within ``max_unit`` characters (``tries`` of them at most) that
 * begins a back-to-back repeat of the text from the probe to it. */
#define PROBE_UNITS(TYPE, NEXT_UNIT)                                                                     \
    {                                                                                                    \
        const TYPE *units = (const TYPE *)data;                                                          \
        const size_t gram_bytes = (size_t)probe_chars * sizeof(TYPE);                                    \
        for (Py_ssize_t probe = 0; probe < probes; probe++) {                                            \
            Py_ssize_t start = (2 * probe + 1) * length / (2 * probes);                                  \
            if (start + probe_chars > length) {                                                          \
                continue;                                                                                \
            }                                                                                            \
            Py_ssize_t reach = start + probe_chars + max_unit;                                           \
            if (reach > length) {                                                                        \
                reach = length;                                                                          \
            }                                                                                            \
            const Py_ssize_t last_start = reach - probe_chars + 1; /* past the last place a gram fits */ \
            Py_ssize_t tries_left = tries;                                                               \
            for (Py_ssize_t found = NEXT_UNIT(units, start + 1, last_start, units[start]);               \
                 found < last_start; found = NEXT_UNIT(units, found + 1, last_start, units[start])) {    \
                if (memcmp(units + found, units + start, gram_bytes)) {                                  \
                    continue;                                                                            \
                }                                                                                        \
                Py_ssize_t size = found - start;                                                         \
                if (found + size <= length                                                               \
                    && memcmp(units + found, units + start, (size_t)size * sizeof(TYPE)) == 0) {         \
                    PyObject *pair = Py_BuildValue("(nn)", start, found);                                \
                    if (pair == NULL || PyList_Append(result, pair) < 0) {                               \
                        Py_XDECREF(pair);                                                                \
                        Py_DECREF(result);                                                               \
                        return NULL;                                                                     \
                    }                                                                                    \
                    Py_DECREF(pair);                                                                     \
                    break;                                                                               \
                }                                                                                        \
                if (--tries_left <= 0) {                                                                 \
                    break;                                                                               \
                }                                                                                        \
            }                                                                                            \
        }                                                                                                \
    }

PyDoc_STRVAR(repeat_units_doc,
             "repeat_units(text, probes, probe_chars, max_unit, tries, /) -> list of (start, end)\n\n"
             "For each probe that starts a back-to-back repeat, the repeated unit's bounds "
             "(tallyspan/_engine/_repetition.py's probes).");

static PyObject *
repeat_units(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (unpack_text(args, nargs, 5, 5, "repeat_units") < 0) {
        return NULL;
    }
    static const char *const names[4] = {"probes", "probe_chars", "max_unit", "tries"};
    Py_ssize_t numbers[4];
    for (int position = 0; position < 4; position++) {
        if (integer_of(args[position + 1], names[position], &numbers[position]) < 0) {
            return NULL;
        }
        if (numbers[position] < 1 || numbers[position] > 0xFFFF) {
            PyErr_SetString(PyExc_ValueError, "probes, probe_chars, max_unit and tries must be 1 to 65535");
            return NULL;
        }
    }
    Py_ssize_t probes = numbers[0], probe_chars = numbers[1], max_unit = numbers[2], tries = numbers[3];
    PyObject *text = args[0];
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    const void *data = PyUnicode_DATA(text);
    PyObject *result = PyList_New(0);
    if (result == NULL) {
        return NULL;
    }
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_1BYTE_KIND:
        PROBE_UNITS(Py_UCS1, next_unit_1)
        break;
    case PyUnicode_2BYTE_KIND:
        PROBE_UNITS(Py_UCS2, next_unit_2)
        break;
    default:
        PROBE_UNITS(Py_UCS4, next_unit_4)
        break;
    }
    return result;
}

static PyMethodDef scan_methods[] = {
    {"class_counts", (PyCFunction)(void (*)(void))class_counts, METH_FASTCALL, class_counts_doc},
    {"find_class", (PyCFunction)(void (*)(void))find_class, METH_FASTCALL, find_class_doc},
    {"rfind_class", (PyCFunction)(void (*)(void))rfind_class, METH_FASTCALL, rfind_class_doc},
    {"find_sign", (PyCFunction)(void (*)(void))find_sign, METH_FASTCALL, find_sign_doc},
    {"repeat_units", (PyCFunction)(void (*)(void))repeat_units, METH_FASTCALL, repeat_units_doc},
    {"distinct_in_class", (PyCFunction)(void (*)(void))distinct_in_class, METH_FASTCALL,
     distinct_in_class_doc},
    {"without_whitespace", (PyCFunction)(void (*)(void))without_whitespace, METH_FASTCALL,
     without_whitespace_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot scan_slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tallyspan._engine._scan",
    .m_doc = "Character-class scans for the language checks (optional; tallyspan/_engine/_scripts.py has the "
             "pure-Python equivalents).",
    .m_size = 0,
    .m_methods = scan_methods,
    .m_slots = scan_slots,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
    return PyModuleDef_Init(&scan_module);
}
