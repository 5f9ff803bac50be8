/* The watch engine's per-op path in C: the twin of mode.handle_op and operator_shadows' shadows.
 *
 * Every torch op a watched program runs passes through this path, and with scalar-sized
 * tensors its Python version costs about as much as the op itself: two Python frames, a dozen
 * attribute and dict lookups, argument packing. Here the same steps run without the
 * interpreter; the rules themselves (and everything rare: planning, sampling, findings) stay in
 * Python and are called from here exactly as mode.handle_op calls them.
 *
 *   run_op (internal): the per-op path (mode.handle_op): plan, `before` rules, the op,
 *       per-site sampling, `after` rules. The mode is off the torch-function stack meanwhile.
 *   TorchFunction()
 *       The watch mode's __torch_function__ (mode.WatchMode's, set by mode.use_native): runs
 *       run_op for the innermost Python frame.
 *   Shadow(name, original, op, modes)
 *       A stand-in for one of Tensor's operators (operator_shadows._python_shadow): when the
 *       calling thread's innermost mode is one of `modes`, pops it, runs run_op(mode, op,
 *       original, ...) for the calling frame, pushes it back; otherwise calls `original`.
 *   configure(pass_marker, mode_enabled, pop_mode, push_mode, plain_types, tensor_type,
 *             ranks_differ, dispatch_code)
 *       What they need from torch and the engine, given once at import (dispatch_code: the
 *       code of torch.overrides.handle_torch_function: TorchFunction steps over its frame and
 *       the function's that called it).
 *
 * Built for Python 3.11+ (frame API); elsewhere, or when the build fails, the Python versions
 * run (tensor_dap/agent/native.py decides).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <structmember.h>

#if PY_VERSION_HEX < 0x030B0000
#error "tensor_dap._fastpath needs Python 3.11 or later (the Python path runs elsewhere)"
#endif

static PyObject *PASS_MARKER, *MODE_ENABLED, *POP_MODE, *PUSH_MODE, *PLAIN_TYPES, *TENSOR_TYPE,
    *RANKS_DIFFER, *DISPATCH_CODE;
static PyObject *s_ndim, *s_watch, *s_mode, *s_plans, *s_plan, *s_site_hits, *s_sample, *s_after,
    *s_emit, *s_rule_failed, *s_raise_hooks, *s_raised;

/* func(*args, **kwargs): args a tuple; kwargs None, a dict (empty: no keywords) or any other
 * mapping (merged into a dict, as `**` would) */
static PyObject *call_op(PyObject *func, PyObject *args, PyObject *kwargs) {
    if (kwargs == NULL || kwargs == Py_None) return PyObject_Call(func, args, NULL);
    if (PyDict_Check(kwargs))
        return PyObject_Call(func, args, PyDict_GET_SIZE(kwargs) ? kwargs : NULL);
    PyObject *merged = PyDict_New();
    if (merged == NULL) return NULL;
    if (PyDict_Merge(merged, kwargs, 1) < 0) {
        Py_DECREF(merged);
        return NULL;
    }
    PyObject *out = PyObject_Call(func, args, PyDict_GET_SIZE(merged) ? merged : NULL);
    Py_DECREF(merged);
    return out;
}

/* the exception being raised, taken off the thread state (a new reference) */
static PyObject *take_exception(void) {
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL) PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

static void restore_exception(PyObject *exception) {
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exception);
#else
    if (exception == NULL) return;
    PyObject *type = (PyObject *)Py_TYPE(exception);
    Py_INCREF(type);
    PyErr_Restore(type, exception, PyException_GetTraceback(exception));
#endif
}

/* obj.<name> (a new reference) for the engine's own plain instance attributes (Watch._plans,
 * WatchMode.watch...): read from the instance dict, without the type lookup a getattr starts with
 * (a fifth of this path's cost); anything else takes the full getattr */
static PyObject *own_attr(PyObject *dict, PyObject *obj, PyObject *name) {
    PyObject *value = dict != NULL ? PyDict_GetItemWithError(dict, name) : NULL;
    if (value != NULL) return Py_NewRef(value);
    if (PyErr_Occurred()) return NULL;
    return PyObject_GetAttr(obj, name);
}

/* obj.__dict__ (a new reference), or NULL without an error when it has none */
static PyObject *instance_dict(PyObject *obj) {
    PyObject *dict = PyObject_GenericGetDict(obj, NULL);
    if (dict == NULL) PyErr_Clear();
    return dict;
}

/* watch.<name>(*args) */
static PyObject *call_method(PyObject *watch, PyObject *name, PyObject **args, size_t n) {
    /* args[0] is a free slot for `watch` (PY_VECTORCALL_ARGUMENTS_OFFSET convention) */
    args[0] = watch;
    return PyObject_VectorcallMethod(name, args, n + 1, NULL);
}

/* A rule's SCREEN (tensor_dap.agent.rules): 1 when its check may report for these args, 0 when
 * the rule promises it returns None (so it is not called), -1 on an error. RANKS_DIFFER: two
 * tensors among the positional args have different non-zero ranks (broadcast's own test). */
static int screen_passes(PyObject *screen, PyObject *args) {
    if (screen != RANKS_DIFFER) return 1;
    long first_rank = 0;
    Py_ssize_t count = PyTuple_GET_SIZE(args);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *arg = PyTuple_GET_ITEM(args, i);
        int is_tensor = PyObject_IsInstance(arg, TENSOR_TYPE);
        if (is_tensor < 0) return -1;
        if (!is_tensor) continue;
        PyObject *ndim = PyObject_GetAttr(arg, s_ndim);
        if (ndim == NULL) return -1;
        long rank = PyLong_AsLong(ndim);
        Py_DECREF(ndim);
        if (rank == -1 && PyErr_Occurred()) return -1;
        if (rank && rank != first_rank) {
            if (first_rank) return 1;
            first_rank = rank;
        }
    }
    return 0;
}

/* The `before` rules of a plan: each is called, a report becomes a finding (watch._emit), a
 * rule raising an Exception is switched off (watch._rule_failed). -1 on an error to raise. */
static int run_before(PyObject *watch, PyObject *before, PyObject *info, PyObject *args,
                      PyObject *kwargs, PyObject *caller) {
    Py_ssize_t count = PyTuple_GET_SIZE(before);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PyTuple_GET_ITEM(before, i);
        PyObject *rule_id = PyTuple_GET_ITEM(pair, 0);
        PyObject *check = PyTuple_GET_ITEM(pair, 1);
        int screened = screen_passes(PyTuple_GET_ITEM(pair, 2), args);
        if (screened < 0) { /* reading a rank failed: let the rule itself look */
            if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
            PyErr_Clear();
        } else if (!screened) {
            continue;
        }
        PyObject *check_args[5] = {info, args, kwargs, caller, watch};
        PyObject *report = PyObject_Vectorcall(check, check_args, 5, NULL);
        if (report == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1; /* Ctrl-C goes through */
            PyObject *error = take_exception();
            PyObject *failed_args[3] = {NULL, rule_id, error};
            PyObject *done = call_method(watch, s_rule_failed, failed_args, 2);
            Py_XDECREF(error);
            if (done == NULL) return -1;
            Py_DECREF(done);
            continue;
        }
        if (report != Py_None) {
            PyObject *emit_args[5] = {NULL, rule_id, report, info, caller};
            PyObject *done = call_method(watch, s_emit, emit_args, 4);
            Py_DECREF(report);
            if (done == NULL) return -1;
            Py_DECREF(done);
        } else {
            Py_DECREF(report);
        }
    }
    return 0;
}

/* After the op: count the call site (id(code) + instruction offset, as mode.handle_op does),
 * sample it (the first 8 hits, then one in 64), run the `after` rules. -1 on an error. */
static int run_after(PyObject *watch, PyObject *watch_dict, PyObject *plan, PyObject *args,
                     PyObject *kwargs, PyObject *out, PyObject *caller) {
    PyObject *info = PyTuple_GET_ITEM(plan, 0);
    PyObject *after = PyTuple_GET_ITEM(plan, 2);
    PyObject *observers = PyTuple_GET_ITEM(plan, 3);
    PyCodeObject *code = PyFrame_GetCode((PyFrameObject *)caller);
    size_t site_value = (size_t)code + (size_t)PyFrame_GetLasti((PyFrameObject *)caller);
    Py_DECREF(code); /* the frame holds it: its address stays valid while we use it */
    PyObject *site_hits = own_attr(watch_dict, watch, s_site_hits);
    if (site_hits == NULL) return -1;
    if (!PyDict_Check(site_hits)) {
        Py_DECREF(site_hits);
        PyErr_SetString(PyExc_TypeError, "tensor-dap: Watch._site_hits is not a dict");
        return -1;
    }
    int status = -1;
    PyObject *hits_value = NULL;
    PyObject *site = PyLong_FromSize_t(site_value);
    if (site == NULL) goto done;
    PyObject *previous = PyDict_GetItemWithError(site_hits, site); /* borrowed */
    long hits = 1;
    if (previous != NULL) {
        hits = PyLong_AsLong(previous);
        if (hits == -1 && PyErr_Occurred()) goto done;
        hits += 1;
    } else if (PyErr_Occurred()) {
        goto done;
    }
    hits_value = PyLong_FromLong(hits);
    if (hits_value == NULL || PyDict_SetItem(site_hits, site, hits_value) < 0) goto done;
    if (hits <= 8 || !(hits & 63)) {
        PyObject *sample_args[8] = {NULL, site, hits_value, info, args, out, caller, observers};
        PyObject *done = call_method(watch, s_sample, sample_args, 7);
        if (done == NULL) goto done;
        Py_DECREF(done);
    }
    if (PyTuple_GET_SIZE(after)) {
        PyObject *after_args[7] = {NULL, after, info, args, kwargs, out, caller};
        PyObject *done = call_method(watch, s_after, after_args, 6);
        if (done == NULL) goto done;
        Py_DECREF(done);
    }
    status = 0;
done:
    Py_XDECREF(site);
    Py_XDECREF(hits_value);
    Py_DECREF(site_hits);
    return status;
}

/* The op raised (the error is set): when a rule with a `raised` hook is on (out-of-memory),
 * watch._raised sees the error before the stack unwinds, as mode.handle_op calls it; the error
 * then goes on unchanged (what _raised itself might raise is dropped). */
static void note_raised(PyObject *watch, PyObject *watch_dict, PyObject *plan, PyObject *args,
                        PyObject *kwargs, PyObject *caller) {
    if (!PyErr_ExceptionMatches(PyExc_RuntimeError)) return;
    PyObject *error = take_exception();
    PyObject *hooks = own_attr(watch_dict, watch, s_raise_hooks);
    if (hooks != NULL && error != NULL && PyObject_IsTrue(hooks) == 1) {
        PyObject *raised_args[6] = {NULL, PyTuple_GET_ITEM(plan, 0), args,
                                    kwargs != NULL ? kwargs : Py_None, error, caller};
        PyObject *done = call_method(watch, s_raised, raised_args, 5);
        Py_XDECREF(done);
    }
    Py_XDECREF(hooks);
    PyErr_Clear();
    restore_exception(error);
}

/* mode.handle_op in C (see there for what each step is for) */
static PyObject *run_op(PyObject *mode, PyObject *op, PyObject *func, PyObject *args,
                        PyObject *kwargs, PyObject *caller) {
    PyObject *mode_dict = instance_dict(mode);
    PyObject *watch = own_attr(mode_dict, mode, s_watch);
    Py_XDECREF(mode_dict);
    if (watch == NULL) return NULL;
    PyObject *out = NULL, *active = NULL, *plans = NULL, *plan = NULL;
    PyObject *watch_dict = instance_dict(watch);
    active = own_attr(watch_dict, watch, s_mode);
    if (active == NULL) goto done;
    if (active == Py_None) { /* the watch stopped (a thread's mode outlives it) */
        out = call_op(func, args, kwargs);
        goto done;
    }
    plans = own_attr(watch_dict, watch, s_plans);
    if (plans == NULL) goto done;
    if (PyDict_Check(plans)) {
        plan = PyDict_GetItemWithError(plans, op);
        if (plan != NULL)
            Py_INCREF(plan);
        else if (PyErr_Occurred())
            goto done;
    }
    if (plan == NULL) {
        PyObject *plan_args[2] = {NULL, op};
        plan = call_method(watch, s_plan, plan_args, 1);
        if (plan == NULL) goto done;
    }
    if (plan == PASS_MARKER) {
        out = call_op(func, args, kwargs);
        goto done;
    }
    if (!PyTuple_CheckExact(plan) || PyTuple_GET_SIZE(plan) != 4) {
        PyErr_SetString(PyExc_TypeError, "tensor-dap: a plan is (info, before, after, observers)");
        goto done;
    }
    if (run_before(watch, PyTuple_GET_ITEM(plan, 1), PyTuple_GET_ITEM(plan, 0), args, kwargs,
                   caller) < 0)
        goto done;
    out = call_op(func, args, kwargs);
    if (out == NULL) { /* (out of memory: seen before the stack unwinds) */
        note_raised(watch, watch_dict, plan, args, kwargs, caller);
        goto done;
    }
    if (out == Py_NotImplemented) goto done; /* no op ran: nothing to record */
    if (run_after(watch, watch_dict, plan, args, kwargs, out, caller) < 0) Py_CLEAR(out);
done:
    Py_DECREF(watch);
    Py_XDECREF(watch_dict);
    Py_XDECREF(active);
    Py_XDECREF(plans);
    Py_XDECREF(plan);
    return out;
}

static int check_configured(void) {
    if (PASS_MARKER == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tensor_dap._fastpath.configure() was not called");
        return -1;
    }
    return 0;
}

/* -- Shadow: one operator's stand-in ------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *name, *qualname, *module, *doc;
    PyObject *original; /* what runs: torch.Tensor's own operator */
    PyObject *op;       /* what the rules see: the function torch hands a mode for it */
    PyObject *modes;    /* tuple of the watch's mode classes */
    vectorcallfunc vectorcall;
} Shadow;

static int is_watch_mode(PyObject *modes, PyObject *mode) {
    Py_ssize_t count = PyTuple_GET_SIZE(modes);
    for (Py_ssize_t i = 0; i < count; i++)
        if ((PyObject *)Py_TYPE(mode) == PyTuple_GET_ITEM(modes, i)) return 1;
    return 0;
}

/* a plain tensor or number: anything else (a subclass, a custom object with __radd__) goes
 * the original way, where torch may answer NotImplemented without running any op */
static int is_plain(PyObject *operand) {
    return PySet_Contains(PLAIN_TYPES, (PyObject *)Py_TYPE(operand)); /* -1: an error */
}

static PyObject *shadow_run(Shadow *self, PyObject *mode, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *tuple = PyTuple_New(nargs);
    if (tuple == NULL) return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    PyObject *kwargs = Py_None;
    Py_INCREF(kwargs);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {
        Py_DECREF(kwargs);
        kwargs = PyDict_New();
        if (kwargs == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
                Py_DECREF(kwargs);
                Py_DECREF(tuple);
                return NULL;
            }
        }
    }
    /* the frame that applied the operator: the innermost Python frame (this is C) */
    PyObject *caller = (PyObject *)PyEval_GetFrame();
    PyObject *out = run_op(mode, self->op, self->original, tuple, kwargs, caller);
    Py_DECREF(tuple);
    Py_DECREF(kwargs);
    return out;
}

static PyObject *shadow_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    Shadow *self = (Shadow *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (PASS_MARKER == NULL || nargs == 0 || PyEval_GetFrame() == NULL)
        return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    /* a mode is on the stack and torch functions are not disabled */
    PyObject *enabled = PyObject_CallNoArgs(MODE_ENABLED);
    if (enabled == NULL) return NULL;
    int on = PyObject_IsTrue(enabled);
    Py_DECREF(enabled);
    if (on < 0) return NULL;
    if (!on) return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    /* the pop returns to C, not to the interpreter: no interrupt can land before the mode is
     * held here, and whatever happens after (rules, the op, an interrupt in them) the push
     * below runs (the Python twin needs a handler for the first) */
    PyObject *mode = PyObject_CallNoArgs(POP_MODE);
    if (mode == NULL) return NULL;
    int ours = is_watch_mode(self->modes, mode);
    if (ours) ours = is_plain(args[nargs - 1]);
    PyObject *out = ours > 0 ? shadow_run(self, mode, args, nargs, kwnames) : NULL;
    PyObject *error = ours != 0 && out == NULL ? take_exception() : NULL;
    PyObject *pushed = PyObject_CallOneArg(PUSH_MODE, mode);
    Py_DECREF(mode);
    if (pushed == NULL) { /* as a `finally:` would: the push's error wins */
        Py_XDECREF(error);
        Py_XDECREF(out);
        return NULL;
    }
    Py_DECREF(pushed);
    if (ours == 0) /* another mode's, or an operand torch may decline: with the stack as it was */
        return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    if (error != NULL) restore_exception(error);
    return out;
}

static PyObject *shadow_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *name, *original, *op, *modes;
    static char *keywords[] = {"name", "original", "op", "modes", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UOOO!:Shadow", keywords, &name, &original,
                                     &op, &PyTuple_Type, &modes))
        return NULL;
    Shadow *self = (Shadow *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->name = Py_NewRef(name);
    self->qualname = PyUnicode_FromFormat("Tensor.%U", name);
    self->module = PyUnicode_FromString("torch");
    self->doc = PyObject_GetAttrString(original, "__doc__");
    if (self->doc == NULL) {
        PyErr_Clear();
        self->doc = Py_NewRef(Py_None);
    }
    self->original = Py_NewRef(original);
    self->op = Py_NewRef(op);
    self->modes = Py_NewRef(modes);
    self->vectorcall = shadow_vectorcall;
    if (self->qualname == NULL || self->module == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void shadow_dealloc(Shadow *self) {
    Py_XDECREF(self->name);
    Py_XDECREF(self->qualname);
    Py_XDECREF(self->module);
    Py_XDECREF(self->doc);
    Py_XDECREF(self->original);
    Py_XDECREF(self->op);
    Py_XDECREF(self->modes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* t.__add__ is bound to t, as a function's would be */
static PyObject *shadow_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

/* pickle finds it again as torch.Tensor.<name> (whatever that is when it loads) */
static PyObject *shadow_reduce(Shadow *self, PyObject *unused) {
    return Py_NewRef(self->qualname);
}

static PyObject *shadow_repr(Shadow *self) {
    return PyUnicode_FromFormat("<tensor-dap operator %U>", self->qualname);
}

static PyMemberDef shadow_members[] = {
    {"__name__", T_OBJECT, offsetof(Shadow, name), READONLY, NULL},
    {"__qualname__", T_OBJECT, offsetof(Shadow, qualname), READONLY, NULL},
    {"__module__", T_OBJECT, offsetof(Shadow, module), READONLY, NULL},
    {"__doc__", T_OBJECT, offsetof(Shadow, doc), READONLY, NULL},
    {"__wrapped__", T_OBJECT, offsetof(Shadow, original), READONLY, NULL},
    {NULL},
};

static PyMethodDef shadow_methods[] = {
    {"__reduce__", (PyCFunction)shadow_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyTypeObject ShadowType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tensor_dap.agent._fastpath.Shadow",
    .tp_basicsize = sizeof(Shadow),
    .tp_dealloc = (destructor)shadow_dealloc,
    .tp_vectorcall_offset = offsetof(Shadow, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)shadow_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A stand-in for one of torch.Tensor's operators while a watch runs.",
    .tp_members = shadow_members,
    .tp_methods = shadow_methods,
    .tp_descr_get = shadow_get,
    .tp_new = shadow_new,
};

/* -- TorchFunction: the watch mode's __torch_function__ ------------------------------------ */

/* mode.__torch_function__(func, types, args=(), kwargs=None) without a Python frame: torch
 * calls it for every torch function while the watch's mode is innermost. The caller is the
 * innermost Python frame, the one that called the torch function (this is C). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
} TorchFunction;

static PyObject *torch_function_vectorcall(PyObject *callable, PyObject *const *args,
                                           size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *mode, *func, *call_args = NULL, *kwargs = Py_None;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs < 3 || nargs + nkw > 5) {
        PyErr_SetString(PyExc_TypeError, "__torch_function__(func, types, args=(), kwargs=None)");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nkw; i++) { /* torch passes all four positionally; people may not */
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(name, "args") == 0 && nargs < 4) {
            call_args = args[nargs + i];
        } else if (PyUnicode_CompareWithASCIIString(name, "kwargs") == 0 && nargs < 5) {
            kwargs = args[nargs + i];
        } else {
            PyErr_Format(PyExc_TypeError, "__torch_function__() got an unexpected keyword %R",
                         name);
            return NULL;
        }
    }
    if (check_configured() < 0) return NULL;
    mode = args[0];
    func = args[1];
    if (nargs > 3) call_args = args[3];
    if (nargs > 4) kwargs = args[4];
    /* torch passes a tuple; a direct call may pass any sequence (as `*args` would take it) */
    PyObject *call_tuple = call_args == NULL ? PyTuple_New(0) : PySequence_Tuple(call_args);
    if (call_tuple == NULL) return NULL;
    PyObject *out;
    PyFrameObject *frame = PyEval_GetFrame();
    PyFrameObject *back = NULL;
    if (frame != NULL) {
        /* `F.relu(x)` reaches the mode through torch.overrides.handle_torch_function, called
         * by F.relu itself: the op's caller is the frame that called F.relu (as for a C
         * function such as torch.relu), not those two frames every such function shares */
        PyCodeObject *code = PyFrame_GetCode(frame);
        if ((PyObject *)code == DISPATCH_CODE) {
            PyFrameObject *function = PyFrame_GetBack(frame);
            if (function != NULL) {
                back = PyFrame_GetBack(function);
                Py_DECREF(function);
            }
        }
        Py_DECREF(code);
        if (back != NULL) frame = back;
    }
    if (frame == NULL) /* not called from Python: no user line to check */
        out = call_op(func, call_tuple, kwargs);
    else
        out = run_op(mode, func, func, call_tuple, kwargs, (PyObject *)frame);
    Py_XDECREF(back);
    Py_DECREF(call_tuple);
    return out;
}

static PyObject *torch_function_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "TorchFunction() takes no arguments");
        return NULL;
    }
    TorchFunction *self = (TorchFunction *)type->tp_alloc(type, 0);
    if (self != NULL) self->vectorcall = torch_function_vectorcall;
    return (PyObject *)self;
}

static PyTypeObject TorchFunctionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tensor_dap.agent._fastpath.TorchFunction",
    .tp_basicsize = sizeof(TorchFunction),
    .tp_vectorcall_offset = offsetof(TorchFunction, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "The watch mode's __torch_function__ (a method: bound to the mode).",
    .tp_descr_get = shadow_get,
    .tp_new = torch_function_new,
};

/* -- module ------------------------------------------------------------------------------- */

static PyObject *fastpath_configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 || !PyAnySet_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "configure(pass_marker, mode_enabled, pop_mode, "
                                         "push_mode, plain_types, tensor_type, ranks_differ, "
                                         "dispatch_code)");
        return NULL;
    }
    Py_XSETREF(PASS_MARKER, Py_NewRef(args[0]));
    Py_XSETREF(MODE_ENABLED, Py_NewRef(args[1]));
    Py_XSETREF(POP_MODE, Py_NewRef(args[2]));
    Py_XSETREF(PUSH_MODE, Py_NewRef(args[3]));
    Py_XSETREF(PLAIN_TYPES, Py_NewRef(args[4]));
    Py_XSETREF(TENSOR_TYPE, Py_NewRef(args[5]));
    Py_XSETREF(RANKS_DIFFER, Py_NewRef(args[6]));
    Py_XSETREF(DISPATCH_CODE, Py_NewRef(args[7]));
    Py_RETURN_NONE;
}

static PyMethodDef fastpath_functions[] = {
    {"configure", (PyCFunction)(void (*)(void))fastpath_configure, METH_FASTCALL,
     "configure(pass_marker, mode_enabled, pop_mode, push_mode, plain_types, tensor_type, "
     "ranks_differ, dispatch_code)."},
    {NULL},
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT, "_fastpath",
    "The watch engine's per-op path in C (see tensor_dap/agent/native.py).", -1,
    fastpath_functions,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
    /* the attributes read by name: listed in native.py (tests/unit/test_fastpath_contract.py) */
    s_ndim = PyUnicode_InternFromString("ndim");
    s_watch = PyUnicode_InternFromString("watch");
    s_mode = PyUnicode_InternFromString("_mode");
    s_plans = PyUnicode_InternFromString("_plans");
    s_plan = PyUnicode_InternFromString("_plan");
    s_site_hits = PyUnicode_InternFromString("_site_hits");
    s_sample = PyUnicode_InternFromString("_sample");
    s_after = PyUnicode_InternFromString("_after");
    s_emit = PyUnicode_InternFromString("_emit");
    s_rule_failed = PyUnicode_InternFromString("_rule_failed");
    s_raise_hooks = PyUnicode_InternFromString("_raise_hooks");
    s_raised = PyUnicode_InternFromString("_raised");
    if (!s_ndim || !s_watch || !s_mode || !s_plans || !s_plan || !s_site_hits || !s_sample ||
        !s_after || !s_emit || !s_rule_failed || !s_raise_hooks || !s_raised)
        return NULL;
    if (PyType_Ready(&ShadowType) < 0 || PyType_Ready(&TorchFunctionType) < 0) return NULL;
    PyObject *module = PyModule_Create(&fastpath_module);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "Shadow", (PyObject *)&ShadowType) < 0 ||
        PyModule_AddObjectRef(module, "TorchFunction", (PyObject *)&TorchFunctionType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
