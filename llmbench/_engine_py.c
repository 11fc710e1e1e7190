// _engine_py.c — Python binding of the inference engine (csrc/engine.h): llmbench._core.Engine.
// The GIL is released around every step; events come back as NumPy arrays. While one thread is inside
// the engine without the GIL (`busy`), a call from another thread raises instead of racing it. The Engine keeps its
// Reader (the mapped GGUF file) alive. Used by llmbench/llm.py; tested through tests/test_engine.py.
#include "_pycore.h"
#include "../csrc/engine.h"

typedef struct {
    PyObject_HEAD
    llmb_engine *e;
    PyObject *reader;
    int busy;   // a thread runs engine code with the GIL released
} EngineObject;

static int engine_busy(EngineObject *self) {
    if (!self->busy) return 0;
    PyErr_SetString(PyExc_RuntimeError, "engine: another thread is running it; an Engine serves one thread at a "
                                        "time (llmbench.LLM makes concurrent calls wait their turn)");
    return 1;
}

static void Engine_dealloc(EngineObject *self) {
    if (self->e) {
        Py_BEGIN_ALLOW_THREADS
        llmb_engine_free(self->e);
        Py_END_ALLOW_THREADS
    }
    Py_XDECREF(self->reader);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Engine_init(EngineObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"reader", "kv_type", "block_size", "n_blocks", "ctx", "max_batch_tokens", "max_seqs",
                            "threads", "float_act", "backend", "device", "graphs", "device_sampling", "bf16",
                            "profile", NULL};
    PyObject *reader;
    llmb_engine_params p = {.kv_type = 1, .block_size = 16, .max_batch_tokens = 512, .max_seqs = 64, .n_threads = 1,
                            .backend = "cpu", .graphs = 1};
    long long nb = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OiiLiiii|psipppp", names, &reader, &p.kv_type, &p.block_size, &nb,
                                     &p.ctx, &p.max_batch_tokens, &p.max_seqs, &p.n_threads, &p.float_act, &p.backend,
                                     &p.device, &p.graphs, &p.device_sampling, &p.bf16, &p.profile))
        return -1;
    p.n_blocks = nb;
    llmb_gguf *g = llmb_py_reader_gguf(reader);
    if (!g) return -1;
    if (engine_busy(self)) return -1;
    if (self->e) {
        PyErr_SetString(PyExc_RuntimeError, "Engine is already initialized");
        return -1;
    }
    llmb_status s;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    s = llmb_engine_create(g, &p, &self->e);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (s) {
        llmb_py_raise(s, NULL);
        return -1;
    }
    Py_INCREF(reader);
    self->reader = reader;
    return 0;
}

#define ENGINE(self)                                                        \
    if (engine_busy(self)) return NULL;                                     \
    if (!(self)->e) {                                                       \
        PyErr_SetString(PyExc_ValueError, "engine is not initialized");     \
        return NULL;                                                        \
    }

static PyObject *Engine_model_info(EngineObject *self, PyObject *noargs) {
    ENGINE(self);
    llmb_model_facts f;
    llmb_engine_model_info(self->e, &f);
    return Py_BuildValue("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:O}", "arch", f.arch, "n_layer", f.n_layer, "dim", f.dim,
                         "n_head", f.n_head, "n_head_kv", f.n_head_kv, "head_dim", f.head_dim, "ff", f.ff, "vocab",
                         f.vocab, "ctx_train", f.ctx_train, "tied_output", f.tied_output ? Py_True : Py_False);
}

// memory() -> {weights, kv_cache, kv_per_token, scratch, free_blocks, peak, device_free, device_total}:
// bytes the backend holds (peak and the device's free and total memory asked now; 0 on the CPU)
static PyObject *Engine_memory(EngineObject *self, PyObject *noargs) {
    ENGINE(self);
    llmb_memory_info m;
    llmb_status s = llmb_engine_memory(self->e, &m);
    if (s) return llmb_py_raise(s, NULL);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:L,s:K,s:K,s:K}", "weights", (unsigned long long)m.weights, "kv_cache",
                         (unsigned long long)m.kv, "kv_per_token", (unsigned long long)llmb_engine_kv_token_bytes(self->e),
                         "scratch", (unsigned long long)m.scratch, "free_blocks",
                         (long long)llmb_engine_free_blocks(self->e), "peak", (unsigned long long)m.peak, "device_free",
                         (unsigned long long)m.device_free, "device_total", (unsigned long long)m.device_total);
}

static PyObject *Engine_backend(EngineObject *self, void *closure) {
    ENGINE(self);
    return PyUnicode_FromString(llmb_engine_backend(self->e));
}

// add(prompt, *, temperature=0, top_k=0, top_p=1, min_p=0, repetition_penalty=1, presence_penalty=0,
//     frequency_penalty=0, seed=0, max_tokens=16, min_tokens=0, logprobs=0, prompt_logprobs_from=-1,
//     prompt_logits=False, hold=False, stop_tokens=(), fork_from=-1, alt_tokens=()) -> sequence id
static PyObject *Engine_add(EngineObject *self, PyObject *args, PyObject *kw) {
    ENGINE(self);
    static char *names[] = {"prompt", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                            "presence_penalty", "frequency_penalty", "seed", "max_tokens", "min_tokens", "logprobs",
                            "prompt_logprobs_from", "prompt_logits", "hold", "stop_tokens", "fork_from", "alt_tokens",
                            NULL};
    PyObject *prompt_obj, *stop_obj = NULL, *alt_obj = NULL;
    llmb_sampling sp = {0};
    sp.top_p = 1.0f;
    sp.repetition_penalty = 1.0f;
    sp.max_tokens = 16;
    sp.prompt_logprobs_from = -1;
    unsigned long long seed = 0;
    long long fork = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$fifffffKiiiippOLO", names, &prompt_obj, &sp.temperature, &sp.top_k,
                                     &sp.top_p, &sp.min_p, &sp.repetition_penalty, &sp.presence_penalty,
                                     &sp.frequency_penalty, &seed, &sp.max_tokens, &sp.min_tokens, &sp.n_logprobs,
                                     &sp.prompt_logprobs_from, &sp.prompt_logits, &sp.hold, &stop_obj, &fork, &alt_obj))
        return NULL;
    sp.seed = seed;
    PyArrayObject *prompt = (PyArrayObject *)PyArray_FROMANY(prompt_obj, NPY_INT32, 1, 1, NPY_ARRAY_CARRAY_RO);
    if (!prompt) return NULL;
    PyArrayObject *stop = NULL;
    if (stop_obj && stop_obj != Py_None) {
        stop = (PyArrayObject *)PyArray_FROMANY(stop_obj, NPY_INT32, 1, 1, NPY_ARRAY_CARRAY_RO);
        if (!stop) {
            Py_DECREF(prompt);
            return NULL;
        }
        sp.stop_tokens = PyArray_DATA(stop);
        sp.n_stop_tokens = (int)PyArray_SIZE(stop);
    }
    PyArrayObject *alt = NULL;
    if (alt_obj && alt_obj != Py_None) {
        alt = (PyArrayObject *)PyArray_FROMANY(alt_obj, NPY_INT32, 1, 1, NPY_ARRAY_CARRAY_RO);
        if (!alt) {
            Py_DECREF(prompt);
            Py_XDECREF(stop);
            return NULL;
        }
        sp.alt_tokens = PyArray_DATA(alt);
        sp.n_alt_tokens = (int)PyArray_SIZE(alt);
    }
    int64_t id = -1;
    llmb_status s = llmb_engine_add(self->e, PyArray_DATA(prompt), (int)PyArray_SIZE(prompt), &sp, fork, &id);
    Py_DECREF(prompt);
    Py_XDECREF(stop);
    Py_XDECREF(alt);
    if (s) return llmb_py_raise(s, NULL);
    return PyLong_FromLongLong(id);
}

static PyObject *Engine_step(EngineObject *self, PyObject *noargs) {
    ENGINE(self);
    int busy = 0;
    llmb_status s;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    s = llmb_engine_step(self->e, &busy);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (s) return llmb_py_raise(s, NULL);
    return PyBool_FromLong(busy);
}

// poll(topn=0) -> (seq int64[n], kind int32[n], token int32[n], logprob float32[n], t_ns uint64[n],
//                  topn_ids int32[n, topn], topn_logprobs float32[n, topn])
static PyObject *Engine_poll(EngineObject *self, PyObject *args) {
    ENGINE(self);
    int topn = 0;
    if (!PyArg_ParseTuple(args, "|i", &topn)) return NULL;
    if (topn < 0 || topn > 20) return PyErr_Format(PyExc_ValueError, "topn must be 0..20, got %d", topn);
    enum { CHUNK = 4096 };
    llmb_event *ev = PyMem_Malloc(CHUNK * sizeof *ev);
    int32_t *ids = topn ? PyMem_Malloc((size_t)CHUNK * (size_t)topn * sizeof *ids) : NULL;
    float *lps = topn ? PyMem_Malloc((size_t)CHUNK * (size_t)topn * sizeof *lps) : NULL;
    PyObject *parts = PyList_New(0);
    if (!ev || (topn && (!ids || !lps)) || !parts) {
        PyMem_Free(ev);
        PyMem_Free(ids);
        PyMem_Free(lps);
        Py_XDECREF(parts);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    for (;;) {
        int n = llmb_engine_poll(self->e, ev, CHUNK, ids, lps, topn);
        if (n == 0) break;
        npy_intp d1 = n, d2[2] = {n, topn};
        PyArrayObject *a_seq = (PyArrayObject *)PyArray_SimpleNew(1, &d1, NPY_INT64);
        PyArrayObject *a_kind = (PyArrayObject *)PyArray_SimpleNew(1, &d1, NPY_INT32);
        PyArrayObject *a_tok = (PyArrayObject *)PyArray_SimpleNew(1, &d1, NPY_INT32);
        PyArrayObject *a_lp = (PyArrayObject *)PyArray_SimpleNew(1, &d1, NPY_FLOAT32);
        PyArrayObject *a_t = (PyArrayObject *)PyArray_SimpleNew(1, &d1, NPY_UINT64);
        PyArrayObject *a_ids = (PyArrayObject *)PyArray_SimpleNew(2, d2, NPY_INT32);
        PyArrayObject *a_lps = (PyArrayObject *)PyArray_SimpleNew(2, d2, NPY_FLOAT32);
        PyObject *tup = (a_seq && a_kind && a_tok && a_lp && a_t && a_ids && a_lps)
                            ? PyTuple_Pack(7, a_seq, a_kind, a_tok, a_lp, a_t, a_ids, a_lps) : NULL;
        if (tup) {
            for (int i = 0; i < n; i++) {
                ((int64_t *)PyArray_DATA(a_seq))[i] = ev[i].seq;
                ((int32_t *)PyArray_DATA(a_kind))[i] = ev[i].kind;
                ((int32_t *)PyArray_DATA(a_tok))[i] = ev[i].token;
                ((float *)PyArray_DATA(a_lp))[i] = ev[i].logprob;
                ((uint64_t *)PyArray_DATA(a_t))[i] = ev[i].t_ns;
            }
            if (topn) {
                memcpy(PyArray_DATA(a_ids), ids, (size_t)n * (size_t)topn * sizeof *ids);
                memcpy(PyArray_DATA(a_lps), lps, (size_t)n * (size_t)topn * sizeof *lps);
            }
        }
        Py_XDECREF(a_seq); Py_XDECREF(a_kind); Py_XDECREF(a_tok); Py_XDECREF(a_lp); Py_XDECREF(a_t);
        Py_XDECREF(a_ids); Py_XDECREF(a_lps);
        if (!tup || PyList_Append(parts, tup) < 0) {
            Py_XDECREF(tup);
            goto done;
        }
        Py_DECREF(tup);
    }
    result = parts;
    Py_INCREF(result);
done:
    Py_DECREF(parts);
    PyMem_Free(ev);
    PyMem_Free(ids);
    PyMem_Free(lps);
    return result;
}

static PyObject *seq_call(EngineObject *self, PyObject *arg, llmb_status (*fn)(llmb_engine *, int64_t)) {
    ENGINE(self);
    long long id = PyLong_AsLongLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    llmb_status s = fn(self->e, id);
    if (s) return llmb_py_raise(s, NULL);
    Py_RETURN_NONE;
}

static PyObject *Engine_abort(EngineObject *self, PyObject *arg) { return seq_call(self, arg, llmb_engine_abort); }
static PyObject *Engine_release(EngineObject *self, PyObject *arg) { return seq_call(self, arg, llmb_engine_release); }

// The two arrays a prompt-score call fills for (seq, n): parsed and allocated here, filled by fill()
typedef llmb_status (*pair_fill)(llmb_engine *e, int64_t id, void *a, void *b, int n);

static PyObject *prompt_pair(EngineObject *self, PyObject *args, int type_a, int type_b, pair_fill fill) {
    ENGINE(self);
    long long id;
    int n;
    if (!PyArg_ParseTuple(args, "Li", &id, &n)) return NULL;
    if (n < 0) return PyErr_Format(PyExc_ValueError, "n must be >= 0");
    npy_intp d = n;
    PyObject *a = PyArray_SimpleNew(1, &d, type_a), *b = PyArray_SimpleNew(1, &d, type_b);
    llmb_status s = LLMB_OK;
    if (a && b) s = fill(self->e, id, PyArray_DATA((PyArrayObject *)a), PyArray_DATA((PyArrayObject *)b), n);
    if (!a || !b || s) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return s ? llmb_py_raise(s, NULL) : NULL;
    }
    return Py_BuildValue("(NN)", a, b);
}

static llmb_status fill_logprobs(llmb_engine *e, int64_t id, void *lp, void *greedy, int n) {
    return llmb_engine_prompt_logprobs(e, id, lp, greedy, n);
}
static llmb_status fill_alt(llmb_engine *e, int64_t id, void *lp, void *greedy, int n) {
    return llmb_engine_alt_logprobs(e, id, lp, greedy, n);
}
static llmb_status fill_top(llmb_engine *e, int64_t id, void *ids, void *lp, int n) {
    return llmb_engine_prompt_top(e, id, ids, lp, n);
}

// prompt_logprobs(seq, n) -> (logprobs float32[n], greedy bool[n]) of the scored prompt positions
static PyObject *Engine_prompt_logprobs(EngineObject *self, PyObject *args) {
    return prompt_pair(self, args, NPY_FLOAT32, NPY_BOOL, fill_logprobs);
}

// alt_logprobs(seq, n) -> (logprobs float32[n], greedy bool[n]) of the n alt_tokens in place of the last
// prompt token
static PyObject *Engine_alt_logprobs(EngineObject *self, PyObject *args) {
    return prompt_pair(self, args, NPY_FLOAT32, NPY_BOOL, fill_alt);
}

// prompt_top(seq, n) -> (ids int32[n], logprobs float32[n]): each scored prompt position's most likely token
static PyObject *Engine_prompt_top(EngineObject *self, PyObject *args) {
    return prompt_pair(self, args, NPY_INT32, NPY_FLOAT32, fill_top);
}

static PyObject *Engine_prompt_logits(EngineObject *self, PyObject *args) {
    ENGINE(self);
    long long id;
    Py_ssize_t n_prompt, vocab;
    if (!PyArg_ParseTuple(args, "Lnn", &id, &n_prompt, &vocab)) return NULL;
    npy_intp d[2] = {n_prompt, vocab};
    PyObject *out = PyArray_SimpleNew(2, d, NPY_FLOAT32);
    if (!out) return NULL;
    llmb_status s = llmb_engine_prompt_logits(self->e, id, PyArray_DATA((PyArrayObject *)out), (int64_t)n_prompt * vocab);
    if (s) {
        Py_DECREF(out);
        return llmb_py_raise(s, NULL);
    }
    return out;
}

static PyObject *Engine_stats(EngineObject *self, PyObject *noargs) {
    ENGINE(self);
    llmb_engine_stats st;
    llmb_engine_get_stats(self->e, &st);
    PyObject *d = Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "prefill_ns", st.prefill_ns, "decode_ns",
                                st.decode_ns, "sample_ns", st.sample_ns, "schedule_ns", st.schedule_ns, "steps",
                                st.steps, "prefill_tokens", st.prefill_tokens, "decode_tokens", st.decode_tokens);
    PyObject *more = d ? Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "backend_prefill_ns", st.backend_prefill_ns,
                                       "backend_decode_ns", st.backend_decode_ns, "backend_sample_ns",
                                       st.backend_sample_ns, "graph_replays", st.graph_replays, "graph_captures",
                                       st.graph_captures, "capture_ns", st.capture_ns, "kernels_per_step",
                                       st.kernels_per_step, "device_sampled_rows", st.device_sampled_rows,
                                       "solo_steps", st.solo_steps)
                       : NULL;
    if (!more || PyDict_Update(d, more)) {
        Py_XDECREF(d);
        Py_XDECREF(more);
        return NULL;
    }
    Py_DECREF(more);
    // the profile (zeros unless the engine profiles): {"prefill"|"decode": {kind: ns}}, and the products'
    // ns by weight type id, nonzero entries only
    static const char *kinds[LLMB_PROF_N] = {"embed", "norm", "quant_x", "matmul", "rope_kv", "attention",
                                             "elementwise"};
    static const char *phases[2] = {"prefill", "decode"};
    PyObject *prof = PyDict_New(), *types = PyDict_New();
    int ok = prof && types;
    for (int ph = 0; ok && ph < 2; ph++) {
        PyObject *k = PyDict_New(), *t = PyDict_New();
        ok = k && t;
        for (int i = 0; ok && i < LLMB_PROF_N; i++) {
            PyObject *v = PyLong_FromUnsignedLongLong(st.prof_ns[ph][i]);
            ok = v && !PyDict_SetItemString(k, kinds[i], v);
            Py_XDECREF(v);
        }
        for (int i = 0; ok && i < LLMB_PROF_TYPES; i++) {
            if (!st.prof_type_ns[ph][i]) continue;
            PyObject *key = PyLong_FromLong(i), *v = PyLong_FromUnsignedLongLong(st.prof_type_ns[ph][i]);
            ok = key && v && !PyDict_SetItem(t, key, v);
            Py_XDECREF(key);
            Py_XDECREF(v);
        }
        ok = ok && !PyDict_SetItemString(prof, phases[ph], k) && !PyDict_SetItemString(types, phases[ph], t);
        Py_XDECREF(k);
        Py_XDECREF(t);
    }
    ok = ok && !PyDict_SetItemString(d, "prof_ns", prof) && !PyDict_SetItemString(d, "prof_type_ns", types);
    Py_XDECREF(prof);
    Py_XDECREF(types);
    if (!ok) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *Engine_timing_cost(EngineObject *self, PyObject *args) {
    ENGINE(self);
    int n = 10000;
    if (!PyArg_ParseTuple(args, "|i", &n)) return NULL;
    double clock_ns = 0, event_ns = 0;
    llmb_status s = llmb_engine_timing_cost(self->e, n, &clock_ns, &event_ns);
    if (s != LLMB_OK) return llmb_py_raise(s, NULL);
    return Py_BuildValue("{s:d,s:d,s:i}", "clock_ns", clock_ns, "event_ns", event_ns, "n", n);
}

static PyObject *Engine_reset_stats(EngineObject *self, PyObject *noargs) {
    ENGINE(self);
    llmb_engine_reset_stats(self->e);
    Py_RETURN_NONE;
}

static PyMethodDef Engine_methods[] = {
    {"model_info", (PyCFunction)Engine_model_info, METH_NOARGS, "Architecture facts of the loaded model."},
    {"memory", (PyCFunction)Engine_memory, METH_NOARGS, "Bytes the backend holds: weights, KV cache, scratch, peak."},
    {"add", (PyCFunction)(void (*)(void))Engine_add, METH_VARARGS | METH_KEYWORDS, "Queue a request; returns its id."},
    {"step", (PyCFunction)Engine_step, METH_NOARGS, "Run one forward step; returns False when idle."},
    {"poll", (PyCFunction)Engine_poll, METH_VARARGS, "Take the events logged so far (list of array tuples)."},
    {"abort", (PyCFunction)Engine_abort, METH_O, "Finish a sequence now."},
    {"release", (PyCFunction)Engine_release, METH_O, "Forget a finished sequence and free its KV blocks."},
    {"prompt_logprobs", (PyCFunction)Engine_prompt_logprobs, METH_VARARGS, "(logprobs, is_greedy) of prompt tokens."},
    {"alt_logprobs", (PyCFunction)Engine_alt_logprobs, METH_VARARGS,
     "(logprobs, is_greedy) of the alt_tokens in place of the last prompt token."},
    {"prompt_top", (PyCFunction)Engine_prompt_top, METH_VARARGS, "(argmax ids, their logprobs) of scored prompt positions."},
    {"prompt_logits", (PyCFunction)Engine_prompt_logits, METH_VARARGS, "Full logits of every prompt position."},
    {"stats", (PyCFunction)Engine_stats, METH_NOARGS, "Phase times (ns) and token counts."},
    {"timing_cost", (PyCFunction)Engine_timing_cost, METH_VARARGS, "Mean ns of one clock read and one logged event."},
    {"reset_stats", (PyCFunction)Engine_reset_stats, METH_NOARGS, "Zero the phase times and counts."},
    {NULL}};

static PyGetSetDef Engine_getset[] = {
    {"backend", (getter)Engine_backend, NULL, "The backend running the forward pass: 'cpu' or 'cuda'.", NULL},
    {NULL}};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "llmbench._core.Engine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The C inference engine over one GGUF model (use llmbench.LLM).",
    .tp_methods = Engine_methods,
    .tp_getset = Engine_getset,
    .tp_init = (initproc)Engine_init,
    .tp_new = PyType_GenericNew,
};

int llmb_py_init_engine(PyObject *m) {
    if (PyType_Ready(&EngineType) < 0) return -1;
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) {
        Py_DECREF(&EngineType);
        return -1;
    }
    // engine.h's event kinds and finish reasons, as _core.EV_TOKEN etc.: Python names them, never the numbers
#define ADD_INT(name) (PyModule_AddIntConstant(m, #name, LLMB_##name) < 0)
    if (ADD_INT(EV_ARRIVAL) || ADD_INT(EV_ADMIT) || ADD_INT(EV_TOKEN) || ADD_INT(EV_FINISH) || ADD_INT(FINISH_NONE) ||
        ADD_INT(FINISH_LENGTH) || ADD_INT(FINISH_STOP) || ADD_INT(FINISH_ABORT))
        return -1;
#undef ADD_INT
    return 0;
}
