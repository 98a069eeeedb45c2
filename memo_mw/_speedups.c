/* memo_mw._speedups: the message analysis of an ASCII text in one pass, in C.
 *
 * Optional: the package works without it (memo_mw.speedups falls back to the Python code, which
 * stays the reference; tests/test_speedups.py checks that both give the same answers).
 *
 *   Lexicon(stopwords, by_stem, word_phrases, empty)
 *       the words an analysis looks up (TopicTagger's lexicons and the stopwords), in a table of
 *       this module's own: a word is found with one hash and one cache line read; the English
 *       phrases (word_phrases) copied and packed under their first words.
 *   KeySet(*iterables of str)
 *       the ASCII keys of a user's copy of memories (its by_token and by_topic), as fingerprints:
 *       read_request() checks a message's tokens and topics against them without making a str.
 *   ascii_analysis(folded, lexicon) -> (tokens, topics)
 *       memo_mw.text.tokens() of a case-folded ASCII text, and, when the lexicon has by_stem, the
 *       topics memo_mw.topics.TopicTagger finds in it (its words' stems, then its English phrases;
 *       None without).
 *   marked_lower(text) -> str
 *       memo_mw.needles.marked(fold(text)) of an ASCII text.
 *   scan_marked(text, classes, table, outputs) -> frozenset
 *       the needles memo_mw.needles.Screen finds in marked_lower(text), by the table of an
 *       automaton that memo_mw.needles.needle_table() makes (one step a character, no text made).
 *   quiet(text, classes, table, outputs, spec) -> int
 *       for an ASCII message, memo_mw.funnel.Funnel's verdict on the usual case in one call: 0 or
 *       1 when the message surely triggers nothing and asks to forget nothing (1: it may be a
 *       recall-everything question), -1 when the funnel must look closer (Funnel._quiet_args).
 *   read_request(environ, content_types, max_body, user_key, scan, usual[, views[, quick[, tally[, fresh]]]])
 *           -> False, None, True, bytes or tuple
 *       memo_mw.middleware.MemoryMiddleware's read of a request, for the usual one: False when Python
 *       must read it (before anything is read: an unusual content type, encoding or length, or with
 *       fresh (see still_fresh()) rules whose files are due a look), None when
 *       the body is not the middleware's to read (an empty one or one above max_body), else the body
 *       read from wsgi.input (read's own errors raised), and for the usual request its parts:
 *       (body bytes, the JSON object or None (a body read in place, its message found without
 *       making its objects: json.loads(body) gives it), its "message", the user id from the header
 *       user_key (None: no header id wanted), the funnel's result for the message (usual[5][quiet
 *       verdict], None when it must look closer), the message's ascii_analysis, or (None, topics, keys)
 *       when views (the middleware's: a user id to a weak reference to a KeySet, or to a tuple
 *       holding one first) has keys for the user and the message surely shares no token or topic
 *       with them, its tokens not made). usual is Funnel.usual_args(): quiet()'s four arguments, the
 *       tagger's Lexicon, the results of the two quiet verdicts, whether the first of them rules
 *       out a recall-everything question, and the first's stage; None or (): only the body is
 *       read. With quick (see view_answers()), the request that the user's view answers, nothing to
 *       recall and nothing to capture, comes back as (body bytes, user id, message, topics, the
 *       funnel's result), or, with tally (see answer_request()), is answered here: True, the
 *       body back in wsgi.input and the message's counts noted. Whatever fails after the read
 *       gives the body.
 *   Reader(content_types, max_body, user_key, scan, usual[, views[, quick[, tally[, fresh]]]])
 *       read_request() with these arguments kept, checked once: reader(environ) reads as
 *       read_request(environ, ...) does, without the arguments read and checked again each call.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifndef _WIN32
#include <time.h>
#include <unistd.h>
#endif

static int is_alnum(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

static PyObject *ascii_str(const unsigned char *s, Py_ssize_t n) {
    PyObject *out = PyUnicode_New(n, 127);
    if (out != NULL)
        memcpy(PyUnicode_1BYTE_DATA(out), s, (size_t)n);
    return out;
}

static int ends_with(const unsigned char *s, Py_ssize_t n, const char *end) {
    Py_ssize_t m = (Py_ssize_t)strlen(end);
    return n >= m && memcmp(s + n - m, end, (size_t)m) == 0;
}

/* set |= items, through the public API (topic sets are small; a tuple is read without an
 * iterator). 0, or -1 on error. */
static int set_update(PyObject *set, PyObject *items) {
    if (PyTuple_CheckExact(items)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
            if (PySet_Add(set, PyTuple_GET_ITEM(items, i)) < 0)
                return -1;
        }
        return 0;
    }
    PyObject *iterator = PyObject_GetIter(items), *item;
    if (iterator == NULL)
        return -1;
    while ((item = PyIter_Next(iterator)) != NULL) {
        int added = PySet_Add(set, item);
        Py_DECREF(item);
        if (added < 0) {
            Py_DECREF(iterator);
            return -1;
        }
    }
    Py_DECREF(iterator);
    return PyErr_Occurred() ? -1 : 0;
}

/* memo_mw.text.stem: into buf (at least n + 1 bytes); returns the stem's length. */
static Py_ssize_t stem(const unsigned char *w, Py_ssize_t n, unsigned char *buf) {
    memcpy(buf, w, (size_t)n);
    if (n > 4 && ends_with(w, n, "ies")) {
        buf[n - 3] = 'y';
        return n - 2;
    }
    if (n > 5 && ends_with(w, n, "ing"))
        return n - 3;
    if (n > 4 && (ends_with(w, n, "ches") || ends_with(w, n, "shes") || ends_with(w, n, "sses") ||
                  ends_with(w, n, "xes")))
        return n - 2;
    if (n > 3 && ends_with(w, n, "s") && !ends_with(w, n, "ss") && !ends_with(w, n, "us") && !ends_with(w, n, "is"))
        return n - 1;
    if (n > 4 && ends_with(w, n, "ed"))
        return n - 2;
    return n;
}

/* What may follow an apostrophe in a word that is still the word before it (memo_mw.text._CLITICS). */
static int is_clitic(const unsigned char *s, Py_ssize_t n) {
    static const char *clitics[] = {"", "s", "re", "ve", "ll", "d", "m"};
    for (size_t i = 0; i < sizeof clitics / sizeof clitics[0]; i++) {
        if ((Py_ssize_t)strlen(clitics[i]) == n && memcmp(s, clitics[i], (size_t)n) == 0)
            return 1;
    }
    return 0;
}

/* -- Lexicon: the words an analysis looks up, in one table of this module's own ------------- */

enum { LEX_STOP = 1, LEX_STEM = 2, LEX_FIRST = 4 };

/* One word of a lexicon: its hash (lex_hash), its str (a token made of it is this object, no copy
 * made), the topics of the word as a stem (by_stem), what it is (LEX_*) and, for a word that starts
 * English phrases, where they are in the lexicon's packed phrases (1 + the offset; 0: none). 32
 * bytes: two a cache line, one line read a lookup. */
typedef struct {
    uint64_t hash;
    PyObject *word;
    PyObject *topics;
    uint32_t length;
    uint32_t flags : 3;
    uint32_t phrases : 29;
} lex_slot;

/* At most this many bytes of packed phrases (what lex_slot.phrases can point into). */
#define LEX_PHRASES_MAX ((1u << 29) - 1)

typedef struct {
    PyObject_HEAD
    lex_slot *slots;  /* open addressing, linear probing; a free slot has no word */
    size_t mask;
    /* The English phrases (TopicTagger._word_phrases) packed, for a look that reads a line or two
     * instead of a dict, a list and three objects an entry: under each first word, the number of
     * its phrases (uint32), then each phrase in order: the number of its words after the first and
     * the index of its topics in phrase_topics (uint32 each), then each of those words: its length
     * (uint32) and its bytes. NULL: no phrases. */
    unsigned char *phrases;
    PyObject *phrase_topics;  /* a list: each phrase's topics */
    PyObject *empty;          /* the tagger's shared empty set of topics, or None: no topics */
} LexiconObject;

static inline uint32_t packed_u32(const unsigned char *p) {
    uint32_t value;
    memcpy(&value, p, sizeof value);
    return value;
}

static uint64_t lex_hash(const unsigned char *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;  /* FNV-1a, then a final mix */
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ULL;
    h ^= h >> 29;
    return h * 0xbf58476d1ce4e5b9ULL;
}

/* The slot of the word s[0:n], or NULL when the lexicon does not hold it. */
static inline const lex_slot *lex_find(const LexiconObject *lex, const unsigned char *s, Py_ssize_t n) {
    uint64_t h = lex_hash(s, n);
    for (size_t i = (size_t)h & lex->mask;; i = (i + 1) & lex->mask) {
        const lex_slot *slot = &lex->slots[i];
        if (slot->word == NULL)
            return NULL;
        if (slot->hash == h && slot->length == (uint32_t)n && memcmp(PyUnicode_1BYTE_DATA(slot->word), s, (size_t)n) == 0)
            return slot;
    }
}

/* Add the words of keys (a set or dict of str; others, and words not in ASCII, cannot meet an ASCII
 * text and are skipped) with flag, and from a dict their values as topics. 0, or -1 on error. */
static int lex_add(LexiconObject *lex, PyObject *keys, uint32_t flag) {
    PyObject *iterator = PyObject_GetIter(keys), *key;
    if (iterator == NULL)
        return -1;
    while ((key = PyIter_Next(iterator)) != NULL) {
        if (PyUnicode_CheckExact(key) && PyUnicode_IS_ASCII(key) && PyUnicode_GET_LENGTH(key) > 0) {
            const unsigned char *s = PyUnicode_1BYTE_DATA(key);
            Py_ssize_t n = PyUnicode_GET_LENGTH(key);
            uint64_t h = lex_hash(s, n);
            size_t i = (size_t)h & lex->mask;
            while (lex->slots[i].word != NULL && !(lex->slots[i].hash == h && lex->slots[i].length == (uint32_t)n &&
                                                   memcmp(PyUnicode_1BYTE_DATA(lex->slots[i].word), s, (size_t)n) == 0))
                i = (i + 1) & lex->mask;
            lex_slot *slot = &lex->slots[i];
            if (slot->word == NULL) {
                slot->word = Py_NewRef(key);
                slot->hash = h;
                slot->length = (uint32_t)n;
            }
            slot->flags |= flag;
            if (flag == LEX_STEM) {
                PyObject *topics = PyDict_GetItemWithError(keys, key);
                if (topics == NULL) {
                    Py_DECREF(key);
                    Py_DECREF(iterator);
                    return -1;
                }
                Py_XSETREF(slot->topics, Py_NewRef(topics));
            }
        }
        Py_DECREF(key);
    }
    Py_DECREF(iterator);
    return PyErr_Occurred() ? -1 : 0;
}

/* Append n bytes to the growing buffer *buf (*used of *size bytes). 0, or -1 with an error set. */
static int pack(unsigned char **buf, size_t *used, size_t *size, const void *bytes, size_t n) {
    if (*used + n > LEX_PHRASES_MAX) {
        PyErr_SetString(PyExc_ValueError, "Lexicon: too many phrases");
        return -1;
    }
    if (*used + n > *size) {
        size_t grown = *size ? *size : 256;
        while (grown < *used + n)
            grown *= 2;
        unsigned char *more = PyMem_Realloc(*buf, grown);
        if (more == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        *buf = more;
        *size = grown;
    }
    memcpy(*buf + *used, bytes, n);
    *used += n;
    return 0;
}

static int pack_u32(unsigned char **buf, size_t *used, size_t *size, size_t value) {
    uint32_t v = (uint32_t)value;
    if (value > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "Lexicon: a phrase too long");
        return -1;
    }
    return pack(buf, used, size, &v, sizeof v);
}

/* The phrases of word_phrases (first word -> a list of (words, topics), words a tuple starting
 * with that word) packed into lex (see LexiconObject), each first word's slot pointing at its own;
 * a phrase with a word after the first that is no ASCII str cannot meet an ASCII text and is left
 * out. 0, or -1 with an error set (TypeError for entries of another shape). */
static int lex_pack_phrases(LexiconObject *lex, PyObject *word_phrases) {
    unsigned char *buf = NULL;
    size_t used = 0, size = 0;
    PyObject *key, *entries;
    Py_ssize_t position = 0;
    if ((lex->phrase_topics = PyList_New(0)) == NULL)
        return -1;
    while (PyDict_Next(word_phrases, &position, &key, &entries)) {
        if (!PyList_Check(entries)) {
            PyErr_SetString(PyExc_TypeError, "word_phrases: lists of (words, topics) expected");
            goto fail;
        }
        if (!PyUnicode_CheckExact(key) || !PyUnicode_IS_ASCII(key) || PyUnicode_GET_LENGTH(key) == 0)
            continue;  /* (not in the lexicon either: lex_add) */
        const lex_slot *found = lex_find(lex, PyUnicode_1BYTE_DATA(key), PyUnicode_GET_LENGTH(key));
        if (found == NULL || !(found->flags & LEX_FIRST))
            continue;  /* a key lex_add did not see (a dict subclass iterating otherwise): no first word */
        lex_slot *slot = (lex_slot *)found;
        size_t start = used, kept = 0;
        if (pack_u32(&buf, &used, &size, 0) < 0)  /* the count, written below */
            goto fail;
        for (Py_ssize_t e = 0; e < PyList_GET_SIZE(entries); e++) {
            PyObject *entry = PyList_GET_ITEM(entries, e);
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(entry, 0))) {
                PyErr_SetString(PyExc_TypeError, "word_phrases: (words, topics) tuples expected");
                goto fail;
            }
            PyObject *phrase = PyTuple_GET_ITEM(entry, 0);
            Py_ssize_t length = PyTuple_GET_SIZE(phrase), k = 1;
            while (k < length && PyUnicode_CheckExact(PyTuple_GET_ITEM(phrase, k)) &&
                   PyUnicode_IS_ASCII(PyTuple_GET_ITEM(phrase, k)))
                k++;
            if (k < length)
                continue;  /* cannot meet an ASCII text's runs */
            /* (an empty phrase, as a phrase of its first word alone, is met wherever that is) */
            if (pack_u32(&buf, &used, &size, (size_t)(length > 0 ? length - 1 : 0)) < 0 ||
                pack_u32(&buf, &used, &size, (size_t)PyList_GET_SIZE(lex->phrase_topics)) < 0 ||
                PyList_Append(lex->phrase_topics, PyTuple_GET_ITEM(entry, 1)) < 0)
                goto fail;
            for (k = 1; k < length; k++) {
                PyObject *word = PyTuple_GET_ITEM(phrase, k);
                if (pack_u32(&buf, &used, &size, (size_t)PyUnicode_GET_LENGTH(word)) < 0 ||
                    pack(&buf, &used, &size, PyUnicode_1BYTE_DATA(word), (size_t)PyUnicode_GET_LENGTH(word)) < 0)
                    goto fail;
            }
            kept++;
        }
        if (kept == 0) {
            used = start;  /* none it could meet */
            continue;
        }
        uint32_t count = (uint32_t)kept;
        memcpy(buf + start, &count, sizeof count);
        slot->phrases = (uint32_t)(start + 1);
    }
    lex->phrases = buf;
    return 0;
fail:
    PyMem_Free(buf);
    return -1;
}

static void lexicon_dealloc(LexiconObject *lex) {
    if (lex->slots != NULL) {
        for (size_t i = 0; i <= lex->mask; i++) {
            Py_XDECREF(lex->slots[i].word);
            Py_XDECREF(lex->slots[i].topics);
        }
        PyMem_Free(lex->slots);
    }
    PyMem_Free(lex->phrases);
    Py_XDECREF(lex->phrase_topics);
    Py_XDECREF(lex->empty);
    Py_TYPE(lex)->tp_free((PyObject *)lex);
}

static PyObject *lexicon_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *stopwords, *by_stem, *word_phrases, *empty;
    static char *names[] = {"stopwords", "by_stem", "word_phrases", "empty", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO:Lexicon", names, &stopwords, &by_stem, &word_phrases, &empty))
        return NULL;
    if (!PyAnySet_Check(stopwords) || (by_stem != Py_None && !PyDict_Check(by_stem)) ||
        (word_phrases != Py_None && !PyDict_Check(word_phrases)) || (by_stem == Py_None) != (empty == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "Lexicon: a set of stopwords and dicts (or None), an empty set with by_stem");
        return NULL;
    }
    Py_ssize_t words = PySet_GET_SIZE(stopwords) + (by_stem != Py_None ? PyDict_GET_SIZE(by_stem) : 0) +
                       (word_phrases != Py_None ? PyDict_GET_SIZE(word_phrases) : 0);
    size_t size = 16;
    while (size < (size_t)words * 2)  /* at most half full: a lookup reads one slot or two */
        size *= 2;
    LexiconObject *lex = (LexiconObject *)type->tp_alloc(type, 0);
    if (lex == NULL)
        return NULL;
    lex->mask = size - 1;
    lex->slots = PyMem_Calloc(size, sizeof(lex_slot));
    lex->empty = Py_NewRef(empty);
    if (lex->slots == NULL) {
        Py_DECREF(lex);
        return PyErr_NoMemory();
    }
    if (lex_add(lex, stopwords, LEX_STOP) < 0 || (by_stem != Py_None && lex_add(lex, by_stem, LEX_STEM) < 0) ||
        (word_phrases != Py_None &&
         (lex_add(lex, word_phrases, LEX_FIRST) < 0 || lex_pack_phrases(lex, word_phrases) < 0))) {
        Py_DECREF(lex);
        return NULL;
    }
    return (PyObject *)lex;
}

static PyTypeObject LexiconType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "memo_mw._speedups.Lexicon",
    .tp_basicsize = sizeof(LexiconObject),
    .tp_dealloc = (destructor)lexicon_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Lexicon(stopwords, by_stem, word_phrases, empty): the words ascii_analysis() looks up.",
    .tp_new = lexicon_new,
};

static int check_ascii(PyObject *text, const char *function);

/* -- KeySet: whether a message shares a token or topic with a user's memories ---------------- */

/* The str keys of some dicts (a user's copy's by_token and by_topic) as 32-bit fingerprints of
 * lex_hash: the message's tokens are checked against it without a str made for any. Open
 * addressing, at most half full; a fingerprint of 0 is stored as 1, 0 being a free slot. A key
 * not in ASCII cannot meet an ASCII message and is left out. Two keys may share a fingerprint:
 * a lookup can answer "held" for a word that is not (the caller then looks the slow way), never
 * the other way. 8 to 16 bytes a key. */
typedef struct {
    PyObject_HEAD
    uint32_t *slots;
    size_t mask;
    PyObject *weakrefs;
} KeySetObject;

static inline uint32_t keyset_print(uint64_t h) {
    uint32_t print = (uint32_t)(h >> 32);
    return print != 0 ? print : 1;
}

/* The slot of the hash h's fingerprint: where it is, or the free slot where it would go. */
static inline size_t keyset_slot(const KeySetObject *keys, uint64_t h) {
    uint32_t print = keyset_print(h);
    size_t i = (size_t)h & keys->mask;
    while (keys->slots[i] != 0 && keys->slots[i] != print)
        i = (i + 1) & keys->mask;
    return i;
}

/* Whether the keys may hold the ASCII word s[0:n] (see KeySetObject). */
static inline int keyset_has(const KeySetObject *keys, const unsigned char *s, Py_ssize_t n) {
    return keys->slots[keyset_slot(keys, lex_hash(s, n))] != 0;
}

static void keyset_dealloc(KeySetObject *keys) {
    if (keys->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)keys);
    PyMem_Free(keys->slots);
    Py_TYPE(keys)->tp_free((PyObject *)keys);
}

static PyObject *keyset_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) > 0) {
        PyErr_SetString(PyExc_TypeError, "KeySet(*iterables of str) takes no keyword arguments");
        return NULL;
    }
    /* The ASCII keys, read once (an iterable may be an iterator); the table sized for them. */
    PyObject *ascii = PyList_New(0);
    if (ascii == NULL)
        return NULL;
    for (Py_ssize_t a = 0; a < PyTuple_GET_SIZE(args); a++) {
        PyObject *iterator = PyObject_GetIter(PyTuple_GET_ITEM(args, a)), *key;
        if (iterator == NULL) {
            Py_DECREF(ascii);
            return NULL;
        }
        while ((key = PyIter_Next(iterator)) != NULL) {
            if (!PyUnicode_Check(key))
                PyErr_SetString(PyExc_TypeError, "KeySet: str keys expected");
            else if (PyUnicode_IS_ASCII(key))
                PyList_Append(ascii, key);  /* (an error set when it fails) */
            Py_DECREF(key);
            if (PyErr_Occurred())
                break;
        }
        Py_DECREF(iterator);
        if (PyErr_Occurred()) {
            Py_DECREF(ascii);
            return NULL;
        }
    }
    size_t size = 8;
    while (size < (size_t)PyList_GET_SIZE(ascii) * 2)
        size *= 2;
    KeySetObject *keys = (KeySetObject *)type->tp_alloc(type, 0);
    if (keys == NULL || (keys->slots = PyMem_Calloc(size, sizeof(uint32_t))) == NULL) {
        Py_DECREF(ascii);
        Py_XDECREF(keys);
        return keys == NULL ? NULL : PyErr_NoMemory();
    }
    keys->mask = size - 1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ascii); i++) {
        PyObject *key = PyList_GET_ITEM(ascii, i);
        uint64_t h = lex_hash(PyUnicode_1BYTE_DATA(key), PyUnicode_GET_LENGTH(key));
        keys->slots[keyset_slot(keys, h)] = keyset_print(h);
    }
    Py_DECREF(ascii);
    return (PyObject *)keys;
}

static PyObject *keyset_may_hold(KeySetObject *keys, PyObject *word) {
    if (check_ascii(word, "KeySet.may_hold") < 0)
        return NULL;
    return PyBool_FromLong(keyset_has(keys, PyUnicode_1BYTE_DATA(word), PyUnicode_GET_LENGTH(word)));
}

static PyObject *keyset_sizeof(KeySetObject *keys, PyObject *unused) {
    return PyLong_FromSize_t(sizeof(KeySetObject) + (keys->mask + 1) * sizeof(uint32_t));
}

static PyMethodDef keyset_methods[] = {
    {"may_hold", (PyCFunction)keyset_may_hold, METH_O,
     "may_hold(word) -> whether the keys may hold the ASCII word (False: surely not)"},
    {"__sizeof__", (PyCFunction)keyset_sizeof, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KeySetType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "memo_mw._speedups.KeySet",
    .tp_basicsize = sizeof(KeySetObject),
    .tp_dealloc = (destructor)keyset_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "KeySet(*iterables of str): the ASCII keys, for read_request() to check a message's tokens "
              "and topics against.",
    .tp_new = keyset_new,
    .tp_methods = keyset_methods,
    .tp_weaklistoffset = offsetof(KeySetObject, weakrefs),
};

/* Add topics to *found, a frozenset made with the first (no one else sees it yet). 0, or -1 on error. */
static int found_update(PyObject **found, PyObject *topics) {
    if (*found == NULL && (*found = PyFrozenSet_New(NULL)) == NULL)
        return -1;
    return set_update(*found, topics);
}

/* Add the token of the word w[0:n] (memo_mw.text._word_token) to tokens, and its topics as a stem
 * to *found (when found is not NULL: see found_update). found_word: the word's slot, when the
 * caller looked it up already (or NULL, and then looked up here). buf: at least n + 1 bytes. With keys, no token is made: the
 * token is looked up in keys instead, and 1 returned when they may hold it. 0, or -1 on error. */
static int add_token(const LexiconObject *lex, const unsigned char *w, Py_ssize_t n, const lex_slot *found_word,
                     int looked_up, PyObject *tokens, const KeySetObject *keys, PyObject **found, unsigned char *buf) {
    const unsigned char *apostrophe = memchr(w, '\'', (size_t)n);
    if (apostrophe != NULL) {
        Py_ssize_t rest = n - (apostrophe - w) - 1;
        if (rest == 1 && apostrophe[1] == 't')
            return 0;  /* a negation: "don't", "haven't" */
        if (is_clitic(apostrophe + 1, rest))
            n = apostrophe - w;
        looked_up = 0;
    }
    if (n <= 1)
        return 0;
    const lex_slot *slot = looked_up ? found_word : lex_find(lex, w, n);
    if (slot != NULL && (slot->flags & LEX_STOP))
        return 0;
    Py_ssize_t m = stem(w, n, buf);
    const unsigned char *token = w;
    if (m != n || memcmp(buf, w, (size_t)n) != 0) {
        token = buf;
        slot = lex_find(lex, buf, m);
        if (slot != NULL && (slot->flags & LEX_STOP))
            return 0;
    }
    if (keys != NULL) {
        if (keyset_has(keys, token, m))
            return 1;
        return found != NULL && slot != NULL && slot->topics != NULL ? found_update(found, slot->topics) : 0;
    }
    /* A word the lexicon holds is its own str (most stems with topics): no new one made. */
    PyObject *word = slot != NULL ? Py_NewRef(slot->word) : ascii_str(token, m);
    if (word == NULL)
        return -1;
    int added = PySet_Add(tokens, word);
    Py_DECREF(word);
    if (added == 0 && found != NULL && slot != NULL && slot->topics != NULL)
        added = found_update(found, slot->topics);
    return added;
}

/* The text's runs of letters and digits (its words as TopicTagger._analyse splits them for
 * phrases): where each starts, how long, and the lexicon's slot of a run that starts a phrase. */
typedef struct {
    Py_ssize_t start, length;
    const lex_slot *first;
} run;

/* The topics of the English phrases that start at each run (memo_mw.topics.TopicTagger._analyse):
 * at each place, the first (longest) phrase of the entries under its word (lex's packed phrases)
 * that the runs there spell. 0, or -1 on error. */
static int add_phrase_topics(const unsigned char *s, const run *runs, Py_ssize_t count, const LexiconObject *lex,
                             PyObject **found) {
    for (Py_ssize_t i = 0; i < count; i++) {
        if (runs[i].first == NULL)
            continue;  /* (most runs) no phrase starts with it */
        const unsigned char *p = lex->phrases + runs[i].first->phrases - 1;
        uint32_t entries = packed_u32(p);
        p += 4;
        for (uint32_t e = 0; e < entries; e++) {
            uint32_t after = packed_u32(p), topics = packed_u32(p + 4);
            p += 8;
            /* its first word is the run it was found under (TopicTagger._word_phrases) */
            int same = (size_t)i + after < (size_t)count;
            for (uint32_t k = 1; k <= after; k++) {
                uint32_t length = packed_u32(p);
                same = same && runs[i + k].length == (Py_ssize_t)length &&
                       memcmp(p + 4, s + runs[i + k].start, length) == 0;
                p += 4 + length;
            }
            if (same) {
                if (found_update(found, PyList_GET_ITEM(lex->phrase_topics, topics)) < 0)
                    return -1;
                break;
            }
        }
    }
    return 0;
}

/* 0 when text is an ASCII str; else -1 with the error set (TypeError, or ValueError for other text). */
static int check_ascii(PyObject *text, const char *function) {
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "%s: a str expected", function);
        return -1;
    }
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_Format(PyExc_ValueError, "%s: an ASCII str expected", function);
        return -1;
    }
    return 0;
}

/* Whether keys may hold one of the topics (a set): 1, 0, or -1 on error. A topic not in ASCII
 * cannot be told: 1. */
static int keyset_meets(const KeySetObject *keys, PyObject *topics) {
    PyObject *iterator = PyObject_GetIter(topics), *topic;
    int met = 0;
    if (iterator == NULL)
        return -1;
    while (!met && (topic = PyIter_Next(iterator)) != NULL) {
        met = !PyUnicode_Check(topic) || !PyUnicode_IS_ASCII(topic) ||
              keyset_has(keys, PyUnicode_1BYTE_DATA(topic), PyUnicode_GET_LENGTH(topic));
        Py_DECREF(topic);
    }
    Py_DECREF(iterator);
    return PyErr_Occurred() ? -1 : met;
}

/* ascii_analysis() of the case-folded ASCII text s[0:n] with lex. A new (tokens, topics) tuple,
 * or NULL with an error set. With keys (a user's, read_request()): (None, topics, keys) when the
 * text surely shares no token or topic with them, its tokens not made; else NULL with no error
 * set (the caller analyses it again without keys). */
static PyObject *analysis_of(const unsigned char *s, Py_ssize_t n, const LexiconObject *lex,
                             const KeySetObject *keys) {
    unsigned char *buf = PyMem_Malloc((size_t)n + 2);
    run *runs = NULL;
    Py_ssize_t count = 0;
    int firsts = 0;  /* whether some run starts an English phrase */
    /* Frozensets filled here before anyone sees them (no copy of a set at the end). */
    PyObject *tokens = keys == NULL ? PyFrozenSet_New(NULL) : Py_NewRef(Py_None), *found = NULL, *topics = NULL;
    PyObject **wanted = lex->empty != Py_None ? &found : NULL;  /* found: made with its first topic */
    int phrases = lex->empty != Py_None && lex->phrases != NULL;
    if (buf == NULL || (phrases && (runs = PyMem_Malloc(sizeof(run) * ((size_t)n / 2 + 1))) == NULL)) {
        PyErr_NoMemory();
        goto fail;
    }
    if (tokens == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n;) {
        if (!is_alnum(s[i])) {
            i++;
            continue;
        }
        Py_ssize_t start = i;  /* a word: [a-z0-9][a-z0-9']* */
        while (i < n && (is_alnum(s[i]) || s[i] == '\''))
            i++;
        const lex_slot *head = NULL;  /* the slot of the word's first run, when looked up */
        int one_run = 0;
        for (Py_ssize_t j = start; phrases && j < i;) {  /* its runs of letters and digits */
            Py_ssize_t first = j;
            while (j < i && is_alnum(s[j]))
                j++;
            const lex_slot *slot = lex_find(lex, s + first, j - first);
            if (first == start) {
                head = slot;
                one_run = j == i;
            }
            runs[count].start = first;
            runs[count].length = j - first;
            runs[count++].first = slot != NULL && slot->phrases ? slot : NULL;
            firsts |= runs[count - 1].first != NULL;
            while (j < i && s[j] == '\'')
                j++;
        }
        /* A word of one run was looked up above: its token's lookup is that one. */
        if (add_token(lex, s + start, i - start, head, one_run, tokens, keys, wanted, buf) != 0)
            goto fail;  /* an error, or (1) keys may hold the token: no error set */
    }
    if (firsts && add_phrase_topics(s, runs, count, lex, wanted) < 0)
        goto fail;
    if (keys != NULL && found != NULL && PySet_GET_SIZE(found)) {
        int met = keyset_meets(keys, found);
        if (met != 0)
            goto fail;  /* shared, or an error */
    }
    topics = Py_NewRef(found != NULL && PySet_GET_SIZE(found) ? found : lex->empty);  /* (None: no topics) */
    PyMem_Free(buf);
    PyMem_Free(runs);
    Py_XDECREF(found);
    PyObject *out = keys == NULL ? PyTuple_Pack(2, tokens, topics) : PyTuple_Pack(3, tokens, topics, keys);
    Py_DECREF(tokens);
    Py_DECREF(topics);
    return out;
fail:
    PyMem_Free(buf);
    PyMem_Free(runs);
    Py_XDECREF(tokens);
    Py_XDECREF(found);
    Py_XDECREF(topics);
    return NULL;
}

static PyObject *ascii_analysis(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "ascii_analysis(folded, lexicon)");
        return NULL;
    }
    if (check_ascii(args[0], "ascii_analysis") < 0)
        return NULL;
    if (!PyObject_TypeCheck(args[1], &LexiconType)) {
        PyErr_SetString(PyExc_TypeError, "ascii_analysis: a Lexicon expected");
        return NULL;
    }
    return analysis_of(PyUnicode_1BYTE_DATA(args[0]), PyUnicode_GET_LENGTH(args[0]), (LexiconObject *)args[1], NULL);
}

static int is_word_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static PyObject *marked_lower(PyObject *module, PyObject *text) {
    if (check_ascii(text, "marked_lower") < 0)
        return NULL;
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), runs = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (is_word_char(s[i]) && (i == 0 || !is_word_char(s[i - 1])))
            runs++;
    }
    PyObject *out = PyUnicode_New(n + 2 * runs, 127);
    if (out == NULL)
        return NULL;
    unsigned char *o = PyUnicode_1BYTE_DATA(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        int word = is_word_char(c);
        if (word && (i == 0 || !is_word_char(s[i - 1])))
            *o++ = 0;  /* memo_mw.needles.MARK */
        *o++ = (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
        if (word && (i + 1 == n || !is_word_char(s[i + 1])))
            *o++ = 0;
    }
    return out;
}

/* One step of a needle_table automaton on the (folded) character c: *state becomes the state it
 * reaches. 0, or -1 with an error naming function for a column or state outside the table. */
static inline int advance(unsigned char c, const unsigned char *classes, const uint16_t *table, Py_ssize_t width,
                          Py_ssize_t states, Py_ssize_t *state, const char *function) {
    unsigned char column = classes[c & 127];
    if (column >= width || (*state = table[*state * width + column]) >= states) {
        PyErr_Format(PyExc_ValueError, "%s: a column or state outside the table", function);
        return -1;
    }
    return 0;
}

/* The needles that end in state: *ends, a tuple borrowed from outputs, or NULL for none. 0, or -1
 * with an error naming function for an entry that is neither. */
static inline int ends_at(PyObject *outputs, Py_ssize_t state, PyObject **ends, const char *function) {
    PyObject *found = PyTuple_GET_ITEM(outputs, state);
    if (found != Py_None && !PyTuple_Check(found)) {
        PyErr_Format(PyExc_ValueError, "%s: outputs hold a tuple or None for each state", function);
        return -1;
    }
    *ends = found == Py_None ? NULL : found;
    return 0;
}

/* One step of scan_marked(): the needles that end in the state c leads to go into found. 0, or -1
 * on error. */
static inline int feed(unsigned char c, const unsigned char *classes, const uint16_t *table, Py_ssize_t width,
                       PyObject *outputs, Py_ssize_t *state, PyObject *found) {
    PyObject *ends;
    if (advance(c, classes, table, width, PyTuple_GET_SIZE(outputs), state, "scan_marked") < 0 ||
        ends_at(outputs, *state, &ends, "scan_marked") < 0)
        return -1;
    return ends == NULL ? 0 : set_update(found, ends);
}

/* The table arguments of scan_marked() and quiet(), checked: 0, or -1 with an error set. */
static int read_table(PyObject *classes, PyObject *table, PyObject *outputs, const char *function,
                      const unsigned char **classes_out, const uint16_t **table_out, Py_ssize_t *width) {
    if (!PyBytes_Check(classes) || PyBytes_GET_SIZE(classes) != 128 || !PyBytes_Check(table) ||
        !PyTuple_Check(outputs) || PyTuple_GET_SIZE(outputs) == 0 || PyTuple_GET_SIZE(outputs) > 65536 ||
        PyBytes_GET_SIZE(table) == 0 || PyBytes_GET_SIZE(table) % (2 * PyTuple_GET_SIZE(outputs)) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: not a table of memo_mw.needles.needle_table", function);
        return -1;
    }
    *classes_out = (const unsigned char *)PyBytes_AS_STRING(classes);
    *table_out = (const uint16_t *)PyBytes_AS_STRING(table);
    *width = PyBytes_GET_SIZE(table) / 2 / PyTuple_GET_SIZE(outputs);
    return 0;
}

/* The needles of the ASCII text s[0:n], folded and marked as marked_lower() does, into found
 * (a new set or frozenset no one else sees yet). 0, or -1 on error. */
static int scan_into(const unsigned char *s, Py_ssize_t n, const unsigned char *classes, const uint16_t *table,
                     Py_ssize_t width, PyObject *outputs, PyObject *found) {
    Py_ssize_t state = 0;
    /* As marked_lower(): a MARK (0) at both edges of every run of word characters, that is,
     * wherever that changes between two characters, and at the end after a word character. */
    int before = 0;  /* whether the character before is a word character */
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        int word = is_word_char(c);
        if ((word != before && feed(0, classes, table, width, outputs, &state, found) < 0) ||
            feed((c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c, classes, table, width, outputs, &state,
                 found) < 0)
            return -1;
        before = word;
    }
    if (before && feed(0, classes, table, width, outputs, &state, found) < 0)
        return -1;
    return 0;
}

static PyObject *scan_marked(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "scan_marked(text, classes, table, outputs)");
        return NULL;
    }
    PyObject *text = args[0], *outputs = args[3];
    const unsigned char *classes;
    const uint16_t *table;
    Py_ssize_t width;
    if (check_ascii(text, "scan_marked") < 0 ||
        read_table(args[1], args[2], outputs, "scan_marked", &classes, &table, &width) < 0)
        return NULL;
    PyObject *found = PyFrozenSet_New(NULL);  /* filled here before anyone sees it */
    if (found == NULL)
        return NULL;
    if (scan_into(PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text), classes, table, width, outputs,
                  found) < 0) {
        Py_DECREF(found);
        return NULL;
    }
    return found;
}

/* Whether some item of items[0:n] is one of the tuple's (the same object): 1 or 0. The needles of
 * quiet()'s spec are the table's own objects, compared without reading them (no hash of each). */
static int meets(PyObject *tuple, PyObject *const *items, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(tuple); k++) {
        PyObject *needle = PyTuple_GET_ITEM(tuple, k);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (items[i] == needle)
                return 1;
        }
    }
    return 0;
}

/* At most this many distinct needles in a text quiet() answers for (more: the caller looks closer). */
#define QUIET_MAX_NEEDLES 64

/* The roles a needle may have in quiet()'s spec (Funnel._quiet_args). */
enum { QUIET_STOP = 1, QUIET_DIGIT = 2, QUIET_RECALL_ALL = 4, QUIET_TRIGGER = 8, QUIET_ENDS = 16 };

/* One needle's part in quiet(): 0 to go on (its digit and recall-everything flags added), -1 when
 * the caller must look closer, -2 on error. role is (flags, after); present[0:count] the needles found. */
static int quiet_role(PyObject *role, PyObject *const *present, Py_ssize_t count, int *digit, int *asks_all) {
    long flags = PyTuple_Check(role) && PyTuple_GET_SIZE(role) == 2 ? PyLong_AsLong(PyTuple_GET_ITEM(role, 0)) : -1;
    if (flags < 0 || ((flags & QUIET_TRIGGER) && !PyTuple_Check(PyTuple_GET_ITEM(role, 1)))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "quiet: roles map a needle to (flags, after)");
        return -2;
    }
    if (flags & QUIET_STOP)
        return -1;
    *digit |= (flags & QUIET_DIGIT) != 0;
    *asks_all |= (flags & QUIET_RECALL_ALL) != 0;
    if (!(flags & QUIET_TRIGGER))
        return 0;
    /* As Funnel._may_trigger: (alone, seconds, more) of the triggers whose first set holds it. */
    PyObject *entry = PyTuple_GET_ITEM(role, 1);
    if (PyTuple_GET_SIZE(entry) != 3 || !PyTuple_Check(PyTuple_GET_ITEM(entry, 1)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(entry, 2))) {
        PyErr_SetString(PyExc_ValueError, "quiet: after is (alone, seconds, more)");
        return -2;
    }
    int in = PyObject_IsTrue(PyTuple_GET_ITEM(entry, 0));
    if (in == 0)
        in = meets(PyTuple_GET_ITEM(entry, 1), present, count);
    if (in != 0)
        return in < 0 ? -2 : -1;
    PyObject *more = PyTuple_GET_ITEM(entry, 2);
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(more); j++) {
        PyObject *sets = PyTuple_GET_ITEM(more, j);
        if (!PyTuple_Check(sets)) {
            PyErr_SetString(PyExc_ValueError, "quiet: more holds tuples of needle tuples");
            return -2;
        }
        int all = 1;
        for (Py_ssize_t k = 0; all && k < PyTuple_GET_SIZE(sets); k++) {
            PyObject *set = PyTuple_GET_ITEM(sets, k);
            if (!PyTuple_Check(set)) {
                PyErr_SetString(PyExc_ValueError, "quiet: more holds tuples of needle tuples");
                return -2;
            }
            all = meets(set, present, count);
        }
        if (all)
            return -1;  /* a trigger may match */
    }
    return 0;
}

/* One step of quiet()'s scan (as feed(), the needles kept apart): the state the folded character c
 * leads to, its roles from flags, and its needles added once each to present[0:*count], with the
 * roles of the states each was found in. 0 to go on, -1 when the caller must look closer (a stop
 * role, or more needles than present holds), -2 on error. */
static inline int quiet_step(unsigned char c, const unsigned char *classes, const uint16_t *table,
                             Py_ssize_t width, PyObject *outputs, const unsigned char *flags, Py_ssize_t flagged,
                             Py_ssize_t *state, int *seen, PyObject **present, unsigned char *present_flags,
                             Py_ssize_t *count) {
    PyObject *ends;
    if (advance(c, classes, table, width, PyTuple_GET_SIZE(outputs), state, "quiet") < 0)
        return -2;
    if (*state < flagged)
        return 0;  /* (most steps) a state with no flags: flags is not read either */
    unsigned char f = flags[*state];
    if (f & QUIET_STOP)
        return -1;
    if (!(f & QUIET_ENDS))
        return 0;  /* no needle ends here: outputs is not read (one cache line fewer a step) */
    if (ends_at(outputs, *state, &ends, "quiet") < 0)
        return -2;
    if (ends == NULL)
        return 0;
    *seen |= f;
    for (Py_ssize_t e = 0; e < PyTuple_GET_SIZE(ends); e++) {
        PyObject *needle = PyTuple_GET_ITEM(ends, e);
        Py_ssize_t i = 0;
        while (i < *count && present[i] != needle)  /* the table's needles are one object each */
            i++;
        if (i == *count) {
            if (*count == QUIET_MAX_NEEDLES)
                return -1;
            present[(*count)++] = needle;
            present_flags[i] = 0;
        }
        present_flags[i] |= f;
    }
    return 0;
}

/* quiet(): 0 or 1 for a text that surely triggers nothing, -1 when the caller must look closer, -2
 * on error. spec is (roles, digit_limit, piece, flags, flagged): roles maps a needle to (flags,
 * after), after the (alone, seconds, more) of the triggers whose first set holds it (Funnel._after,
 * its sets as tuples of the table's own needle objects, which meets() compares by identity) or
 * None; flags (bytes, one per state of the table) holds the roles of the needles that end in each
 * state, and 16 where some needle ends, so that outputs is read only there and the roles dict only
 * for the needles of states where a trigger's needle ends; flagged, a state before which all flags
 * are 0 (needle_table numbers the states where needles end last), so that flags is read
 * only from there. */
typedef struct {
    PyObject *roles;  /* borrowed, as the flags: the spec's caller holds it */
    const unsigned char *flags;
    Py_ssize_t digit_limit, piece, flagged;
} quiet_spec;

/* quiet()'s spec, checked against the table's outputs, into *out: 0, or -1 with a ValueError set. */
static int read_spec(PyObject *spec, PyObject *outputs, quiet_spec *out) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5 || !PyDict_Check(PyTuple_GET_ITEM(spec, 0)) ||
        !PyBytes_Check(PyTuple_GET_ITEM(spec, 3)) ||
        PyBytes_GET_SIZE(PyTuple_GET_ITEM(spec, 3)) != PyTuple_GET_SIZE(outputs)) {
        PyErr_SetString(PyExc_ValueError,
                        "quiet: spec is (roles, digit_limit, piece, flags of each state, the first state flagged)");
        return -1;
    }
    out->roles = PyTuple_GET_ITEM(spec, 0);
    out->flags = (const unsigned char *)PyBytes_AS_STRING(PyTuple_GET_ITEM(spec, 3));
    out->digit_limit = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 1));
    out->piece = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 2));
    out->flagged = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 4));
    if ((out->digit_limit == -1 || out->piece == -1 || out->flagged == -1) && PyErr_Occurred())
        return -1;
    if (out->flagged < 0 || out->flagged > PyTuple_GET_SIZE(outputs)) {
        PyErr_SetString(PyExc_ValueError, "quiet: the first state flagged is outside the table");
        return -1;
    }
    return 0;
}

static int quiet_verdict(PyObject *text, const unsigned char *classes, const uint16_t *table, Py_ssize_t width,
                         PyObject *outputs, const quiet_spec *spec) {
    PyObject *roles = spec->roles;
    const unsigned char *flags = spec->flags;
    Py_ssize_t digit_limit = spec->digit_limit, piece = spec->piece, flagged = spec->flagged;
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    /* A text the funnel's cleaning leaves as it is: printable ASCII, no space at either end or
     * beside another (anything else: the caller cleans it). s[n] is the str's terminating NUL. */
    if (n == 0 || s[0] == ' ' || s[n - 1] == ' ')
        return -1;
    PyObject *present[QUIET_MAX_NEEDLES];  /* borrowed from outputs, which the caller holds */
    unsigned char present_flags[QUIET_MAX_NEEDLES];
    Py_ssize_t count = 0, state = 0, digits_seen = 0, run = 0, longest = 0;
    int seen = 0, before = 0, step;
    /* The needles of marked_lower(text), as scan_into() finds them; on the way, the digits and
     * the longest piece without a space (for the masks' hints below). */
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c < 0x20 || c > 0x7e || (c == ' ' && s[i + 1] == ' '))
            return -1;
        digits_seen += c >= '0' && c <= '9';
        run = c == ' ' ? 0 : run + 1;
        if (run > longest)
            longest = run;
        int word = is_word_char(c);
        if (word != before && (step = quiet_step(0, classes, table, width, outputs, flags, flagged, &state, &seen,
                                                 present, present_flags, &count)) != 0)
            return step;
        if ((step = quiet_step((c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c, classes, table, width,
                               outputs, flags, flagged, &state, &seen, present, present_flags, &count)) != 0)
            return step;
        before = word;
    }
    if (before && (step = quiet_step(0, classes, table, width, outputs, flags, flagged, &state, &seen, present,
                                     present_flags, &count)) != 0)
        return step;
    int digit = (seen & QUIET_DIGIT) != 0, asks_all = (seen & QUIET_RECALL_ALL) != 0;
    for (Py_ssize_t i = 0; (seen & QUIET_TRIGGER) && i < count; i++) {
        if (!(present_flags[i] & QUIET_TRIGGER))
            continue;
        PyObject *role = PyDict_GetItemWithError(roles, present[i]);
        if (role == NULL) {
            if (PyErr_Occurred())
                return -2;
            continue;  /* beside a trigger's needle in its state, a needle of some other gate */
        }
        Py_INCREF(role);  /* held while its parts are read */
        int checked = quiet_role(role, present, count, &digit, &asks_all);
        Py_DECREF(role);
        if (checked != 0)
            return checked;
    }
    /* The only mask hints are digits: masks run on digit_limit of them, or a long piece. */
    if (digit && (digits_seen >= digit_limit || longest >= piece))
        return -1;
    return asks_all;
}

static PyObject *quiet(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "quiet(text, classes, table, outputs, spec)");
        return NULL;
    }
    const unsigned char *classes;
    const uint16_t *table;
    Py_ssize_t width;
    quiet_spec spec;
    if (check_ascii(args[0], "quiet") < 0 || read_table(args[1], args[2], args[3], "quiet", &classes, &table, &width) < 0 ||
        read_spec(args[4], args[3], &spec) < 0)
        return NULL;
    int verdict = quiet_verdict(args[0], classes, table, width, args[3], &spec);
    return verdict == -2 ? NULL : PyLong_FromLong(verdict);
}

/* -- read_request(): the usual chat request, read in one call ------------------------------- */

static PyObject *s_content_type, *s_transfer_encoding, *s_content_encoding, *s_content_length, *s_input, *s_read,
    *s_messages, *s_message, *s_closed;

/* What str.strip() takes off the ends of an ASCII str. */
static int is_strip_space(unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f); }

/* JSON's whitespace, which may follow the body's value. */
static int is_json_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The longest id memo_mw.adapters.clean_id() keeps (MAX_ID_CHARS). */
#define MAX_ID_CHARS 256

/* The body's length from environ as memo_mw.middleware.MemoryMiddleware._body_length() reads it, for
 * the usual request: *length set and 1; 0 when Python must look (an unusual content type, a transfer
 * or content encoding, a length not written as plain digits); -1 on error. */
static int plain_length(PyObject *environ, PyObject *content_types, Py_ssize_t *length) {
    PyObject *value = PyDict_GetItemWithError(environ, s_content_type);
    if (value == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int known = PySet_Contains(content_types, value);
    if (known <= 0)
        return known;
    if ((value = PyDict_GetItemWithError(environ, s_transfer_encoding)) != NULL ||
        ((value = PyDict_GetItemWithError(environ, s_content_encoding)) != NULL && value != Py_None))
        return 0;
    if (PyErr_Occurred() || (value = PyDict_GetItemWithError(environ, s_content_length)) == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyUnicode_CheckExact(value) || !PyUnicode_IS_ASCII(value) || PyUnicode_GET_LENGTH(value) == 0)
        return 0;
    const unsigned char *digits = PyUnicode_1BYTE_DATA(value);
    *length = 0;
    for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(value); i++) {
        if (digits[i] < '0' || digits[i] > '9' || *length > (PY_SSIZE_T_MAX - 9) / 10)
            return 0;  /* not plain digits, or more than a Py_ssize_t holds: Python reads it */
        *length = *length * 10 + (digits[i] - '0');
    }
    return 1;
}

/* -- the usual body's "message", without making the body's objects --------------------------- */

/* Deepest nesting plain_json() follows (deeper: the scanner's to read). */
#define PLAIN_JSON_DEPTH 32

/* What plain_json() found: the value of the body's last "message" key (the one json.loads keeps). */
typedef struct {
    Py_ssize_t start, end;  /* the message's value; start -1: no "message" key */
    int messages;           /* the body has a "messages" key */
} plain_found;

static Py_ssize_t json_space_end(const unsigned char *b, Py_ssize_t i, Py_ssize_t n) {
    while (i < n && is_json_space(b[i]))
        i++;
    return i;
}

/* The end of the JSON string at b[i] (a quote), as the json module's strict scanner reads it: the
 * index after its closing quote, or -1 where the scanner would refuse it (a control character, a
 * bad escape, no end). *escaped set when it holds an escape. */
static Py_ssize_t json_string_end(const unsigned char *b, Py_ssize_t i, Py_ssize_t n, int *escaped) {
    *escaped = 0;
    for (i++; i < n; i++) {
        unsigned char c = b[i];
        if (c == '"')
            return i + 1;
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            *escaped = 1;
            if (++i >= n)
                return -1;
            c = b[i];
            if (c == 'u') {
                for (int k = 1; k <= 4; k++) {
                    unsigned char h = i + k < n ? b[i + k] : 0;
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
                        return -1;
                }
                i += 4;
            } else if (c == 0 || !strchr("\"\\/bfnrt", c)) {
                return -1;
            }
        }
    }
    return -1;
}

/* The end of the JSON value at b[i] (after any space), or -1 where plain_json() leaves the body to
 * the scanner: JSON the scanner refuses, and what is left to it to be sure (a number with a
 * fraction or exponent or of more than 18 digits, a key with an escape at the top, nesting past
 * PLAIN_JSON_DEPTH). At depth 0 (the body itself) only an object is taken, and its "message" and
 * "messages" keys are noted in found. */
static Py_ssize_t json_value_end(const unsigned char *b, Py_ssize_t i, Py_ssize_t n, int depth,
                                 plain_found *found) {
    int escaped;
    if (i >= n)
        return -1;
    unsigned char c = b[i];
    if (depth == 0 && c != '{')
        return -1;
    if (c == '"')
        return json_string_end(b, i, n, &escaped);
    if (c == '{' || c == '[') {
        if (depth >= PLAIN_JSON_DEPTH)
            return -1;
        unsigned char close = c == '{' ? '}' : ']';
        i = json_space_end(b, i + 1, n);
        if (i < n && b[i] == close)
            return i + 1;
        for (;;) {
            Py_ssize_t value;
            if (c == '{') {  /* "key": value */
                if (i >= n || b[i] != '"')
                    return -1;
                Py_ssize_t key = i, key_end = json_string_end(b, i, n, &escaped);
                if (key_end < 0 || (depth == 0 && escaped))
                    return -1;
                i = json_space_end(b, key_end, n);
                if (i >= n || b[i] != ':')
                    return -1;
                value = json_space_end(b, i + 1, n);
                if ((i = json_value_end(b, value, n, depth + 1, found)) < 0)
                    return -1;
                if (depth == 0 && key_end - key == 9 && memcmp(b + key, "\"message\"", 9) == 0) {
                    found->start = value;
                    found->end = i;
                } else if (depth == 0 && key_end - key == 10 && memcmp(b + key, "\"messages\"", 10) == 0) {
                    found->messages = 1;
                }
            } else if ((i = json_value_end(b, i, n, depth + 1, found)) < 0) {
                return -1;
            }
            i = json_space_end(b, i, n);
            if (i < n && b[i] == ',') {
                i = json_space_end(b, i + 1, n);
                continue;
            }
            return i < n && b[i] == close ? i + 1 : -1;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {  /* an integer: -?(0|[1-9][0-9]*) */
        Py_ssize_t digits = i + (c == '-');
        if (digits >= n || b[digits] < '0' || b[digits] > '9')
            return -1;
        Py_ssize_t end = digits + 1;
        if (b[digits] != '0') {
            while (end < n && b[end] >= '0' && b[end] <= '9')
                end++;
        }
        if (end - digits > 18 || (end < n && (b[end] == '.' || b[end] == 'e' || b[end] == 'E')))
            return -1;
        return end;
    }
    static const char *const literals[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        Py_ssize_t m = (Py_ssize_t)strlen(literals[k]);
        if (n - i >= m && memcmp(b + i, literals[k], (size_t)m) == 0)
            return i + m;
    }
    return -1;
}

/* The usual body's message, read without making the body's objects: 1 and *message (a new
 * reference) when the body (ASCII, starting with '{') is one JSON object, with nothing but space
 * after it, that json.loads reads to a dict with no "messages" key and a "message" that is a
 * non-empty str; 0 when it surely is not; -1 when the scanner must tell (see json_value_end(); also
 * a message with a \u escape); -2 on error. */
static int plain_json(const unsigned char *b, Py_ssize_t n, PyObject **message) {
    plain_found found = {-1, -1, 0};
    Py_ssize_t end = json_value_end(b, 0, n, 0, &found);
    if (end < 0 || json_space_end(b, end, n) != n)
        return -1;
    if (found.messages || found.start < 0 || b[found.start] != '"' || found.end - found.start <= 2)
        return 0;
    const unsigned char *s = b + found.start + 1;
    Py_ssize_t length = found.end - found.start - 2;
    if (memchr(s, '\\', (size_t)length) == NULL)
        return (*message = ascii_str(s, length)) == NULL ? -2 : 1;
    /* Its escapes decoded (json_string_end() checked them): each makes one character of two. */
    unsigned char *decoded = PyMem_Malloc((size_t)length);
    if (decoded == NULL) {
        PyErr_NoMemory();
        return -2;
    }
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        unsigned char c = s[i];
        if (c == '\\') {
            if ((c = s[++i]) == 'u') {
                PyMem_Free(decoded);
                return -1;  /* a \u escape: the scanner decodes it */
            }
            c = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
        }
        decoded[k++] = c;
    }
    *message = ascii_str(decoded, k);
    PyMem_Free(decoded);
    return *message == NULL ? -2 : 1;
}

/* The KeySet of the user in views (the middleware's: user id -> a weak reference to the key set of
 * the user's view's copy of memories, or a tuple holding that reference first: see view_answers()),
 * a new reference; NULL (no error set) for none, or NULL with an error that is no Exception (which
 * goes on up). *entry: a new reference to the user's tuple, when the value is one (else NULL). */
static KeySetObject *view_keys(PyObject *views, PyObject *user, PyObject **entry) {
    PyObject *ref = views != NULL ? PyDict_GetItemWithError(views, user) : NULL;
    KeySetObject *keys = NULL;
    *entry = NULL;
    if (ref != NULL && PyTuple_CheckExact(ref) && PyTuple_GET_SIZE(ref) > 0) {
        *entry = Py_NewRef(ref);
        ref = PyTuple_GET_ITEM(ref, 0);
    }
    if (ref != NULL && PyWeakref_CheckRef(ref)) {
        PyObject *held = PyWeakref_GetObject(ref);  /* borrowed; None once gone */
        if (held != NULL && PyObject_TypeCheck(held, &KeySetType))
            keys = (KeySetObject *)Py_NewRef(held);
    }
    if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_Exception))
        PyErr_Clear();
    if (keys == NULL)
        Py_CLEAR(*entry);
    return keys;
}

/* The item of a one-item list (a cell), borrowed; NULL for anything else. */
static inline PyObject *cell_item(PyObject *cell) {
    return PyList_CheckExact(cell) && PyList_GET_SIZE(cell) == 1 ? PyList_GET_ITEM(cell, 0) : NULL;
}

#ifndef _WIN32
/* The clock's time in seconds, as time.monotonic() (CLOCK_MONOTONIC) or time.time() (CLOCK_REALTIME)
 * gives it, into *seconds: 0, or -1 (no error set) where the clock cannot be read. */
static int clock_seconds(clockid_t clock, double *seconds) {
    struct timespec now;
    if (clock_gettime(clock, &now) != 0)
        return -1;
    *seconds = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
    return 0;
}
#endif

/* Whether the user's view still answers a message that shares nothing with its keys: "nothing to
 * recall" (1), or not (0: the middleware looks); -1 on error. entry is the user's value in views,
 * (keys_ref, answers, epoch, generation, until), as MemoryMiddleware._read_user() keeps it: answers
 * True when nothing but shared keys could make recall find something (a quick view with no
 * insights); (epoch, generation) the user's stamp when the view was read; until its end by
 * time.monotonic(). quick is (trusted, generations, spooled): the checks of
 * MemoryMiddleware._handle(), made here from memo_mw.statecache.CachedUserState's cells, read without
 * an attribute lookup: the same stamp now (as its stamp(): its _trusted cell's (epoch, pid) with this
 * process's id and the view's epoch, and the view's generation in generations, its _generation), and
 * no jobs waiting in the outbox (spooled: its backend's _spooled cell false, or None without one). */
static int view_answers(PyObject *entry, PyObject *quick, PyObject *user) {
#ifdef _WIN32
    return 0;  /* (no CLOCK_MONOTONIC or getpid() here: the middleware's Python makes the checks) */
#else
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 5 || PyTuple_GET_ITEM(entry, 1) != Py_True ||
        !PyFloat_CheckExact(PyTuple_GET_ITEM(entry, 4)) || !PyTuple_CheckExact(quick) || PyTuple_GET_SIZE(quick) != 3 ||
        !PyDict_Check(PyTuple_GET_ITEM(quick, 1)))
        return 0;
    double now;
    if (clock_seconds(CLOCK_MONOTONIC, &now) < 0 || !(now < PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(entry, 4))))
        return 0;
    PyObject *trusted = cell_item(PyTuple_GET_ITEM(quick, 0));
    if (trusted == NULL)
        return 0;
    Py_INCREF(trusted);  /* held while compared (a comparison may run code) */
    /* getpid() each time, as stamp() asks it: uWSGI forks without Python's at-fork hooks. */
    int same = PyTuple_CheckExact(trusted) && PyTuple_GET_SIZE(trusted) == 2 &&
               PyLong_CheckExact(PyTuple_GET_ITEM(trusted, 1)) &&
               PyLong_AsLong(PyTuple_GET_ITEM(trusted, 1)) == (long)getpid() &&
               PyObject_RichCompareBool(PyTuple_GET_ITEM(trusted, 0), PyTuple_GET_ITEM(entry, 2), Py_EQ) == 1;
    Py_DECREF(trusted);
    if (PyErr_Occurred())
        return -1;
    if (!same)
        return 0;
    /* (a plain lookup: a user the defaultdict does not hold is no view's stamp) */
    PyObject *generation = PyDict_GetItemWithError(PyTuple_GET_ITEM(quick, 1), user);
    if (generation == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(generation);
    same = PyObject_RichCompareBool(generation, PyTuple_GET_ITEM(entry, 3), Py_EQ);
    Py_DECREF(generation);
    PyObject *spool = PyTuple_GET_ITEM(quick, 2);
    if (same != 1 || spool == Py_None)
        return same;
    PyObject *spooled = cell_item(spool);
    return spooled == Py_False;  /* (anything else: the middleware looks) */
#endif
}

/* What a failure of the answer's steps gives: 0 (Python does the steps again, and says what failed)
 * for an Exception, -1 (on up) for anything else. */
static int step_failed(void) {
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyErr_Clear();
    return 0;
}

/* The rest of the request the user's view answers, as MemoryMiddleware.__call__() and its
 * _count_topics() make it: the funnel's stage under capture_key, the message's counts appended to
 * the state's notes as (user, week, en_only) while gate is None or gate.closed (gate a one-item list: its
 * item, a bool, closed; as memo_mw.breaker.CircuitBreaker.closed_cell), and the body back in
 * environ["wsgi.input"] as input_type(raw). tally is (week, gate, append, en_only, capture_key,
 * input_type): week the middleware's cell of (the UTC day's first second, the next day's, that day's
 * ISO week) by time.time()'s clock, en_only the counts of a message with no topic in English. 1 when
 * done; 0 where Python makes them (a message with topics, a time outside the cell's day, or a step
 * that raised an Exception: what was done then, Python does again the same way); -1 on an error
 * that is no Exception. */
static int answer_request(PyObject *environ, PyObject *raw, PyObject *user, PyObject *topics, PyObject *stage,
                          PyObject *tally) {
#ifdef _WIN32
    return 0;
#else
    if (topics != Py_None && !(PyAnySet_Check(topics) && PySet_GET_SIZE(topics) == 0))
        return 0;  /* (count_keys() names the topics: Python) */
    PyObject *week = cell_item(PyTuple_GET_ITEM(tally, 0)), *gate = PyTuple_GET_ITEM(tally, 1);
    double t;
    if (week == NULL || !PyTuple_CheckExact(week) || PyTuple_GET_SIZE(week) != 3 ||
        !PyFloat_CheckExact(PyTuple_GET_ITEM(week, 0)) || !PyFloat_CheckExact(PyTuple_GET_ITEM(week, 1)) ||
        clock_seconds(CLOCK_REALTIME, &t) < 0)
        return 0;
    if (!(PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(week, 0)) <= t && t < PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(week, 1))))
        return 0;  /* another day: Python reads its week */
    Py_INCREF(week);  /* held: the gate and the calls below may run code that changes the cell */
    PyObject *input = NULL, *note = NULL, *appended = NULL;
    int counting = 1, done = 0;
    PyObject *cell = gate != Py_None ? cell_item(gate) : NULL;  /* (a breaker's closed_cell) */
    if (cell == Py_True || cell == Py_False) {
        counting = cell == Py_True;
    } else if (gate != Py_None) {
        PyObject *closed = PyObject_GetAttr(gate, s_closed);
        counting = closed == NULL ? -1 : PyObject_IsTrue(closed);
        Py_XDECREF(closed);
        if (counting < 0)
            goto failed;
    }
    if ((input = PyObject_CallOneArg(PyTuple_GET_ITEM(tally, 5), raw)) == NULL ||
        PyDict_SetItem(environ, PyTuple_GET_ITEM(tally, 4), stage) < 0)
        goto failed;
    if (counting && ((note = PyTuple_Pack(3, user, PyTuple_GET_ITEM(week, 2), PyTuple_GET_ITEM(tally, 3))) == NULL ||
                     (appended = PyObject_CallOneArg(PyTuple_GET_ITEM(tally, 2), note)) == NULL))
        goto failed;
    /* (wsgi.input is a key environ holds: replacing its value allocates nothing. Were it to fail
     * all the same, Python makes the steps again: better a count twice than a body lost.) */
    if (PyDict_SetItem(environ, s_input, input) < 0)
        goto failed;
    done = 1;
    goto out;
failed:
    done = step_failed();
out:
    Py_XDECREF(appended);
    Py_XDECREF(note);
    Py_XDECREF(input);
    Py_DECREF(week);
    return done;
#endif
}

/* Whether the rules read_request() is given are still the ones to use: fresh is (cell, interval), the
 * cell memo_mw.reload.ReloadingFunnel's of the time (by time.monotonic()) it last looked at its
 * files, and a look is due unless 0 <= now - then < interval (as its check()). 1 or 0. */
static int still_fresh(PyObject *fresh) {
#ifdef _WIN32
    return 0;
#else
    PyObject *then;
    double now;
    if (!PyFloat_CheckExact(PyTuple_GET_ITEM(fresh, 1)) ||
        (then = cell_item(PyTuple_GET_ITEM(fresh, 0))) == NULL || !PyFloat_CheckExact(then) ||
        clock_seconds(CLOCK_MONOTONIC, &now) < 0)
        return 0;
    double since = now - PyFloat_AS_DOUBLE(then);
    return 0 <= since && since < PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(fresh, 1));
#endif
}

/* read_request()'s arguments but environ, checked (borrowed: the caller, or a Reader, holds them). */
typedef struct {
    PyObject *content_types, *user_key, *scan, *views, *quick, *tally, *fresh;  /* (NULL for None) */
    Py_ssize_t max_body;  /* -1: Python reads every request (a cap that is no plain int) */
    /* usual's parts: rules 1 when read, 0 without usual (only the body is read), -1 for a usual
     * whose parts cannot be read (the body comes back, as for anything that fails after the read) */
    int rules, answers;
    const unsigned char *classes;
    const uint16_t *table;
    Py_ssize_t width;
    PyObject *outputs, *lexicon, *results, *stage;  /* (stage NULL: no answer made in the call) */
    quiet_spec spec;
} request_args;

static const char READ_ARGS[] = "content_types, max_body, user_key, scan, usual[, views[, quick[, tally[, fresh]]]]";

/* read_request()'s arguments after environ, args[0:nargs], into *ra: 0, or -1 with a TypeError
 * for arguments of the wrong kind (and, strict, the error of a usual whose parts cannot be read: a
 * ValueError, or an OverflowError for a spec's int past a Py_ssize_t). */
static int read_args(PyObject *const *args, Py_ssize_t nargs, request_args *ra, int strict) {
    if (nargs < 5 || nargs > 9) {
        PyErr_Format(PyExc_TypeError, "read_request(environ, %s)", READ_ARGS);
        return -1;
    }
    PyObject *usual = args[4];
    ra->content_types = args[0];
    ra->user_key = args[2] != Py_None ? args[2] : NULL;
    ra->scan = args[3];
    ra->views = nargs >= 6 && args[5] != Py_None ? args[5] : NULL;
    ra->quick = nargs >= 7 && args[6] != Py_None ? args[6] : NULL;
    ra->tally = nargs >= 8 && args[7] != Py_None ? args[7] : NULL;
    ra->fresh = nargs == 9 && args[8] != Py_None ? args[8] : NULL;
    if (!PyAnySet_Check(ra->content_types) || (ra->user_key != NULL && !PyUnicode_Check(ra->user_key)) ||
        (usual != Py_None && (!PyTuple_Check(usual) || (PyTuple_GET_SIZE(usual) < 6 && PyTuple_GET_SIZE(usual) != 0) ||
                              PyTuple_GET_SIZE(usual) > 8)) ||
        (ra->views != NULL && !PyDict_CheckExact(ra->views)) ||
        (ra->quick != NULL && (!PyTuple_CheckExact(ra->quick) || PyTuple_GET_SIZE(ra->quick) != 3)) ||
        (ra->tally != NULL && (!PyTuple_CheckExact(ra->tally) || PyTuple_GET_SIZE(ra->tally) != 6)) ||
        (ra->fresh != NULL && (!PyTuple_CheckExact(ra->fresh) || PyTuple_GET_SIZE(ra->fresh) != 2))) {
        PyErr_SetString(PyExc_TypeError, "read_request: content types a set, usual a 6- to 8-tuple, () or None, "
                                         "views a dict or None, quick a (trusted, generations, spooled) tuple or None, "
                                         "tally a 6-tuple or None, fresh a (cell, interval) tuple or None");
        return -1;
    }
    ra->max_body = PyLong_CheckExact(args[1]) ? PyLong_AsSsize_t(args[1]) : -1;
    if (ra->max_body < 0)  /* (no plain int, or past a Py_ssize_t) */
        PyErr_Clear();
    ra->rules = 0;
    if (usual == Py_None || PyTuple_GET_SIZE(usual) == 0)
        return 0;
    ra->rules = -1;
    ra->lexicon = PyTuple_GET_ITEM(usual, 4);
    ra->results = PyTuple_GET_ITEM(usual, 5);
    ra->answers = PyTuple_GET_SIZE(usual) >= 7 && PyTuple_GET_ITEM(usual, 6) == Py_True;
    ra->stage = PyTuple_GET_SIZE(usual) == 8 ? PyTuple_GET_ITEM(usual, 7) : NULL;
    ra->outputs = PyTuple_GET_ITEM(usual, 2);
    if (!PyObject_TypeCheck(ra->lexicon, &LexiconType) || !PyTuple_Check(ra->results) ||
        PyTuple_GET_SIZE(ra->results) != 2) {
        if (strict)
            PyErr_SetString(PyExc_ValueError, "read_request: usual holds a Lexicon and the two quiet results");
        return strict ? -1 : 0;
    }
    if (read_table(PyTuple_GET_ITEM(usual, 0), PyTuple_GET_ITEM(usual, 1), ra->outputs, "read_request", &ra->classes,
                   &ra->table, &ra->width) < 0 ||
        read_spec(PyTuple_GET_ITEM(usual, 3), ra->outputs, &ra->spec) < 0) {
        if (strict)
            return -1;
        PyErr_Clear();
        return 0;
    }
    ra->rules = 1;
    return 0;
}

/* The usual request's parts from its body raw (read whole): (raw, body, message, user id, the funnel's
 * result or None, the message's analysis), or NULL (with or without an error set) for anything else:
 * a body that is not ASCII, not one JSON object starting at its first byte, an OpenAI body, a message
 * that is not a non-empty ASCII str, no plain user id in the header user_key. */
static PyObject *usual_parts(PyObject *environ, PyObject *raw, const request_args *ra) {
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(raw);
    Py_ssize_t n = PyBytes_GET_SIZE(raw);
    if (ra->rules <= 0 || ra->user_key == NULL || n == 0 || b[0] != '{')
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (b[i] & 0x80)
            return NULL;
    }
    /* The body's message, read in place; where that cannot tell, the json module's scanner reads
     * the body (and the body's object goes back to the caller, which would read it anyway). */
    PyObject *out = NULL, *analysis = NULL, *user = NULL, *scanned = NULL, *body = Py_None, *message = NULL;
    PyObject *entry = NULL;  /* the user's tuple in views, when it is one */
    unsigned char *folded = NULL;
    int plain = plain_json(b, n, &message);
    if (plain == 0 || plain == -2)
        return NULL;
    if (plain < 0) {
        PyObject *text = ascii_str(b, n);
        if (text == NULL)
            return NULL;
        PyObject *argv[2] = {text, NULL};
        argv[1] = PyLong_FromLong(0);
        scanned = argv[1] == NULL ? NULL : PyObject_Vectorcall(ra->scan, argv, 2, NULL);
        Py_XDECREF(argv[1]);
        Py_DECREF(text);
        if (scanned == NULL)
            return NULL;
        if (!PyTuple_Check(scanned) || PyTuple_GET_SIZE(scanned) != 2 ||
            !PyDict_CheckExact(PyTuple_GET_ITEM(scanned, 0)))
            goto done;
        Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(scanned, 1));
        if (end < 0 || end > n)
            goto done;
        for (Py_ssize_t i = end; i < n; i++) {
            if (!is_json_space(b[i]))
                goto done;  /* extra data: decode() says what */
        }
        body = PyTuple_GET_ITEM(scanned, 0);
        message = PyDict_GetItemWithError(body, s_messages);
        if (message != NULL || PyErr_Occurred() || (message = PyDict_GetItemWithError(body, s_message)) == NULL ||
            !PyUnicode_CheckExact(message) || !PyUnicode_IS_ASCII(message) || PyUnicode_GET_LENGTH(message) == 0) {
            message = NULL;
            goto done;
        }
        Py_INCREF(message);
    }
    user = PyDict_GetItemWithError(environ, ra->user_key);
    if (user == NULL || !PyUnicode_CheckExact(user) || !PyUnicode_IS_ASCII(user) || PyUnicode_GET_LENGTH(user) == 0 ||
        PyUnicode_GET_LENGTH(user) > MAX_ID_CHARS || is_strip_space(PyUnicode_1BYTE_DATA(user)[0]) ||
        is_strip_space(PyUnicode_1BYTE_DATA(user)[PyUnicode_GET_LENGTH(user) - 1])) {
        user = NULL;
        goto done;
    }
    Py_INCREF(user);  /* held: what follows makes objects, and a collection may run code that changes environ */
    PyObject *lexicon = ra->lexicon, *results = ra->results;
    int verdict = quiet_verdict(message, ra->classes, ra->table, ra->width, ra->outputs, &ra->spec);
    if (verdict == -2)
        goto done;
    /* The tagger's analysis of the message, case-folded (for ASCII, lower case). */
    Py_ssize_t length = PyUnicode_GET_LENGTH(message);
    const unsigned char *m = PyUnicode_1BYTE_DATA(message);
    if ((folded = PyMem_Malloc((size_t)length + 1)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < length; i++)
        folded[i] = (m[i] >= 'A' && m[i] <= 'Z') ? (unsigned char)(m[i] + 32) : m[i];
    /* With the user's view's keys, checked against them without the tokens made (the usual
     * message shares none); where they may share one, or without keys, the whole analysis. */
    KeySetObject *keys = view_keys(ra->views, user, &entry);
    if (keys == NULL && PyErr_Occurred())
        goto done;
    analysis = keys == NULL ? NULL : analysis_of(folded, length, (LexiconObject *)lexicon, keys);
    Py_XDECREF(keys);
    if (analysis == NULL && !PyErr_Occurred())
        analysis = analysis_of(folded, length, (LexiconObject *)lexicon, NULL);
    if (analysis == NULL)
        goto done;
    /* Nothing shared with the view's keys, nothing triggered, no recall-everything question: where
     * the view still answers, the request is answered here (nothing to recall, nothing to capture). */
    if (PyTuple_GET_ITEM(analysis, 0) == Py_None && verdict == 0 && entry != NULL && ra->quick != NULL && ra->answers) {
        int answers = view_answers(entry, ra->quick, user);
        if (answers < 0)
            goto done;
        if (answers && ra->tally != NULL && ra->stage != NULL) {
            int done = answer_request(environ, raw, user, PyTuple_GET_ITEM(analysis, 1), ra->stage, ra->tally);
            if (done < 0)
                goto done;
            if (done) {
                out = Py_NewRef(Py_True);
                goto done;
            }
        }
        if (answers) {
            out = PyTuple_Pack(5, raw, user, message, PyTuple_GET_ITEM(analysis, 1), PyTuple_GET_ITEM(results, 0));
            goto done;
        }
    }
    out = PyTuple_Pack(6, raw, body, message, user, verdict < 0 ? Py_None : PyTuple_GET_ITEM(results, verdict),
                       analysis);
done:
    Py_XDECREF(entry);
    PyMem_Free(folded);
    Py_XDECREF(analysis);
    Py_XDECREF(user);
    Py_XDECREF(message);
    Py_XDECREF(scanned);
    return out;
}

/* The request in environ read with the arguments ra: see the module's doc on read_request(). */
static PyObject *read_with(PyObject *environ, const request_args *ra) {
    if (!PyDict_Check(environ)) {
        PyErr_SetString(PyExc_TypeError, "read_request: environ a dict");
        return NULL;
    }
    if (ra->max_body < 0)
        return Py_NewRef(Py_False);  /* a cap that is no plain int, or past a Py_ssize_t: Python reads the request */
    if (ra->fresh != NULL && !still_fresh(ra->fresh))
        return Py_NewRef(Py_False);  /* the rules' files are due a look: Python looks, then reads */
    Py_ssize_t length;
    int plain = plain_length(environ, ra->content_types, &length);
    if (plain <= 0)
        return plain < 0 ? NULL : Py_NewRef(Py_False);
    if (length <= 0 || length > ra->max_body)
        Py_RETURN_NONE;
    /* bytes(environ["wsgi.input"].read(length)); its errors are the caller's. */
    PyObject *input = PyDict_GetItemWithError(environ, s_input);
    if (input == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, s_input);
        return NULL;
    }
    Py_INCREF(input);
    PyObject *size = PyLong_FromSsize_t(length);
    PyObject *data = size == NULL ? NULL : PyObject_CallMethodOneArg(input, s_read, size);
    Py_XDECREF(size);
    Py_DECREF(input);
    if (data == NULL)
        return NULL;
    PyObject *raw = data;
    if (!PyBytes_CheckExact(data)) {
        raw = PyObject_CallOneArg((PyObject *)&PyBytes_Type, data);
        Py_DECREF(data);
        if (raw == NULL)
            return NULL;
    }
    if (PyBytes_GET_SIZE(raw) != length)
        return raw;
    /* Read: from here on nothing fails, whatever happens the body goes back to the caller (but for
     * what is no Exception, as a KeyboardInterrupt in the JSON scanner's hooks: that goes on up). */
    PyObject *parts = usual_parts(environ, raw, ra);
    if (parts == NULL) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) {
            Py_DECREF(raw);
            return NULL;
        }
        PyErr_Clear();
        return raw;
    }
    Py_DECREF(raw);
    return parts;
}

/* read_request(environ, content_types, max_body, user_key, scan, usual[, views[, quick[, tally[, fresh]]]]): see
 * the module's doc. */
static PyObject *read_request(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    request_args ra;
    if (nargs < 1) {
        PyErr_Format(PyExc_TypeError, "read_request(environ, %s)", READ_ARGS);
        return NULL;
    }
    return read_args(args + 1, nargs - 1, &ra, 0) < 0 ? NULL : read_with(args[0], &ra);
}

/* -- Reader: read_request() with its arguments kept ---------------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *args;  /* the arguments, held: ra borrows from them */
    request_args ra;
} ReaderObject;

static PyObject *reader_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Reader(environ)");
        return NULL;
    }
    return read_with(args[0], &((ReaderObject *)self)->ra);
}

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_Format(PyExc_TypeError, "Reader(%s)", READ_ARGS);
        return NULL;
    }
    ReaderObject *reader = (ReaderObject *)type->tp_alloc(type, 0);
    if (reader == NULL)
        return NULL;
    reader->args = Py_NewRef(args);
    reader->vectorcall = reader_vectorcall;
    if (read_args(&PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), &reader->ra, 1) < 0) {
        Py_DECREF(reader);
        return NULL;
    }
    return (PyObject *)reader;
}

static int reader_traverse(ReaderObject *reader, visitproc visit, void *arg) {
    Py_VISIT(reader->args);
    return 0;
}

static int reader_clear(ReaderObject *reader) {
    reader->ra.max_body = -1;  /* (ra borrows from args: a reader the collector cleared reads nothing) */
    Py_CLEAR(reader->args);
    return 0;
}

static void reader_dealloc(ReaderObject *reader) {
    PyObject_GC_UnTrack(reader);
    reader_clear(reader);
    Py_TYPE(reader)->tp_free((PyObject *)reader);
}

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "memo_mw._speedups.Reader",
    .tp_basicsize = sizeof(ReaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(ReaderObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = reader_new,
    .tp_traverse = (traverseproc)reader_traverse,
    .tp_clear = (inquiry)reader_clear,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_doc = "Reader(content_types, max_body, user_key, scan, usual[, views[, quick[, tally[, fresh]]]]): "
              "read_request() with these arguments, checked once (a usual whose parts cannot be read is a "
              "ValueError here); reader(environ) is read_request(environ, ...).",
};

static PyMethodDef methods[] = {
    {"ascii_analysis", (PyCFunction)(void (*)(void))ascii_analysis, METH_FASTCALL,
     "ascii_analysis(folded, lexicon) -> (tokens, topics)"},
    {"marked_lower", marked_lower, METH_O, "marked_lower(text) -> the ASCII text folded and marked"},
    {"scan_marked", (PyCFunction)(void (*)(void))scan_marked, METH_FASTCALL,
     "scan_marked(text, classes, table, outputs) -> the needles in marked_lower(text)"},
    {"quiet", (PyCFunction)(void (*)(void))quiet, METH_FASTCALL,
     "quiet(text, classes, table, outputs, spec) -> 0 or 1 for a text that triggers nothing, -1: look closer"},
    {"read_request", (PyCFunction)(void (*)(void))read_request, METH_FASTCALL,
     "read_request(environ, content_types, max_body, user_key, scan, usual[, views[, quick[, tally[, fresh]]]]) -> "
     "False, None, True, the body, its parts or its answer"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "memo_mw._speedups",
                                    "The message analysis of an ASCII text in C (optional).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) {
    struct {
        PyObject **name;
        const char *text;
    } names[] = {{&s_content_type, "CONTENT_TYPE"}, {&s_transfer_encoding, "HTTP_TRANSFER_ENCODING"},
                 {&s_content_encoding, "HTTP_CONTENT_ENCODING"}, {&s_content_length, "CONTENT_LENGTH"},
                 {&s_input, "wsgi.input"}, {&s_read, "read"}, {&s_messages, "messages"}, {&s_message, "message"},
                 {&s_closed, "closed"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (*names[i].name == NULL && (*names[i].name = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    }
    if (PyType_Ready(&LexiconType) < 0 || PyType_Ready(&KeySetType) < 0 || PyType_Ready(&ReaderType) < 0)
        return NULL;
    PyObject *created = PyModule_Create(&module);
    if (created != NULL && (PyModule_AddObjectRef(created, "Lexicon", (PyObject *)&LexiconType) < 0 ||
                            PyModule_AddObjectRef(created, "KeySet", (PyObject *)&KeySetType) < 0 ||
                            PyModule_AddObjectRef(created, "Reader", (PyObject *)&ReaderType) < 0))
        Py_CLEAR(created);
    return created;
}
