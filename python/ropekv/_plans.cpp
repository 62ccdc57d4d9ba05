// The eager launch's argument plans in C++ (the extension module ropekv._plans, built by _native.py against the
// torch the process runs): Kernel.launch_tensors' path for a launch whose argument signature was seen before.
//
// _torch.plan_args checks a launch's tensors once per signature (each tensor's dtype, shape, strides and device, and
// min_slot) and keeps the checked ropekv_args as a plan: the fields, and which of them hold which tensor's pointer.
// Reading those signatures through Python attributes costs most of an eager call; here they are read through ATen.
// Nothing is checked here that Python did not check first: a plan is only ever applied to tensors whose signature
// equals the one that passed the checks, with their own pointers put in (the library checks alignment and overlap at
// every launch). Anything unusual (a value that is not a tensor or None, a min_slot that is not an int, an exception
// from ATen) is a miss, and the caller takes the Python path, which raises the error it names.
//
//   plans(zero_copy) -> a store of plans for one kernel (a capsule)
//   launch(store, launch_fn, kernel, vals, min_slot, stream) -> the ropekv_status, or None (no plan: the Python path)
//   remember(store, vals, min_slot, fields, pointers) -> None; pointers: ((byte offset in fields, index in vals), ...)
//
// ops.write's variant lookup, for an eager call whose variant and argument signature were seen before (a route: the
// Kernel that ops._kernel chose for the call's strings, its device and its tensors' dtypes, and that Kernel's store):
//   router() -> an empty table of routes (a capsule)
//   route_write(router, launch_fn, raw_stream, spec, kv, layout, q_form, q_dtype, norm, record, min_slot, vals)
//       -> 0 (launched), (status, Kernel) for a failed launch, or None (no route or no plan: the Python path)
//   route(router, kernel, store, spec, kv, layout, q_form, q_dtype, norm, record, vals) -> None
//   forget(router) -> None (every route dropped: the operators' kernels changed)
// A route's key is what ops._kernel's depends on, taken from the same arguments: the seven strings as given (None
// where defaulted), kv_cache's device, positions' and slots' dtypes, which of q_nope, q_pe and q_out are given and
// q_out's dtype (the defaults of q_form and q_dtype). vals is ops.write's tuple of the 18 tensors in the order of
// ropekv_args' pointers; raw_stream is torch._C._cuda_getCurrentRawStream, called with the device for a GPU kernel.
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

namespace {

// ropekv_status ropekv_launch(ropekv_kernel *, const ropekv_args *, void *stream), taken from libropekv by address
typedef int (*launch_fn)(void *, const void *, void *);

constexpr Py_ssize_t kMaxTensors = 64;   // vals longer than this is a miss (the Python path names the error)
constexpr size_t kMaxFields = 4096;      // bytes of one argument block
constexpr size_t kMaxPlans = 64;         // plans kept per kernel; a full store is emptied and refilled (as in Python)

struct Plan {
    std::vector<int64_t> sig;
    std::vector<unsigned char> fields;
    std::vector<std::pair<uint32_t, uint32_t>> pointers;  // (byte offset in fields, index in vals)
};

struct Store {
    bool zero_copy;  // the signature also says whether q_nope (vals[0]) is q_out (vals[2])
    size_t last = 0; // the plan found last, tried first
    std::vector<Plan> plans;
};

const char kCapsule[] = "ropekv._plans.store";

// The signature of vals and min_slot into sig, the tensors into ts (nullptr for None). False: no signature (a value
// that is neither a tensor nor None, a min_slot that is not an int, more than kMaxTensors values).
bool signature(const Store &st, PyObject *vals, PyObject *min_slot, std::vector<int64_t> &sig,
               const at::Tensor **ts, Py_ssize_t &n) {
    if (!PyLong_CheckExact(min_slot)) return false;
    int overflow = 0;
    const long long ms = PyLong_AsLongLongAndOverflow(min_slot, &overflow);
    if (overflow || (ms == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return false;
    }
    if (!PyTuple_CheckExact(vals) && !PyList_CheckExact(vals)) return false;
    n = PySequence_Fast_GET_SIZE(vals);
    if (n > kMaxTensors) return false;
    PyObject **items = PySequence_Fast_ITEMS(vals);
    sig.clear();
    sig.push_back(ms);
    sig.push_back(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = items[i];
        if (v == Py_None) {
            ts[i] = nullptr;
            sig.push_back(-1);
            continue;
        }
        if (!THPVariable_Check(v)) return false;
        const at::Tensor &t = THPVariable_Unpack(v);
        ts[i] = &t;
        const c10::Device d = t.device();
        sig.push_back(static_cast<int64_t>(t.scalar_type()));
        sig.push_back(static_cast<int64_t>(d.type()));
        sig.push_back(d.index());
        const int64_t dim = t.dim();
        sig.push_back(dim);
        for (int64_t s : t.sizes()) sig.push_back(s);
        for (int64_t s : t.strides()) sig.push_back(s);
    }
    if (st.zero_copy && n > 2 && ts[0] && ts[2]) sig.push_back(ts[0]->data_ptr() == ts[2]->data_ptr());
    return true;
}

Store *store_of(PyObject *cap) { return static_cast<Store *>(PyCapsule_GetPointer(cap, kCapsule)); }

void store_free(PyObject *cap) { delete store_of(cap); }

PyObject *plans(PyObject *, PyObject *zero_copy) {
    const int z = PyObject_IsTrue(zero_copy);
    if (z < 0) return nullptr;
    Store *st = new Store();
    st->zero_copy = z != 0;
    PyObject *cap = PyCapsule_New(st, kCapsule, store_free);
    if (!cap) delete st;
    return cap;
}

// The argument block of a launch with vals and min_slot into block: the plan of their signature, its pointers taken
// from vals' own tensors. False: no plan (or no signature). ATen may throw: the caller catches.
bool fill_block(Store &st, PyObject *vals, PyObject *min_slot, unsigned char *block) {
    thread_local std::vector<int64_t> sig;
    const at::Tensor *ts[kMaxTensors];
    Py_ssize_t n = 0;
    if (!signature(st, vals, min_slot, sig, ts, n)) return false;
    const Plan *plan = nullptr;
    if (st.last < st.plans.size() && st.plans[st.last].sig == sig) plan = &st.plans[st.last];
    for (size_t i = 0; !plan && i < st.plans.size(); i++)
        if (st.plans[i].sig == sig) {
            plan = &st.plans[i];
            st.last = i;
        }
    if (!plan) return false;
    std::memcpy(block, plan->fields.data(), plan->fields.size());
    for (const auto &p : plan->pointers) {
        const uint64_t a = reinterpret_cast<uintptr_t>(ts[p.second]->data_ptr());
        std::memcpy(block + p.first, &a, sizeof a);
    }
    return true;
}

PyObject *launch(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "launch takes (store, launch_fn, kernel, vals, min_slot, stream)");
        return nullptr;
    }
    Store *st = store_of(args[0]);
    if (!st) return nullptr;
    const auto fn = reinterpret_cast<launch_fn>(PyLong_AsVoidPtr(args[1]));
    void *kernel = PyLong_AsVoidPtr(args[2]);
    void *stream = args[5] == Py_None ? nullptr : PyLong_AsVoidPtr(args[5]);
    if (PyErr_Occurred()) return nullptr;
    if (!fn || !kernel) {
        PyErr_SetString(PyExc_ValueError, "launch: a null launch function or kernel");
        return nullptr;
    }
    alignas(8) unsigned char block[kMaxFields];
    try {
        if (!fill_block(*st, args[3], args[4], block)) Py_RETURN_NONE;
    } catch (const std::exception &) {
        Py_RETURN_NONE;  // the Python path meets the same tensor and raises its own error
    }
    PyThreadState *released = PyEval_SaveThread();  // the launch without the GIL
    const int s = fn(kernel, block, stream);
    PyEval_RestoreThread(released);
    return PyLong_FromLong(s);
}

PyObject *remember(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "remember takes (store, vals, min_slot, fields, pointers)");
        return nullptr;
    }
    Store *st = store_of(args[0]);
    if (!st) return nullptr;
    char *fields;
    Py_ssize_t nf;
    if (PyBytes_AsStringAndSize(args[3], &fields, &nf) < 0) return nullptr;
    if (nf <= 0 || static_cast<size_t>(nf) > kMaxFields || nf % 8) {
        PyErr_SetString(PyExc_ValueError, "remember: the argument block must be 8 to 4096 bytes, a multiple of 8");
        return nullptr;
    }
    Plan plan;
    const at::Tensor *ts[kMaxTensors];
    Py_ssize_t n = 0;
    try {
        if (!signature(*st, args[1], args[2], plan.sig, ts, n)) Py_RETURN_NONE;
    } catch (const std::exception &) {
        Py_RETURN_NONE;
    }
    PyObject *seq = PySequence_Fast(args[4], "remember: pointers must be a sequence of (offset, index)");
    if (!seq) return nullptr;
    const Py_ssize_t np = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < np; i++) {
        unsigned long long off = 0, idx = 0;
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyArg_ParseTuple(pair, "KK", &off, &idx)) {
            Py_DECREF(seq);
            return nullptr;
        }
        if (off % 8 || off + 8 > static_cast<size_t>(nf) || idx >= static_cast<size_t>(n) || !ts[idx]) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "remember: pointer (%llu, %llu) outside the block or not a tensor", off,
                         idx);
            return nullptr;
        }
        plan.pointers.emplace_back(static_cast<uint32_t>(off), static_cast<uint32_t>(idx));
    }
    Py_DECREF(seq);
    plan.fields.assign(fields, fields + nf);
    if (st->plans.size() >= kMaxPlans) st->plans.clear();
    for (auto &p : st->plans) {
        if (p.sig == plan.sig) {
            p = std::move(plan);
            Py_RETURN_NONE;
        }
    }
    st->plans.push_back(std::move(plan));
    st->last = st->plans.size() - 1;
    Py_RETURN_NONE;
}

// ---- ops.write's routes -----------------------------------------------------------------------------------------

constexpr Py_ssize_t kStrings = 7;    // spec, kv, layout, q_form, q_dtype, norm, record
constexpr size_t kMaxRoutes = 64;     // a full table is emptied and refilled
constexpr Py_ssize_t kWriteVals = 18; // ops.write's tensors (ropekv_args' pointers)

struct Key {
    PyObject *strs[kStrings];  // borrowed while looking up; a route holds its own references
    int64_t device, pos, slot, q_out;
    int given;  // bit i: vals[i] is given, i = 0 (q_nope), 1 (q_pe), 2 (q_out)
};

struct Route {
    Key key;
    PyObject *kernel = nullptr, *store = nullptr;  // the Kernel and its store capsule (references held)
    PyObject *handle = nullptr, *ctx_handle = nullptr;  // Kernel._h and Kernel.ctx._h when routed (held)
    void *kernel_ptr = nullptr;
};

struct Router {
    size_t last = 0;
    std::vector<Route> routes;
};

const char kRouterCapsule[] = "ropekv._plans.router";

void route_drop(Route &r) {
    for (PyObject *s : r.key.strs) Py_XDECREF(s);
    Py_XDECREF(r.kernel);
    Py_XDECREF(r.store);
    Py_XDECREF(r.handle);
    Py_XDECREF(r.ctx_handle);
}

Router *router_of(PyObject *cap) { return static_cast<Router *>(PyCapsule_GetPointer(cap, kRouterCapsule)); }

void router_clear(Router *rt) {
    for (auto &r : rt->routes) route_drop(r);
    rt->routes.clear();
    rt->last = 0;
}

void router_free(PyObject *cap) {
    Router *rt = router_of(cap);
    router_clear(rt);
    delete rt;
}

PyObject *router(PyObject *, PyObject *) {
    Router *rt = new Router();
    PyObject *cap = PyCapsule_New(rt, kRouterCapsule, router_free);
    if (!cap) delete rt;
    return cap;
}

// A tensor's dtype as a number, -1 for None; false for a value that is neither (ATen may throw: the caller catches).
bool dtype_of(PyObject *v, int64_t &out) {
    if (v == Py_None) {
        out = -1;
        return true;
    }
    if (!THPVariable_Check(v)) return false;
    out = static_cast<int64_t>(THPVariable_Unpack(v).scalar_type());
    return true;
}

// The key of a call (strs: the seven strings; vals: ops.write's tuple). False: no key (a string argument that is not
// a str or None, a plain-tensor kv_cache missing or a meta one, a value that is not a tensor): the Python path.
bool key_of(PyObject *const *strs, PyObject *vals, Key &k) {
    if (!PyTuple_CheckExact(vals) || PyTuple_GET_SIZE(vals) != kWriteVals) return false;
    for (Py_ssize_t i = 0; i < kStrings; i++) {
        if (strs[i] != Py_None && !PyUnicode_CheckExact(strs[i])) return false;
        k.strs[i] = strs[i];
    }
    PyObject *kv_cache = PyTuple_GET_ITEM(vals, 5);
    if (Py_TYPE(kv_cache) != reinterpret_cast<PyTypeObject *>(THPVariableClass)) return false;  // as ops._eager
    const at::Tensor &kc = THPVariable_Unpack(kv_cache);
    if (kc.is_meta()) return false;
    k.device = kc.device().is_cpu() ? -1 : kc.device().index();
    k.given = 0;
    for (int i = 0; i < 3; i++) k.given |= (PyTuple_GET_ITEM(vals, i) != Py_None) << i;
    return dtype_of(PyTuple_GET_ITEM(vals, 6), k.pos) && dtype_of(PyTuple_GET_ITEM(vals, 7), k.slot) &&
           dtype_of(PyTuple_GET_ITEM(vals, 2), k.q_out);
}

bool same_str(PyObject *a, PyObject *b) {
    if (a == b) return true;
    if (a == Py_None || b == Py_None) return false;
    const int c = PyUnicode_Compare(a, b);
    if (c == -1 && PyErr_Occurred()) PyErr_Clear();
    return c == 0;
}

bool same_key(const Key &a, const Key &b) {
    if (a.device != b.device || a.pos != b.pos || a.slot != b.slot || a.q_out != b.q_out || a.given != b.given)
        return false;
    for (Py_ssize_t i = 0; i < kStrings; i++)
        if (!same_str(a.strs[i], b.strs[i])) return false;
    return true;
}

Route *find_route(Router *rt, const Key &k) {
    if (rt->last < rt->routes.size() && same_key(rt->routes[rt->last].key, k)) return &rt->routes[rt->last];
    for (size_t i = 0; i < rt->routes.size(); i++)
        if (same_key(rt->routes[i].key, k)) {
            rt->last = i;
            return &rt->routes[i];
        }
    return nullptr;
}

// The attribute names a route reads: Kernel._h, Kernel.ctx, Context._h, and a ctypes handle's value (interned once).
struct Names {
    PyObject *h, *ctx, *value;
};
const Names &names() {
    static const Names n{PyUnicode_InternFromString("_h"), PyUnicode_InternFromString("ctx"),
                         PyUnicode_InternFromString("value")};
    return n;
}

// Whether a route's Kernel and context are as they were routed (neither released nor closed since).
bool route_live(const Route &r) {
    const Names &nm = names();
    PyObject *h = PyObject_GetAttr(r.kernel, nm.h);
    if (!h) return false;
    Py_DECREF(h);  // the route holds it too: compared by identity
    if (h != r.handle) return false;
    PyObject *ctx = PyObject_GetAttr(r.kernel, nm.ctx);
    if (!ctx) return false;
    PyObject *ch = PyObject_GetAttr(ctx, nm.h);
    Py_DECREF(ctx);
    if (!ch) return false;
    Py_DECREF(ch);
    return ch == r.ctx_handle;
}

PyObject *route_write(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 + kStrings) {
        PyErr_SetString(PyExc_TypeError,
                        "route_write takes (router, launch_fn, raw_stream, 7 strings, min_slot, vals)");
        return nullptr;
    }
    Router *rt = router_of(args[0]);
    if (!rt) return nullptr;
    const auto fn = reinterpret_cast<launch_fn>(PyLong_AsVoidPtr(args[1]));
    if (PyErr_Occurred()) return nullptr;
    PyObject *raw_stream = args[2], *min_slot = args[3 + kStrings], *vals = args[4 + kStrings];
    alignas(8) unsigned char block[kMaxFields];
    Route *r = nullptr;
    try {
        Key k;
        if (!fn || !key_of(args + 3, vals, k) || !(r = find_route(rt, k))) Py_RETURN_NONE;
        if (!route_live(*r)) {
            PyErr_Clear();
            route_drop(*r);
            rt->routes.erase(rt->routes.begin() + (r - rt->routes.data()));
            rt->last = 0;
            Py_RETURN_NONE;
        }
        Store *st = store_of(r->store);
        if (!st || !fill_block(*st, vals, min_slot, block)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    } catch (const std::exception &) {
        Py_RETURN_NONE;
    }
    // what the launch needs from the route, taken before any call into Python (which may change the routes)
    const int64_t device = r->key.device;
    void *kernel = r->kernel_ptr;
    PyObject *kernel_obj = r->kernel;
    Py_INCREF(kernel_obj);  // kept through the launch, whatever happens to the routes meanwhile
    void *stream = nullptr;
    if (device >= 0) {  // the device's current stream, as _torch.stream_for takes it
        PyObject *d = raw_stream == Py_None ? nullptr : PyLong_FromLongLong(device);
        PyObject *cur = d ? PyObject_CallOneArg(raw_stream, d) : nullptr;
        Py_XDECREF(d);
        stream = cur ? PyLong_AsVoidPtr(cur) : nullptr;
        Py_XDECREF(cur);
        if (!cur || PyErr_Occurred()) {
            Py_DECREF(kernel_obj);
            if (raw_stream == Py_None) Py_RETURN_NONE;
            return nullptr;
        }
    }
    PyThreadState *released = PyEval_SaveThread();  // the launch without the GIL
    const int s = fn(kernel, block, stream);
    PyEval_RestoreThread(released);
    if (s == 0) {
        Py_DECREF(kernel_obj);
        return PyLong_FromLong(0);
    }
    PyObject *status = PyLong_FromLong(s);
    PyObject *out = status ? PyTuple_Pack(2, status, kernel_obj) : nullptr;
    Py_XDECREF(status);
    Py_DECREF(kernel_obj);
    return out;
}

PyObject *route(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 + kStrings) {
        PyErr_SetString(PyExc_TypeError, "route takes (router, kernel, store, 7 strings, vals)");
        return nullptr;
    }
    Router *rt = router_of(args[0]);
    if (!rt || !store_of(args[2])) return nullptr;
    Route r;
    try {
        if (!key_of(args + 3, args[3 + kStrings], r.key) || find_route(rt, r.key)) Py_RETURN_NONE;
    } catch (const std::exception &) {
        Py_RETURN_NONE;
    }
    const Names &nm = names();
    PyObject *h = PyObject_GetAttr(args[1], nm.h);
    if (!h) return nullptr;
    PyObject *ctx = PyObject_GetAttr(args[1], nm.ctx);
    PyObject *ch = ctx ? PyObject_GetAttr(ctx, nm.h) : nullptr;
    Py_XDECREF(ctx);
    PyObject *v = h != Py_None ? PyObject_GetAttr(h, nm.value) : nullptr;
    void *ptr = v ? PyLong_AsVoidPtr(v) : nullptr;
    Py_XDECREF(v);
    if (!ch || !ptr || ch == Py_None || PyErr_Occurred()) {  // a released kernel or a closed context: no route
        Py_DECREF(h);
        Py_XDECREF(ch);
        if (PyErr_Occurred()) return nullptr;
        Py_RETURN_NONE;
    }
    for (PyObject *s : r.key.strs) Py_INCREF(s);
    Py_INCREF(args[1]);
    Py_INCREF(args[2]);
    r.kernel = args[1], r.store = args[2], r.handle = h, r.ctx_handle = ch, r.kernel_ptr = ptr;
    if (rt->routes.size() >= kMaxRoutes) router_clear(rt);
    rt->routes.push_back(r);
    rt->last = rt->routes.size() - 1;
    Py_RETURN_NONE;
}

PyObject *forget(PyObject *, PyObject *cap) {
    Router *rt = router_of(cap);
    if (!rt) return nullptr;
    router_clear(rt);
    Py_RETURN_NONE;
}

PyObject *count(PyObject *, PyObject *cap) {
    Store *st = store_of(cap);
    return st ? PyLong_FromSize_t(st->plans.size()) : nullptr;
}

PyObject *routes(PyObject *, PyObject *cap) {
    Router *rt = router_of(cap);
    return rt ? PyLong_FromSize_t(rt->routes.size()) : nullptr;
}

PyMethodDef methods[] = {
    {"plans", plans, METH_O, "plans(zero_copy) -> a store of argument plans for one kernel"},
    {"launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(launch)), METH_FASTCALL,
     "launch(store, launch_fn, kernel, vals, min_slot, stream) -> ropekv_status, or None without a plan"},
    {"remember", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(remember)), METH_FASTCALL,
     "remember(store, vals, min_slot, fields, pointers): keeps a checked plan for vals' signature"},
    {"count", count, METH_O, "count(store) -> the plans it holds"},
    {"router", router, METH_NOARGS, "router() -> an empty table of ops.write's routes"},
    {"route_write", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(route_write)), METH_FASTCALL,
     "route_write(router, launch_fn, raw_stream, spec, kv, layout, q_form, q_dtype, norm, record, min_slot, vals) -> "
     "0, (status, Kernel), or None without a route or plan"},
    {"route", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(route)), METH_FASTCALL,
     "route(router, kernel, store, spec, kv, layout, q_form, q_dtype, norm, record, vals): keeps the call's route"},
    {"forget", forget, METH_O, "forget(router): drops every route"},
    {"routes", routes, METH_O, "routes(router) -> the routes it holds"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plans", "ropekv's eager argument plans (see _plans.cpp)", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__plans(void) { return PyModule_Create(&module); }
