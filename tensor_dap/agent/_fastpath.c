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
static PyObject *s_ndim, *s_watch, *s_mode, *s_plans, *s_plan, *s_site_hits, *s_sample,
    *s_emit, *s_rule_failed, *s_raise_hooks, *s_raised, *s_inplace;

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

/* torch.ops' OpOverloadPacket and OpOverload (configure_ops): their __call__ is Python that
 * only calls the op's C function `_op` (a packet: when it has no torchbind overload) */
static PyTypeObject *OP_PACKET_TYPE, *OP_OVERLOAD_TYPE;
/* torch.ops' TorchBindOpOverload (`profiler._record_function_exit._RecordFunction`, each
 * optimizer step's) and torch._library's FakeScriptObject: its __call__ calls `_op` unless an
 * argument is or holds a FakeScriptObject; NULL when this torch has none */
static PyTypeObject *OP_TORCHBIND_TYPE, *FAKE_SCRIPT_TYPE;
static PyObject *s_op, *s_has_torchbind;

/* call_op for the op the mode was given: `torch.ops.profiler._record_function_enter_new`
 * (each optimizer step's profiling scope), `torch.ops.torchvision.nms`... The mode got the op
 * from its own Python __call__, which called `_op`; calling the op again would run that Python
 * again (and torch's checks before it): `_op` is called, which is all __call__ would do. */
static PyObject *instance_dict(PyObject *obj);

/* torch._ops._contains_fake_script_object: whether `obj` is a FakeScriptObject or a list,
 * tuple or dict (its values) holding one, at any depth. 1, 0, or -1 on an error. */
static int holds_fake_script(PyObject *obj) {
    if (PyObject_TypeCheck(obj, FAKE_SCRIPT_TYPE)) return 1;
    PyObject *items = NULL;
    if (PyList_Check(obj) || PyTuple_Check(obj))
        items = PySequence_Fast(obj, "");
    else if (PyDict_Check(obj))
        items = PyDict_Values(obj);
    else
        return 0;
    if (items == NULL) return -1;
    int found = 0;
    PyObject *fast = PySequence_Fast(items, "");
    Py_DECREF(items);
    if (fast == NULL) return -1;
    if (Py_EnterRecursiveCall(" in tensor-dap's FakeScriptObject check")) {
        Py_DECREF(fast);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast) && !found; i++)
        found = holds_fake_script(PySequence_Fast_GET_ITEM(fast, i));
    Py_LeaveRecursiveCall();
    Py_DECREF(fast);
    return found;
}

static PyObject *call_torch_op(PyObject *func, PyObject *args, PyObject *kwargs) {
    PyTypeObject *type = Py_TYPE(func);
    if (type == OP_TORCHBIND_TYPE && type != NULL && FAKE_SCRIPT_TYPE != NULL) {
        /* its __call__: `_op` unless torch must dispatch in Python (_must_dispatch_in_python) */
        int fake = holds_fake_script(args);
        if (fake == 0 && kwargs != NULL && kwargs != Py_None && PyDict_Check(kwargs))
            fake = holds_fake_script(kwargs);
        if (fake < 0) return NULL;
        if (fake) return call_op(func, args, kwargs);
        type = OP_OVERLOAD_TYPE; /* (its `_op` is called as an OpOverload's is) */
    }
    if (type != OP_OVERLOAD_TYPE && type != OP_PACKET_TYPE) return call_op(func, args, kwargs);
    if (type == OP_PACKET_TYPE) {
        /* (read from the instance dict: a torch without the flag, whose __call__ has no such
         * branch, would run __getattr__'s overload lookup for it at every call) */
        PyObject *dict = instance_dict(func);
        PyObject *torchbind = dict == NULL ? NULL : PyDict_GetItemWithError(dict, s_has_torchbind);
        int has = torchbind == NULL ? (PyErr_Occurred() ? -1 : 0) : PyObject_IsTrue(torchbind);
        Py_XDECREF(dict);
        if (has != 0) { /* (its __call__ checks the arguments first: called as it is) */
            PyErr_Clear();
            return call_op(func, args, kwargs);
        }
    }
    PyObject *target = PyObject_GetAttr(func, s_op);
    if (target == NULL) {
        PyErr_Clear();
        return call_op(func, args, kwargs);
    }
    PyObject *out = call_op(target, args, kwargs);
    Py_DECREF(target);
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

/* An `inplace` flag set: the keyword, or the positional argument at `position`
 * (`F.dropout(x, p, training, True)`). 1, 0, or -1 on an error. */
static int inplace_flag_set(PyObject *position, PyObject *args, PyObject *kwargs) {
    if (kwargs != NULL && PyDict_Check(kwargs)) {
        PyObject *flag = PyDict_GetItemWithError(kwargs, s_inplace);
        if (flag != NULL) return PyObject_IsTrue(flag);
        if (PyErr_Occurred()) return -1;
    }
    Py_ssize_t index = PyLong_AsSsize_t(position);
    if (index == -1 && PyErr_Occurred()) return -1;
    if (index < 0 || index >= PyTuple_GET_SIZE(args)) return 0;
    return PyObject_IsTrue(PyTuple_GET_ITEM(args, index));
}

/* A rule's SCREEN (tensor_dap.agent.rules): 1 when its check may report for these args, 0 when
 * the rule promises it returns None (so it is not called), -1 on an error. RANKS_DIFFER: two
 * tensors among the positional args have different non-zero ranks (broadcast's own test); an
 * int: the position of an `inplace` flag the op runs in place with (INPLACE_FLAG_AT). */
static int screen_passes(PyObject *screen, PyObject *args, PyObject *kwargs) {
    if (PyLong_CheckExact(screen)) return inplace_flag_set(screen, args, kwargs);
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

/* What a rule's check returned (NULL: it raised): a report becomes a finding (watch._emit), a
 * rule raising an Exception is switched off (watch._rule_failed). Steals `report`. -1 on an
 * error to raise (Ctrl-C goes through). */
static int take_report(PyObject *watch, PyObject *rule_id, PyObject *report, PyObject *info,
                       PyObject *caller) {
    if (report == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
        PyObject *error = take_exception();
        PyObject *failed_args[3] = {NULL, rule_id, error};
        PyObject *done = call_method(watch, s_rule_failed, failed_args, 2);
        Py_XDECREF(error);
        if (done == NULL) return -1;
        Py_DECREF(done);
        return 0;
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
    return 0;
}

/* The `before` rules of a plan, each called unless its screen says it would return None. -1 on
 * an error to raise. */
static int run_before(PyObject *watch, PyObject *before, PyObject *info, PyObject *args,
                      PyObject *kwargs, PyObject *caller) {
    Py_ssize_t count = PyTuple_GET_SIZE(before);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PyTuple_GET_ITEM(before, i);
        int screened = screen_passes(PyTuple_GET_ITEM(pair, 2), args, kwargs);
        if (screened < 0) { /* reading a rank failed: let the rule itself look */
            if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
            PyErr_Clear();
        } else if (!screened) {
            continue;
        }
        PyObject *check_args[5] = {info, args, kwargs, caller, watch};
        PyObject *report = PyObject_Vectorcall(PyTuple_GET_ITEM(pair, 1), check_args, 5, NULL);
        if (take_report(watch, PyTuple_GET_ITEM(pair, 0), report, info, caller) < 0) return -1;
    }
    return 0;
}

/* The `after` rules of a plan (mode.run_after): each called with the op's result. */
static int run_after_rules(PyObject *watch, PyObject *after, PyObject *info, PyObject *args,
                           PyObject *kwargs, PyObject *out, PyObject *caller) {
    Py_ssize_t count = PyTuple_GET_SIZE(after);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PyTuple_GET_ITEM(after, i);
        PyObject *check_args[6] = {info, args, kwargs, out, caller, watch};
        PyObject *report = PyObject_Vectorcall(PyTuple_GET_ITEM(pair, 1), check_args, 6, NULL);
        if (take_report(watch, PyTuple_GET_ITEM(pair, 0), report, info, caller) < 0) return -1;
    }
    return 0;
}

/* `args` followed by the values of `kwargs` (a new reference): what a sampled op's observers
 * and provenance look at, as mode.sampled_arguments. */
static PyObject *sampled_arguments(PyObject *args, PyObject *kwargs) {
    if (kwargs == NULL || !PyDict_Check(kwargs) || PyDict_GET_SIZE(kwargs) == 0) {
        Py_INCREF(args);
        return args;
    }
    PyObject *values = PyDict_Values(kwargs);
    if (values == NULL) return NULL;
    PyObject *tail = PyList_AsTuple(values);
    Py_DECREF(values);
    if (tail == NULL) return NULL;
    PyObject *head = PySequence_Tuple(args); /* a list when the mode is called directly */
    if (head == NULL) {
        Py_DECREF(tail);
        return NULL;
    }
    PyObject *all = PySequence_Concat(head, tail);
    Py_DECREF(head);
    Py_DECREF(tail);
    return all;
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
        /* the sample sees the keyword arguments' values after the positional ones (F.layer_norm
         * hands the mode its weight and bias as keywords) */
        PyObject *sampled = sampled_arguments(args, kwargs);
        if (sampled == NULL) goto done;
        PyObject *sample_args[8] = {NULL, site, hits_value, info, sampled, out, caller, observers};
        PyObject *done = call_method(watch, s_sample, sample_args, 7);
        Py_DECREF(sampled);
        if (done == NULL) goto done;
        Py_DECREF(done);
    }
    if (run_after_rules(watch, after, info, args, kwargs, out, caller) < 0) goto done;
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

/* torch._C.DisableTorchFunctionSubclass, looked up on first use */
static PyObject *SUBCLASSES_OFF;

/* Entered around the engine's own reads of an op whose arguments include a tensor subclass
 * with a __torch_function__ of its own (mode.handle_op's `subclasses`): the rules' `.device`,
 * `.grad_fn`, `untyped_storage()`... are not the program's ops, and the subclass must not see
 * them (one that logs its ops would print them). The guard entered (a new reference), NULL on
 * an error. */
static PyObject *subclasses_off(void) {
    if (SUBCLASSES_OFF == NULL) {
        PyObject *module = PyImport_ImportModule("torch._C");
        if (module == NULL) return NULL;
        SUBCLASSES_OFF = PyObject_GetAttrString(module, "DisableTorchFunctionSubclass");
        Py_DECREF(module);
        if (SUBCLASSES_OFF == NULL) return NULL;
    }
    PyObject *guard = PyObject_CallNoArgs(SUBCLASSES_OFF);
    if (guard == NULL) return NULL;
    PyObject *entered = PyObject_CallMethod(guard, "__enter__", NULL);
    if (entered == NULL) {
        Py_DECREF(guard);
        return NULL;
    }
    Py_DECREF(entered);
    return guard;
}

/* Leave (and release) what subclasses_off entered, if anything. An error being raised stays the
 * one raised (a failure to leave is then dropped); else -1 when leaving fails. */
static int subclasses_on(PyObject *guard) {
    if (guard == NULL) return 0;
    PyObject *pending = take_exception();
    PyObject *left = PyObject_CallMethod(guard, "__exit__", "OOO", Py_None, Py_None, Py_None);
    Py_DECREF(guard);
    Py_XDECREF(left);
    if (pending != NULL) {
        PyErr_Clear();
        restore_exception(pending);
        return 0;
    }
    return left == NULL ? -1 : 0;
}

/* mode.handle_op in C (see there for what each step is for; `subclasses`: its keyword) */
static PyObject *run_op(PyObject *mode, PyObject *op, PyObject *func, PyObject *args,
                        PyObject *kwargs, PyObject *caller, int subclasses) {
    PyObject *mode_dict = instance_dict(mode);
    PyObject *watch = own_attr(mode_dict, mode, s_watch);
    Py_XDECREF(mode_dict);
    if (watch == NULL) return NULL;
    PyObject *out = NULL, *active = NULL, *plans = NULL, *plan = NULL, *guard = NULL;
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
        out = call_torch_op(func, args, kwargs);
        goto done;
    }
    if (!PyTuple_CheckExact(plan) || PyTuple_GET_SIZE(plan) < 4 || PyTuple_GET_SIZE(plan) > 5) {
        PyErr_SetString(PyExc_TypeError, "tensor-dap: a plan is (info, before, after, observers)");
        goto done;
    }
    /* the program replaced this torch method: torch's original runs (plans.make_plan) */
    if (PyTuple_GET_SIZE(plan) == 5) func = PyTuple_GET_ITEM(plan, 4);
    guard = subclasses ? subclasses_off() : NULL;
    if (subclasses && guard == NULL) goto done;
    int before_failed = run_before(watch, PyTuple_GET_ITEM(plan, 1), PyTuple_GET_ITEM(plan, 0),
                                   args, kwargs, caller) < 0;
    if (subclasses_on(guard) < 0 || before_failed) goto done;
    out = call_torch_op(func, args, kwargs);
    if (out == NULL) { /* (out of memory: seen before the stack unwinds) */
        if (subclasses) { /* the op's error waits while the guard is entered */
            PyObject *error = take_exception();
            guard = subclasses_off();
            if (guard == NULL) PyErr_Clear(); /* the hooks then see the subclass: still raise */
            restore_exception(error);
        }
        note_raised(watch, watch_dict, plan, args, kwargs, caller);
        subclasses_on(guard); /* (keeps the op's error) */
        goto done;
    }
    if (out == Py_NotImplemented) goto done; /* no op ran: nothing to record */
    guard = subclasses ? subclasses_off() : NULL;
    if (subclasses && guard == NULL) {
        Py_CLEAR(out);
        goto done;
    }
    if (run_after(watch, watch_dict, plan, args, kwargs, out, caller) < 0) Py_CLEAR(out);
    if (subclasses_on(guard) < 0) Py_CLEAR(out);
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

/* {name: value} of a vectorcall's keyword arguments (`values`: the values after the
 * positional ones), a new dict (empty for none); NULL on an error */
static PyObject *keywords_dict(PyObject *const *values, PyObject *kwnames) {
    PyObject *kwargs = PyDict_New();
    for (Py_ssize_t i = 0; kwargs != NULL && kwnames != NULL && i < PyTuple_GET_SIZE(kwnames);
         i++) {
        if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), values[i]) < 0)
            Py_CLEAR(kwargs);
    }
    return kwargs;
}

/* After a pop: `mode` (stolen) pushed back, as a `finally:` would. -1 when the push fails: its
 * error wins, `*out` and `*error` are dropped */
static int push_mode_back(PyObject *mode, PyObject **out, PyObject **error) {
    PyObject *pushed = PyObject_CallOneArg(PUSH_MODE, mode);
    Py_DECREF(mode);
    if (pushed == NULL) {
        Py_CLEAR(*error);
        Py_CLEAR(*out);
        return -1;
    }
    Py_DECREF(pushed);
    return 0;
}

static PyObject *shadow_run(Shadow *self, PyObject *mode, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *tuple = PyTuple_New(nargs);
    if (tuple == NULL) return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    PyObject *kwargs = kwnames != NULL && PyTuple_GET_SIZE(kwnames)
                           ? keywords_dict(args + nargs, kwnames)
                           : Py_NewRef(Py_None);
    if (kwargs == NULL) {
        Py_DECREF(tuple);
        return NULL;
    }
    /* the frame that applied the operator: the innermost Python frame (this is C) */
    PyObject *caller = (PyObject *)PyEval_GetFrame();
    PyObject *out = run_op(mode, self->op, self->original, tuple, kwargs, caller, 0);
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
    /* both operands plain: a subclass `self` goes the original way too, through the mode,
     * which keeps the engine's own reads of it from its __torch_function__ (run_op) */
    if (ours) ours = is_plain(args[nargs - 1]);
    if (ours > 0 && nargs > 1) ours = is_plain(args[0]);
    PyObject *out = ours > 0 ? shadow_run(self, mode, args, nargs, kwnames) : NULL;
    PyObject *error = ours != 0 && out == NULL ? take_exception() : NULL;
    if (push_mode_back(mode, &out, &error) < 0) return NULL;
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

/* Whether a tensor of `values` (a tuple, or a dict's values) is of a type not plain: a
 * subclass. 1, 0, or -1 on an error. */
static int holds_subclass(PyObject *values) {
    if (values == NULL || values == Py_None) return 0;
    PyObject *items = PyDict_Check(values) ? PyDict_Values(values) : Py_NewRef(values);
    if (items == NULL) return -1;
    int found = 0;
    PyObject *fast = PySequence_Fast(items, "tensor-dap: the op's arguments");
    Py_DECREF(items);
    if (fast == NULL) return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast) && !found; i++) {
        PyObject *value = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyObject_TypeCheck(value, (PyTypeObject *)TENSOR_TYPE)) continue;
        int plain = PySet_Contains(PLAIN_TYPES, (PyObject *)Py_TYPE(value));
        found = plain < 0 ? -1 : !plain;
    }
    Py_DECREF(fast);
    return found;
}

/* Whether the op's arguments hold a tensor subclass with a __torch_function__ of its own (the
 * rules' reads then run with subclasses' torch functions off). torch's `types` say so, but
 * `loss.backward(gradient=g)` hands the mode `(torch.Tensor,)` for `loss` alone: plain types
 * there are checked against the arguments themselves, one level deep (mode.has_subclass).
 * 1, 0, or -1 on an error. */
static int has_subclass(PyObject *types, PyObject *args, PyObject *kwargs) {
    if (!PyTuple_Check(types)) return PyObject_IsTrue(types);
    if (PyTuple_GET_SIZE(types) == 0) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); i++) {
        int plain = PySet_Contains(PLAIN_TYPES, PyTuple_GET_ITEM(types, i));
        if (plain <= 0) return plain < 0 ? -1 : 1;
    }
    int in_args = holds_subclass(args);
    return in_args != 0 ? in_args : holds_subclass(kwargs);
}

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
    {
        int subclasses = has_subclass(args[2], call_tuple, kwargs);
        out = subclasses < 0 ? NULL
                             : run_op(mode, func, func, call_tuple, kwargs, (PyObject *)frame,
                                      subclasses);
    }
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

/* -- Dispatch: torch.overrides.handle_torch_function's stand-in while a watch runs ---------- */

/* Functions torch writes in Python (`F.relu`, `Tensor.backward`...) hand themselves to
 * torch.overrides.handle_torch_function whenever a mode is on the stack; that Python function
 * collects the overloaded arguments, pops the mode in a context manager, calls its
 * __torch_function__ and pushes it back: about fifteen Python calls (see dispatch_shortcut.py).
 * This does the same in C when the innermost mode is a watch's and every relevant argument is
 * None or of a plain type; anything else calls torch's own. */
typedef struct {
    PyObject_HEAD
    PyObject *original; /* torch.overrides.handle_torch_function */
    PyObject *modes;    /* tuple of the watch's mode classes */
    PyObject *declined; /* (public_api, types, args, kwargs): torch's steps after a mode's
                           NotImplemented */
    PyObject *subclasses_on; /* torch._C._is_torch_function_enabled */
    PyObject *name, *qualname, *module, *doc; /* the original's */
    vectorcallfunc vectorcall;
} Dispatch;

/* The `types` torch would hand the mode for `relevant` (its overloaded arguments' types):
 * (torch.Tensor,) when one is a plain tensor, () when none is (a Parameter's
 * __torch_function__ is torch's disabled one, numbers and None have none); NULL without an
 * error when an argument is of another type (torch's own function then runs). */
static PyObject *plain_types_of(PyObject *relevant) {
    if (!PyTuple_CheckExact(relevant)) return NULL;
    int tensor = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(relevant); i++) {
        PyObject *item = PyTuple_GET_ITEM(relevant, i);
        if (item == Py_None) continue;
        if ((PyObject *)Py_TYPE(item) == TENSOR_TYPE) {
            tensor = 1;
            continue;
        }
        int plain = PySet_Contains(PLAIN_TYPES, (PyObject *)Py_TYPE(item));
        if (plain <= 0) {
            if (plain < 0) PyErr_Clear();
            return NULL;
        }
    }
    return tensor ? PyTuple_Pack(1, TENSOR_TYPE) : PyTuple_New(0);
}

static PyObject *dispatch_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames) {
    Dispatch *self = (Dispatch *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyFrameObject *frame = PASS_MARKER == NULL || nargs < 2 ? NULL : PyEval_GetFrame();
    if (frame == NULL) return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    PyObject *enabled = PyObject_CallNoArgs(MODE_ENABLED);
    if (enabled == NULL) return NULL;
    int on = PyObject_IsTrue(enabled);
    Py_DECREF(enabled);
    if (on < 0) return NULL;
    if (on) { /* subclasses' torch functions off (inside Tensor.__torch_function__): torch hands
                 the mode no types then, and goes on to no tensor's */
        PyObject *subclasses = PyObject_CallNoArgs(self->subclasses_on);
        on = subclasses == NULL ? -1 : PyObject_IsTrue(subclasses);
        Py_XDECREF(subclasses);
        if (on < 0) return NULL;
    }
    PyObject *types = on ? plain_types_of(args[1]) : NULL;
    if (types == NULL) {
        if (PyErr_Occurred()) return NULL;
        return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    }
    PyObject *call_tuple = PyTuple_New(nargs - 2);
    PyObject *kwargs = keywords_dict(args + nargs, kwnames);
    if (call_tuple == NULL || kwargs == NULL) goto failed;
    for (Py_ssize_t i = 2; i < nargs; i++) PyTuple_SET_ITEM(call_tuple, i - 2, Py_NewRef(args[i]));
    /* as in the shadows: the pop returns to C, the push below runs whatever happens between */
    PyObject *mode = PyObject_CallNoArgs(POP_MODE);
    if (mode == NULL) goto failed;
    int ours = is_watch_mode(self->modes, mode);
    PyObject *out = NULL, *error = NULL;
    if (ours) {
        /* the op's caller: the frame that called the function handing itself over (`F.relu`'s
         * caller), as torch_function_vectorcall finds it past torch's Python dispatch */
        PyFrameObject *back = PyFrame_GetBack(frame);
        PyObject *caller = back != NULL ? (PyObject *)back : (PyObject *)frame;
        int subclasses = has_subclass(types, call_tuple, kwargs);
        out = subclasses < 0 ? NULL
                             : run_op(mode, args[0], args[0], call_tuple, kwargs, caller,
                                      subclasses);
        Py_XDECREF(back);
        if (out == NULL) error = take_exception();
    }
    if (push_mode_back(mode, &out, &error) < 0) goto failed;
    if (!ours) { /* another mode's: torch's own, with the stack as it was */
        out = PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    } else if (error != NULL) {
        restore_exception(error);
    } else if (out == Py_NotImplemented) { /* the overloaded arguments' turn, as torch does */
        Py_DECREF(out);
        out = PyObject_CallFunctionObjArgs(self->declined, args[0], types, call_tuple, kwargs,
                                           NULL);
    }
    Py_DECREF(types);
    Py_DECREF(call_tuple);
    Py_DECREF(kwargs);
    return out;
failed:
    Py_DECREF(types);
    Py_XDECREF(call_tuple);
    Py_XDECREF(kwargs);
    return NULL;
}

/* original.<name>, or None where it has none (a new reference) */
static PyObject *attribute_or_none(PyObject *original, const char *name) {
    PyObject *value = PyObject_GetAttrString(original, name);
    if (value == NULL) {
        PyErr_Clear();
        value = Py_NewRef(Py_None);
    }
    return value;
}

static PyObject *dispatch_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *original, *modes, *declined, *subclasses_on;
    static char *keywords[] = {"original", "modes", "declined", "subclasses_on", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!OO:Dispatch", keywords, &original,
                                     &PyTuple_Type, &modes, &declined, &subclasses_on))
        return NULL;
    Dispatch *self = (Dispatch *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->original = Py_NewRef(original);
    self->modes = Py_NewRef(modes);
    self->declined = Py_NewRef(declined);
    self->subclasses_on = Py_NewRef(subclasses_on);
    self->name = attribute_or_none(original, "__name__");
    self->qualname = attribute_or_none(original, "__qualname__");
    self->module = attribute_or_none(original, "__module__");
    self->doc = attribute_or_none(original, "__doc__");
    self->vectorcall = dispatch_vectorcall;
    return (PyObject *)self;
}

static void dispatch_dealloc(Dispatch *self) {
    Py_XDECREF(self->original);
    Py_XDECREF(self->modes);
    Py_XDECREF(self->declined);
    Py_XDECREF(self->subclasses_on);
    Py_XDECREF(self->name);
    Py_XDECREF(self->qualname);
    Py_XDECREF(self->module);
    Py_XDECREF(self->doc);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef dispatch_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(Dispatch, original), READONLY, NULL},
    {"__name__", T_OBJECT, offsetof(Dispatch, name), READONLY, NULL},
    {"__qualname__", T_OBJECT, offsetof(Dispatch, qualname), READONLY, NULL},
    {"__module__", T_OBJECT, offsetof(Dispatch, module), READONLY, NULL},
    {"__doc__", T_OBJECT, offsetof(Dispatch, doc), READONLY, NULL},
    {NULL},
};

static PyTypeObject DispatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tensor_dap.agent._fastpath.Dispatch",
    .tp_basicsize = sizeof(Dispatch),
    .tp_dealloc = (destructor)dispatch_dealloc,
    .tp_vectorcall_offset = offsetof(Dispatch, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "torch.overrides.handle_torch_function's stand-in while a watch runs.",
    .tp_members = dispatch_members,
    .tp_new = dispatch_new,
};

/* -- PassThrough: the simulation mode's __torch_function__ -------------------------------- */

/* A mode's __torch_function__ that calls the op itself, from C, unless the call needs the
 * mode's Python method (`slow`): a function in `special`, a keyword in `keywords`, or while
 * `busy()` is true. Why C: a warning PyTorch's C++ raises (TORCH_WARN: "Converting a tensor
 * with requires_grad=True to a scalar...") names the innermost Python frame, which a Python
 * __torch_function__ would be for every op (and the "once per location" filter would then show
 * each such warning once for the whole program). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *slow, *special, *keywords, *busy, *on_error, *replaced;
} PassThrough;

static PyObject *pass_through_vectorcall(PyObject *callable, PyObject *const *args,
                                         size_t nargsf, PyObject *kwnames) {
    PassThrough *self = (PassThrough *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    /* torch passes (mode, func, types, args[, kwargs]) positionally: anything else, the slow
     * way */
    if (nargs < 4 || nargs > 5 || kwnames != NULL || !PyTuple_Check(args[3])) goto slow;
    PyObject *func = args[1], *kwargs = nargs == 5 ? args[4] : Py_None;
    int special = PySet_Contains(self->special, func);
    if (special < 0) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
        PyErr_Clear(); /* an unhashable callable: not one of them */
        special = 0;
    }
    if (special) goto slow;
    if (PyDict_GET_SIZE(self->replaced)) { /* the program's replacement: torch's original */
        PyObject *original = PyDict_GetItemWithError(self->replaced, func);
        if (original != NULL) func = original;
        else if (PyErr_Occurred()) PyErr_Clear(); /* (an unhashable callable: not one) */
    }
    if (kwargs != Py_None) {
        if (!PyDict_Check(kwargs)) goto slow;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->keywords); i++) {
            int found = PyDict_Contains(kwargs, PyTuple_GET_ITEM(self->keywords, i));
            if (found < 0) return NULL;
            if (found) goto slow;
        }
    }
    PyObject *busy = PyObject_CallNoArgs(self->busy);
    if (busy == NULL) return NULL;
    int is_busy = PyObject_IsTrue(busy);
    Py_DECREF(busy);
    if (is_busy < 0) return NULL;
    if (is_busy) goto slow;
    PyObject *out = call_op(func, args[3], kwargs);
    if (out == NULL && self->on_error != Py_None) { /* the op's error, worded for the program */
        PyObject *error = take_exception();
        PyObject *done = error == NULL ? NULL : PyObject_CallOneArg(self->on_error, error);
        if (done == NULL) PyErr_Clear(); /* (its own failure leaves the error as it was) */
        Py_XDECREF(done);
        restore_exception(error);
    }
    return out;
slow:
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *pass_through_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *slow, *special, *keywords, *busy, *on_error = Py_None, *replaced = NULL;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "PassThrough() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OO!O!O|OO!:PassThrough", &slow, &PyFrozenSet_Type, &special,
                          &PyTuple_Type, &keywords, &busy, &on_error, &PyDict_Type, &replaced))
        return NULL;
    replaced = replaced != NULL ? Py_NewRef(replaced) : PyDict_New();
    if (replaced == NULL) return NULL;
    PassThrough *self = (PassThrough *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(replaced);
        return NULL;
    }
    self->vectorcall = pass_through_vectorcall;
    self->slow = Py_NewRef(slow);
    self->special = Py_NewRef(special);
    self->keywords = Py_NewRef(keywords);
    self->busy = Py_NewRef(busy);
    self->on_error = Py_NewRef(on_error);
    self->replaced = replaced; /* (the reference taken above) */
    return (PyObject *)self;
}

static int pass_through_traverse(PassThrough *self, visitproc visit, void *arg) {
    Py_VISIT(self->slow);
    Py_VISIT(self->special);
    Py_VISIT(self->keywords);
    Py_VISIT(self->busy);
    Py_VISIT(self->on_error);
    Py_VISIT(self->replaced);
    return 0;
}

static int pass_through_clear(PassThrough *self) {
    Py_CLEAR(self->slow);
    Py_CLEAR(self->special);
    Py_CLEAR(self->keywords);
    Py_CLEAR(self->busy);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->replaced);
    return 0;
}

static void pass_through_dealloc(PassThrough *self) {
    PyObject_GC_UnTrack(self);
    pass_through_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject PassThroughType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tensor_dap.agent._fastpath.PassThrough",
    .tp_basicsize = sizeof(PassThrough),
    .tp_vectorcall_offset = offsetof(PassThrough, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR |
                Py_TPFLAGS_HAVE_GC,
    .tp_doc = "PassThrough(slow, special, keywords, busy, on_error=None, replaced={}): a "
              "mode's __torch_function__ calling the op from C unless the call needs `slow` (a "
              "method: bound to the mode); on_error(exception) may reword the op's error; "
              "replaced maps the program's replacement of a torch method to torch's.",
    .tp_descr_get = shadow_get,
    .tp_new = pass_through_new,
    .tp_traverse = (traverseproc)pass_through_traverse,
    .tp_clear = (inquiry)pass_through_clear,
    .tp_dealloc = (destructor)pass_through_dealloc,
};

/* -- books_after: the memory books' per-op step (tensor_dap.agent.memory) ------------------ */

/* Given by configure_books: frames._KIND (id(code) -> kind), memory._PATHS (co_filename ->
 * absolute path), memory._DEVICE_NAMES (torch.device -> str), frames.USER / LIBRARY, and
 * torch.UntypedStorage._expired / _free_weak_ref */
static PyObject *BOOKS_KINDS, *BOOKS_PATHS, *BOOKS_DEVICES, *BOOKS_EXPIRED, *BOOKS_FREE_WEAK_REF,
    *BOOKS_SLOW_BACKWARD, *BOOKS_AFTER_BACKWARD, *BOOKS_GRAD_INFO;
static long KIND_USER = -1, KIND_LIBRARY = -1;
static PyObject *s_memory, *s_name, *s_untyped_storage, *s_cdata, *s_data_ptr, *s_weak_ref,
    *s_nbytes, *s_device, *s_entries, *s_live, *s_peak, *s_by_site, *s_since_sweep, *s_limit,
    *s_add, *s_insert, *s_pending, *s_over, *s_interval, *s_backward_line, *s_grad_leaves,
    *s_backward, *s_table, *s_grad, *s_threads, *s_line, *s_leaves;

/* storage.<name>() as a Python int (a new reference), NULL on an error */
static PyObject *call_noargs(PyObject *obj, PyObject *name) {
    PyObject *call_args[1] = {obj};
    return PyObject_VectorcallMethod(name, call_args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* The site tuples made so far: id(code) + instruction offset -> (code, {op name: (path, line,
 * op name)}). Within a live code object (the value holds it) that sum names one instruction of
 * it (3.11+ keeps the bytecode inside the code object), and an op at one instruction always
 * gets the same tuple: no line-table scan (PyFrame_GetLineNumber) and no new tuple per op. */
static PyObject *SITE_CACHE;
#define SITE_CACHE_LIMIT 65536

/* A tuple of objects that cannot hold a cycle, out of the collector's sight: the books keep one
 * per live storage, and tracked tuples made per op would make the collector run (and walk
 * them) for nothing */
static PyObject *untracked(PyObject *tuple) {
    if (tuple != NULL && PyObject_GC_IsTracked(tuple)) PyObject_GC_UnTrack(tuple);
    return tuple;
}

/* (absolute path, line, op_name) of the user frame `found` (a new reference); Py_None (a new
 * reference) when its file is not classified yet */
static PyObject *cached_site(PyFrameObject *found, PyObject *op_name) {
    PyCodeObject *code = PyFrame_GetCode(found);
    PyObject *key = PyLong_FromSize_t((size_t)code + (size_t)PyFrame_GetLasti(found));
    PyObject *by_op = NULL, *site = NULL;
    if (key == NULL) goto done;
    PyObject *held = PyDict_GetItemWithError(SITE_CACHE, key); /* borrowed */
    if (held == NULL && PyErr_Occurred()) goto done;
    if (held != NULL && PyTuple_GET_ITEM(held, 0) == (PyObject *)code) {
        by_op = Py_NewRef(PyTuple_GET_ITEM(held, 1));
        site = PyDict_GetItemWithError(by_op, op_name);
        if (site != NULL) {
            Py_INCREF(site);
            goto done;
        }
        if (PyErr_Occurred()) goto done;
    }
    PyObject *path = PyDict_GetItemWithError(BOOKS_PATHS, code->co_filename); /* borrowed */
    if (path == NULL) {
        if (!PyErr_Occurred()) site = Py_NewRef(Py_None);
        goto done;
    }
    site = untracked(Py_BuildValue("(OiO)", path, PyFrame_GetLineNumber(found), op_name));
    if (site == NULL) goto done;
    if (by_op == NULL) {
        if (PyDict_GET_SIZE(SITE_CACHE) >= SITE_CACHE_LIMIT) PyDict_Clear(SITE_CACHE);
        by_op = PyDict_New();
        PyObject *value = by_op == NULL ? NULL : PyTuple_Pack(2, (PyObject *)code, by_op);
        int stored = value == NULL ? -1 : PyDict_SetItem(SITE_CACHE, key, value);
        Py_XDECREF(value);
        if (stored < 0) Py_CLEAR(site);
    }
    if (site != NULL && PyDict_SetItem(by_op, op_name, site) < 0) Py_CLEAR(site);
done:
    Py_DECREF(code);
    Py_XDECREF(key);
    Py_XDECREF(by_op);
    return site;
}

/* (absolute path, line) of the user's frame for the op (frames.user_frame), a new reference;
 * Py_None (a new reference) when a code object or file on the way is not classified yet: the
 * caller then takes the Python path, which classifies it */
static PyObject *user_site(PyObject *caller, PyObject *op_name) {
    PyFrameObject *frame = (PyFrameObject *)Py_NewRef(caller);
    PyFrameObject *fallback = NULL;
    PyFrameObject *found = NULL;
    while (frame != NULL) {
        PyCodeObject *code = PyFrame_GetCode(frame);
        PyObject *key = PyLong_FromVoidPtr(code);
        Py_DECREF(code);
        if (key == NULL) goto fail;
        PyObject *kind_value = PyDict_GetItemWithError(BOOKS_KINDS, key); /* borrowed */
        Py_DECREF(key);
        if (kind_value == NULL) {
            if (PyErr_Occurred()) goto fail;
            goto unknown;
        }
        long kind = PyLong_AsLong(kind_value);
        if (kind == KIND_USER) {
            found = frame;
            break;
        }
        if (kind == KIND_LIBRARY && fallback == NULL) fallback = (PyFrameObject *)Py_NewRef(frame);
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
    if (found == NULL) found = fallback, fallback = NULL;
    Py_XDECREF(fallback);
    if (found == NULL) return Py_BuildValue("(siO)", "", 0, op_name);
    PyObject *site = cached_site(found, op_name);
    Py_DECREF(found);
    return site;
unknown:
    Py_DECREF(frame);
    Py_XDECREF(fallback);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(frame);
    Py_XDECREF(fallback);
    return NULL;
}

/* ledger._entries, ._live... read from the ledger's instance dict (borrowed), NULL with an
 * error set when missing */
static PyObject *ledger_item(PyObject *ledger_dict, PyObject *name) {
    PyObject *value = PyDict_GetItemWithError(ledger_dict, name);
    if (value == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_AttributeError, "tensor-dap: the memory books have no %U", name);
    return value;
}

/* ledger.<property> for backward_line and grad_leaves: read from the ledger's per-thread
 * record (`_threads.<field>`, a C threading.local) when it is there, without the Python
 * property; the property otherwise (it makes the field). A new reference, NULL on an error. */
static PyObject *ledger_thread_field(PyObject *ledger, PyObject *field, PyObject *property) {
    PyObject *ledger_dict = instance_dict(ledger);
    PyObject *threads = ledger_dict == NULL ? NULL : PyDict_GetItemWithError(ledger_dict, s_threads);
    Py_XINCREF(threads); /* (held while its attribute is read: that may run code) */
    PyObject *value = NULL;
    if (threads != NULL) {
        value = PyObject_GetAttr(threads, field);
        if (value == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear();
    }
    Py_XDECREF(threads);
    Py_XDECREF(ledger_dict);
    if (value != NULL || PyErr_Occurred()) return value;
    return PyObject_GetAttr(ledger, property);
}

/* dict[key] += amount for an int-valued dict (a missing key counts as 0) */
static int add_to(PyObject *dict, PyObject *key, long long amount) {
    PyObject *old = PyDict_GetItemWithError(dict, key);
    long long value = amount;
    if (old != NULL) {
        long long before = PyLong_AsLongLong(old);
        if (before == -1 && PyErr_Occurred()) return -1;
        value += before;
    } else if (PyErr_Occurred()) {
        return -1;
    }
    PyObject *sum = PyLong_FromLongLong(value);
    if (sum == NULL) return -1;
    int status = PyDict_SetItem(dict, key, sum);
    Py_DECREF(sum);
    return status;
}

/* an int of the ledger's instance dict (borrowed item) as a C value; -1 with an error set */
static long long ledger_int(PyObject *ledger_dict, PyObject *name) {
    PyObject *value = ledger_item(ledger_dict, name);
    return value == NULL ? -1 : PyLong_AsLongLong(value);
}

static int set_ledger_int(PyObject *ledger_dict, PyObject *name, long long value) {
    PyObject *number = PyLong_FromLongLong(value);
    if (number == NULL) return -1;
    int status = PyDict_SetItem(ledger_dict, name, number);
    Py_DECREF(number);
    return status;
}

/* MemoryLedger.sweep in C, for when no device's peak waits for its lines to be copied and no
 * device is over the limit (the Python method does those): drop the storages freed since the
 * last sweep. -1 on an error. */
static int books_sweep(PyObject *ledger_dict, PyObject *entries, PyObject *live,
                       PyObject *by_site) {
    if (set_ledger_int(ledger_dict, s_since_sweep, 0) < 0) return -1;
    PyObject *expired = PyList_New(0);
    if (expired == NULL) return -1;
    int status = -1;
    Py_ssize_t position = 0;
    PyObject *key, *entry;
    while (PyDict_Next(entries, &position, &key, &entry)) {
        PyObject *gone = PyObject_CallOneArg(BOOKS_EXPIRED, key);
        if (gone == NULL) goto done;
        int truth = PyObject_IsTrue(gone);
        Py_DECREF(gone);
        if (truth < 0 || (truth && PyList_Append(expired, key) < 0)) goto done;
    }
    Py_ssize_t count = PyList_GET_SIZE(expired);
    long long interval = ledger_int(ledger_dict, s_interval);
    if (interval == -1 && PyErr_Occurred()) goto done;
    interval = count ? 1 : (interval < (1LL << 40) ? interval * 2 : interval);
    if (set_ledger_int(ledger_dict, s_interval, interval) < 0) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        key = PyList_GET_ITEM(expired, i);
        entry = PyDict_GetItemWithError(entries, key);
        if (entry == NULL) goto done;
        Py_INCREF(entry);
        int dropped = PyDict_DelItem(entries, key);
        PyObject *freed = dropped < 0 ? NULL : PyObject_CallOneArg(BOOKS_FREE_WEAK_REF, key);
        if (freed == NULL) {
            Py_DECREF(entry);
            goto done;
        }
        Py_DECREF(freed);
        PyObject *device = PyTuple_GET_ITEM(entry, 0), *site = PyTuple_GET_ITEM(entry, 2);
        long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 1));
        PyObject *sites = PyDict_GetItemWithError(by_site, device);
        int failed = (size == -1 && PyErr_Occurred()) || sites == NULL ||
                     add_to(live, device, -size) < 0 || add_to(sites, site, -size) < 0;
        if (!failed) { /* a line holding nothing now leaves the table */
            PyObject *left = PyDict_GetItemWithError(sites, site);
            failed = left == NULL || (!PyObject_IsTrue(left) && PyDict_DelItem(sites, site) < 0);
        }
        Py_DECREF(entry);
        if (failed) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "tensor-dap: the memory books disagree");
            goto done;
        }
    }
    status = 0;
done:
    Py_DECREF(expired);
    return status;
}

/* MemoryLedger._insert in C (`key`: the storage's weak reference, which the books own from
 * here): where the device is known, no peak waits for its lines and the device stays under the
 * limit; the Python method otherwise. -1 on an error. */
static int books_insert(PyObject *ledger, PyObject *ledger_dict, PyObject *key,
                        PyObject *device, PyObject *nbytes, long long size, PyObject *site) {
    PyObject *entries = ledger_item(ledger_dict, s_entries);
    PyObject *live = ledger_item(ledger_dict, s_live), *peak = ledger_item(ledger_dict, s_peak);
    PyObject *by_site = ledger_item(ledger_dict, s_by_site);
    PyObject *limit = ledger_item(ledger_dict, s_limit);
    PyObject *pending = ledger_item(ledger_dict, s_pending);
    PyObject *over = ledger_item(ledger_dict, s_over);
    if (!entries || !live || !peak || !by_site || !limit || !pending || !over) return -1;
    PyObject *live_now = PyDict_GetItemWithError(live, device);
    PyObject *peak_now = PyDict_GetItemWithError(peak, device);
    PyObject *sites = PyDict_GetItemWithError(by_site, device);
    if (PyErr_Occurred()) return -1;
    if (live_now == NULL || peak_now == NULL || sites == NULL || PySet_GET_SIZE(over))
        goto in_python;
    long long total = PyLong_AsLongLong(live_now) + size, top = PyLong_AsLongLong(peak_now);
    long long since = ledger_int(ledger_dict, s_since_sweep) + 1;
    long long interval = ledger_int(ledger_dict, s_interval);
    long long most = limit == Py_None ? -1 : PyLong_AsLongLong(limit);
    if (PyErr_Occurred()) return -1;
    if (most >= 0 && total > most) goto in_python; /* the limit: the Python method sweeps */
    long long cap = PyDict_GET_SIZE(entries) / 4;
    if (cap < 1) cap = 1;
    int sweep = total > top && since >= (interval < cap ? interval : cap);
    /* a peak waiting for its lines: the Python sweep copies them before it drops any */
    if (sweep && PySet_GET_SIZE(pending)) goto in_python;
    if (set_ledger_int(ledger_dict, s_since_sweep, since) < 0) return -1;
    if (sweep) {
        if (books_sweep(ledger_dict, entries, live, by_site) < 0) return -1;
        live_now = PyDict_GetItemWithError(live, device);
        if (live_now == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "tensor-dap: the memory books disagree");
            return -1;
        }
        total = PyLong_AsLongLong(live_now) + size;
        if (total == -1 && PyErr_Occurred()) return -1;
    }
    PyObject *entry = untracked(PyTuple_Pack(3, device, nbytes, site));
    if (entry == NULL) return -1;
    int stored = PyDict_SetItem(entries, key, entry);
    Py_DECREF(entry);
    if (stored < 0 || set_ledger_int(live, device, total) < 0 || add_to(sites, site, size) < 0)
        return -1;
    if (total > top) { /* a new peak: its lines are copied at the next sweep that frees some */
        if (set_ledger_int(peak, device, total) < 0 || PySet_Add(pending, device) < 0) return -1;
    }
    return 0;
in_python:;
    PyObject *insert_args[5] = {NULL, key, device, nbytes, site};
    PyObject *inserted = call_method(ledger, s_insert, insert_args, 4);
    if (inserted == NULL) return -1;
    Py_DECREF(inserted);
    return 0;
}

/* One tensor of an op's result: MemoryLedger._add in C for a plain storage; a wrapper subclass,
 * a layout without one storage, a device or a file not seen before go to the Python method,
 * which does the same and more. 0, or -1 on an error. */
static int books_add(PyObject *ledger, PyObject *ledger_dict, PyObject *tensor, PyObject *info,
                     PyObject *caller) {
    int status = -1;
    PyObject *storage = NULL, *cdata = NULL, *pointer = NULL, *key = NULL, *nbytes = NULL,
             *device = NULL, *op_name = NULL, *site = NULL;
    PyObject *entries = ledger_item(ledger_dict, s_entries);
    if (entries == NULL) return -1;
    storage = call_noargs(tensor, s_untyped_storage);
    if (storage == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
        PyErr_Clear(); /* sparse, nested...: the Python path knows them */
        goto slow;
    }
    cdata = PyObject_GetAttr(storage, s_cdata);
    if (cdata == NULL) goto done;
    /* an address the books hold a weak reference to is this storage, alive (the tensor holds
     * it): a view or an alias costs this one lookup */
    int seen = PyDict_Contains(entries, cdata);
    if (seen != 0) {
        status = seen < 0 ? -1 : 0;
        goto done;
    }
    pointer = call_noargs(storage, s_data_ptr);
    if (pointer == NULL) { /* a device whose storages hide their address */
        if (!PyErr_ExceptionMatches(PyExc_Exception)) goto done;
        PyErr_Clear();
        goto slow;
    }
    int empty = PyObject_Not(pointer);
    if (empty) goto slow; /* a placeholder (wrapper subclass), no memory at all, or an error */
    op_name = PyObject_GetAttr(info, s_name);
    if (op_name == NULL) goto done;
    if (PyTuple_CheckExact(caller) && PyTuple_GET_SIZE(caller) == 2) /* (path, line) given */
        site = untracked(PyTuple_Pack(3, PyTuple_GET_ITEM(caller, 0), PyTuple_GET_ITEM(caller, 1), op_name));
    else
        site = user_site(caller, op_name);
    if (site == NULL) goto done;
    if (site == Py_None) goto slow;
    device = PyObject_GetAttr(tensor, s_device);
    if (device == NULL) goto done;
    PyObject *device_name = PyDict_GetItemWithError(BOOKS_DEVICES, device); /* borrowed */
    if (device_name == NULL) {
        if (PyErr_Occurred()) goto done;
        goto slow;
    }
    nbytes = call_noargs(storage, s_nbytes);
    if (nbytes == NULL) goto done;
    long long size = PyLong_AsLongLong(nbytes);
    if (size == -1 && PyErr_Occurred()) goto done;
    key = call_noargs(storage, s_weak_ref);
    if (key == NULL) goto done;
    status = books_insert(ledger, ledger_dict, key, device_name, nbytes, size, site);
    goto done;
slow:
    if (PyErr_Occurred()) goto done;
    Py_CLEAR(op_name);
    op_name = PyObject_GetAttr(info, s_name);
    if (op_name == NULL) goto done;
    PyObject *add_args[4] = {NULL, tensor, op_name, caller};
    PyObject *added = call_method(ledger, s_add, add_args, 3);
    if (added == NULL) goto done;
    Py_DECREF(added);
    status = 0;
done:
    Py_XDECREF(storage);
    Py_XDECREF(cdata);
    Py_XDECREF(pointer);
    Py_XDECREF(key);
    Py_XDECREF(nbytes);
    Py_XDECREF(device);
    Py_XDECREF(op_name);
    Py_XDECREF(site);
    return status;
}

/* memory.after_backward in C: `backward()` returned, so the `.grad` of the leaves its line's
 * graph accumulates into (the books' grad_leaves[backward_line], a TensorMap) go to the books
 * under that line. The Python function does it where reading `.grad` could run Python: a torch
 * function mode on the stack, or a leaf that is not a plain tensor or parameter (a subclass's
 * `__torch_function__`). 0, or -1 with an error set. */
static int books_backward_grads(PyObject *ledger, PyObject *ledger_dict, PyObject *const *args) {
    PyObject *name = PyObject_GetAttr(args[0], s_name);
    if (name == NULL) return -1;
    int is_grad = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "grad") == 0;
    Py_DECREF(name);
    if (is_grad) return 0; /* torch.autograd.grad writes no .grad */
    int status = -1;
    PyObject *line = NULL, *by_line = NULL, *table = NULL, *grads = NULL;
    line = ledger_thread_field(ledger, s_line, s_backward_line);
    if (line == NULL) goto done;
    if (line == Py_None) {
        status = 0;
        goto done;
    }
    by_line = ledger_thread_field(ledger, s_leaves, s_grad_leaves);
    if (by_line == NULL) goto done;
    PyObject *leaves = PyDict_Check(by_line) ? PyDict_GetItemWithError(by_line, line) : NULL;
    if (leaves == NULL) {
        status = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    table = PyObject_GetAttr(leaves, s_table);
    if (table == NULL) goto done;
    PyObject *modes = PyObject_CallNoArgs(MODE_ENABLED);
    int moded = modes == NULL ? -1 : PyObject_IsTrue(modes);
    Py_XDECREF(modes);
    if (moded < 0) goto done;
    if (moded || !PyDict_Check(table)) goto in_python;
    grads = PyList_New(0);
    if (grads == NULL) goto done;
    Py_ssize_t position = 0;
    PyObject *key, *entry;
    while (PyDict_Next(table, &position, &key, &entry)) {
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 1) goto in_python;
        PyObject *ref = PyTuple_GET_ITEM(entry, 0);
        if (!PyWeakref_Check(ref)) goto in_python;
        PyObject *leaf = PyWeakref_GetObject(ref); /* borrowed; None once the leaf is gone */
        if (leaf == NULL) goto done;
        if (leaf == Py_None) continue;
        int plain = PySet_Contains(PLAIN_TYPES, (PyObject *)Py_TYPE(leaf));
        if (plain < 0) goto done;
        if (!plain) goto in_python;
        PyObject *grad = PyObject_GetAttr(leaf, s_grad);
        if (grad == NULL) goto done;
        int appended = grad == Py_None ? 0 : PyList_Append(grads, grad);
        Py_DECREF(grad);
        if (appended < 0) goto done;
    }
    /* (each added once the table is read: adding may run the Python methods) */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(grads); i++) {
        PyObject *grad = PyList_GET_ITEM(grads, i);
        if (!PyObject_TypeCheck(grad, (PyTypeObject *)TENSOR_TYPE)) continue;
        if (books_add(ledger, ledger_dict, grad, BOOKS_GRAD_INFO, line) < 0) goto done;
    }
    status = 0;
    goto done;
in_python:;
    PyObject *done_value = PyObject_Vectorcall(BOOKS_AFTER_BACKWARD, args, 6, NULL);
    status = done_value == NULL ? -1 : 0;
    Py_XDECREF(done_value);
done:
    Py_XDECREF(line);
    Py_XDECREF(by_line);
    Py_XDECREF(table);
    Py_XDECREF(grads);
    return status;
}

/* watch.memory: the watch's books (a new reference; None when it keeps none), NULL on an error */
static PyObject *watch_books(PyObject *watch) {
    PyObject *watch_dict = instance_dict(watch);
    PyObject *ledger = own_attr(watch_dict, watch, s_memory);
    Py_XDECREF(watch_dict);
    return ledger;
}

/* books_after(info, args, kwargs, out, caller, watch): memory._after (an `after` hook planned
 * on every op making tensors) in C: the op's tensor results, one level deep, to the books */
static PyObject *books_after(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "books_after(info, args, kwargs, out, caller, watch)");
        return NULL;
    }
    if (BOOKS_KINDS == NULL || TENSOR_TYPE == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tensor-dap: _fastpath.configure_books not called");
        return NULL;
    }
    PyObject *info = args[0], *out = args[3], *caller = args[4], *watch = args[5];
    PyObject *ledger = watch_books(watch);
    if (ledger == NULL) return NULL;
    PyObject *ledger_dict = instance_dict(ledger);
    int status = 0;
    if (ledger_dict == NULL) {
        PyErr_SetString(PyExc_TypeError, "tensor-dap: the memory books have no __dict__");
        status = -1;
    } else if (PyObject_TypeCheck(out, (PyTypeObject *)TENSOR_TYPE)) {
        status = books_add(ledger, ledger_dict, out, info, caller);
    } else if (out == Py_None) { /* backward() returned: the .grad it wrote */
        PyObject *backward = PyObject_GetAttr(info, s_backward);
        int is_backward = backward == NULL ? -1 : PyObject_IsTrue(backward);
        Py_XDECREF(backward);
        if (is_backward > 0) {
            status = books_backward_grads(ledger, ledger_dict, args);
        } else if (is_backward < 0) {
            status = -1;
        }
    } else if (PyTuple_Check(out) || PyList_Check(out)) {
        PyObject *items = PySequence_Fast(out, "");
        Py_ssize_t count = items == NULL ? -1 : PySequence_Fast_GET_SIZE(items);
        if (count > 64) count = 64;
        for (Py_ssize_t i = 0; i < count && status == 0; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(items, i);
            if (PyObject_TypeCheck(item, (PyTypeObject *)TENSOR_TYPE))
                status = books_add(ledger, ledger_dict, item, info, caller);
        }
        if (items == NULL) status = -1;
        Py_XDECREF(items);
    }
    Py_XDECREF(ledger_dict);
    Py_DECREF(ledger);
    if (status < 0) return NULL;
    Py_RETURN_NONE;
}

/* ledger.backward_line = line: on the per-thread record where it is there (the property's
 * setter otherwise). 0, or -1 on an error. */
static int set_backward_line(PyObject *ledger, PyObject *line) {
    PyObject *ledger_dict = instance_dict(ledger);
    PyObject *threads = ledger_dict == NULL ? NULL : PyDict_GetItemWithError(ledger_dict, s_threads);
    Py_XINCREF(threads); /* (held while its attribute is set: that may run code) */
    int status = threads != NULL ? PyObject_SetAttr(threads, s_line, line)
                 : PyErr_Occurred() ? -1 : PyObject_SetAttr(ledger, s_backward_line, line);
    Py_XDECREF(threads);
    Py_XDECREF(ledger_dict);
    return status;
}

/* books_before_backward(info, args, kwargs, caller, watch): memory.before_backward in C: the
 * user line calling backward() goes to the books' backward_line (a (path, line) tuple), for the
 * .grad tensors it makes. A file not classified yet, or a line whose leaves are not known yet
 * (memory._graph_leaves): the Python function. */
static PyObject *books_before_backward(PyObject *module, PyObject *const *args,
                                       Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "books_before_backward(info, args, kwargs, caller, watch)");
        return NULL;
    }
    PyObject *caller = args[3], *watch = args[4];
    /* (planned on __deepcopy__ too, whose `after` the books want: only a backward() here) */
    PyObject *backward = PyObject_GetAttr(args[0], s_backward);
    int is_backward = backward == NULL ? -1 : PyObject_IsTrue(backward);
    Py_XDECREF(backward);
    if (is_backward < 0) return NULL;
    if (!is_backward) Py_RETURN_NONE;
    PyObject *ledger = watch_books(watch);
    if (ledger == NULL) return NULL;
    int status = 0;
    if (ledger != Py_None) {
        PyObject *site = user_site(caller, Py_None);
        PyObject *line = NULL;
        if (site == NULL) {
            status = -1;
        } else {
            /* the line's leaves known: set the line here; else the Python function does all */
            int known = 0;
            if (site != Py_None) {
                line = PyTuple_GetSlice(site, 0, 2);
                PyObject *leaves =
                    line == NULL ? NULL : ledger_thread_field(ledger, s_leaves, s_grad_leaves);
                known = leaves == NULL ? -1 : PySequence_Contains(leaves, line);
                Py_XDECREF(leaves);
                if (known > 0) known = set_backward_line(ledger, line) < 0 ? -1 : 1;
                Py_XDECREF(line);
            }
            if (known < 0) {
                status = -1;
            } else if (known == 0) {
                PyObject *slow_args[6] = {NULL, args[0], args[1], args[2], caller, watch};
                PyObject *done = PyObject_Vectorcall(BOOKS_SLOW_BACKWARD, slow_args + 1, 5, NULL);
                Py_XDECREF(done);
                status = done == NULL ? -1 : 0;
            }
        }
        Py_XDECREF(site);
    }
    Py_DECREF(ledger);
    if (status < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *fastpath_configure_books(PyObject *module, PyObject *const *args,
                                          Py_ssize_t nargs) {
    if (nargs != 10 || !PyDict_Check(args[0]) || !PyDict_Check(args[1]) ||
        !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "configure_books(kinds, paths, device_names, user_kind, "
                                         "library_kind, expired, free_weak_ref, "
                                         "before_backward, after_backward, grad_info)");
        return NULL;
    }
    long user = PyLong_AsLong(args[3]), library = PyLong_AsLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    Py_XSETREF(BOOKS_KINDS, Py_NewRef(args[0]));
    Py_XSETREF(BOOKS_PATHS, Py_NewRef(args[1]));
    Py_XSETREF(BOOKS_DEVICES, Py_NewRef(args[2]));
    Py_XSETREF(BOOKS_EXPIRED, Py_NewRef(args[5]));
    Py_XSETREF(BOOKS_FREE_WEAK_REF, Py_NewRef(args[6]));
    Py_XSETREF(BOOKS_SLOW_BACKWARD, Py_NewRef(args[7]));
    Py_XSETREF(BOOKS_AFTER_BACKWARD, Py_NewRef(args[8]));
    Py_XSETREF(BOOKS_GRAD_INFO, Py_NewRef(args[9]));
    if (SITE_CACHE == NULL && (SITE_CACHE = PyDict_New()) == NULL) return NULL;
    KIND_USER = user;
    KIND_LIBRARY = library;
    Py_RETURN_NONE;
}

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

static PyObject *fastpath_configure_ops(PyObject *module, PyObject *const *args,
                                        Py_ssize_t nargs) {
    if (nargs != 4 || !PyType_Check(args[0]) || !PyType_Check(args[1]) ||
        !(args[2] == Py_None || PyType_Check(args[2])) ||
        !(args[3] == Py_None || PyType_Check(args[3]))) {
        PyErr_SetString(PyExc_TypeError, "configure_ops(OpOverloadPacket, OpOverload, "
                                         "TorchBindOpOverload or None, FakeScriptObject or None)");
        return NULL;
    }
    Py_XSETREF(OP_PACKET_TYPE, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(OP_OVERLOAD_TYPE, (PyTypeObject *)Py_NewRef(args[1]));
    int both = args[2] != Py_None && args[3] != Py_None;
    Py_XSETREF(OP_TORCHBIND_TYPE, both ? (PyTypeObject *)Py_NewRef(args[2]) : NULL);
    Py_XSETREF(FAKE_SCRIPT_TYPE, both ? (PyTypeObject *)Py_NewRef(args[3]) : NULL);
    Py_RETURN_NONE;
}

static PyMethodDef fastpath_functions[] = {
    {"configure_ops", (PyCFunction)(void (*)(void))fastpath_configure_ops, METH_FASTCALL,
     "configure_ops(OpOverloadPacket, OpOverload, TorchBindOpOverload, FakeScriptObject): the "
     "torch.ops types whose `_op` is called."},
    {"configure", (PyCFunction)(void (*)(void))fastpath_configure, METH_FASTCALL,
     "configure(pass_marker, mode_enabled, pop_mode, push_mode, plain_types, tensor_type, "
     "ranks_differ, dispatch_code)."},
    {"configure_books", (PyCFunction)(void (*)(void))fastpath_configure_books, METH_FASTCALL,
     "configure_books(kinds, paths, device_names, user_kind, library_kind, expired, "
     "free_weak_ref, before_backward, after_backward, grad_info)."},
    {"books_before_backward", (PyCFunction)(void (*)(void))books_before_backward,
     METH_FASTCALL,
     "books_before_backward($module, op, args, kwargs, caller, state, /)\n--\n\n"
     "memory.before_backward in C."},
    {"books_after", (PyCFunction)(void (*)(void))books_after, METH_FASTCALL,
     "books_after($module, op, args, kwargs, out, caller, state, /)\n--\n\n"
     "memory._after in C."},
    {NULL},
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT, "_fastpath",
    "The watch engine's per-op path in C (see tensor_dap/agent/native.py).", -1,
    fastpath_functions,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
    /* the attributes read by name: listed in native.py (tests/unit/test_fastpath_contract.py) */
    s_op = PyUnicode_InternFromString("_op");
    s_has_torchbind = PyUnicode_InternFromString("_has_torchbind_op_overload");
    if (!s_op || !s_has_torchbind) return NULL;
    s_ndim = PyUnicode_InternFromString("ndim");
    s_inplace = PyUnicode_InternFromString("inplace");
    s_watch = PyUnicode_InternFromString("watch");
    s_mode = PyUnicode_InternFromString("_mode");
    s_plans = PyUnicode_InternFromString("_plans");
    s_plan = PyUnicode_InternFromString("_plan");
    s_site_hits = PyUnicode_InternFromString("_site_hits");
    s_sample = PyUnicode_InternFromString("_sample");
    s_emit = PyUnicode_InternFromString("_emit");
    s_rule_failed = PyUnicode_InternFromString("_rule_failed");
    s_raise_hooks = PyUnicode_InternFromString("_raise_hooks");
    s_raised = PyUnicode_InternFromString("_raised");
    if (!s_ndim || !s_watch || !s_mode || !s_plans || !s_plan || !s_site_hits || !s_sample ||
        !s_emit || !s_rule_failed || !s_raise_hooks || !s_raised)
        return NULL;
    /* the memory books' (native.BOOKS_* names) */
    s_memory = PyUnicode_InternFromString("memory");
    s_name = PyUnicode_InternFromString("name");
    s_untyped_storage = PyUnicode_InternFromString("untyped_storage");
    s_cdata = PyUnicode_InternFromString("_cdata");
    s_data_ptr = PyUnicode_InternFromString("data_ptr");
    s_weak_ref = PyUnicode_InternFromString("_weak_ref");
    s_nbytes = PyUnicode_InternFromString("nbytes");
    s_device = PyUnicode_InternFromString("device");
    s_entries = PyUnicode_InternFromString("_entries");
    s_live = PyUnicode_InternFromString("_live");
    s_peak = PyUnicode_InternFromString("_peak");
    s_by_site = PyUnicode_InternFromString("_by_site");
    s_since_sweep = PyUnicode_InternFromString("_since_sweep");
    s_limit = PyUnicode_InternFromString("limit");
    s_add = PyUnicode_InternFromString("_add");
    s_insert = PyUnicode_InternFromString("_insert");
    s_pending = PyUnicode_InternFromString("_pending");
    s_over = PyUnicode_InternFromString("_over");
    s_interval = PyUnicode_InternFromString("_interval");
    s_backward_line = PyUnicode_InternFromString("backward_line");
    s_grad_leaves = PyUnicode_InternFromString("grad_leaves");
    s_threads = PyUnicode_InternFromString("_threads");
    s_line = PyUnicode_InternFromString("line");
    s_leaves = PyUnicode_InternFromString("leaves");
    s_backward = PyUnicode_InternFromString("backward");
    s_table = PyUnicode_InternFromString("_table");
    s_grad = PyUnicode_InternFromString("grad");
    if (!s_memory || !s_name || !s_untyped_storage || !s_cdata || !s_data_ptr || !s_weak_ref ||
        !s_nbytes || !s_device || !s_entries || !s_live || !s_peak || !s_by_site ||
        !s_since_sweep || !s_limit || !s_add || !s_insert || !s_pending || !s_over ||
        !s_interval || !s_backward_line || !s_grad_leaves || !s_threads || !s_line || !s_leaves || !s_backward || !s_table || !s_grad)
        return NULL;
    if (PyType_Ready(&ShadowType) < 0 || PyType_Ready(&TorchFunctionType) < 0 ||
        PyType_Ready(&PassThroughType) < 0 || PyType_Ready(&DispatchType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&fastpath_module);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "Shadow", (PyObject *)&ShadowType) < 0 ||
        PyModule_AddObjectRef(module, "TorchFunction", (PyObject *)&TorchFunctionType) < 0 ||
        PyModule_AddObjectRef(module, "PassThrough", (PyObject *)&PassThroughType) < 0 ||
        PyModule_AddObjectRef(module, "Dispatch", (PyObject *)&DispatchType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
