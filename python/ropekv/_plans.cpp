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
    thread_local std::vector<int64_t> sig;
    const at::Tensor *ts[kMaxTensors];
    alignas(8) unsigned char block[kMaxFields];
    Py_ssize_t n = 0;
    try {
        if (!signature(*st, args[3], args[4], sig, ts, n)) Py_RETURN_NONE;
        const Plan *plan = nullptr;
        if (st->last < st->plans.size() && st->plans[st->last].sig == sig) {
            plan = &st->plans[st->last];
        } else {
            for (size_t i = 0; i < st->plans.size(); i++) {
                if (st->plans[i].sig == sig) {
                    plan = &st->plans[i];
                    st->last = i;
                    break;
                }
            }
        }
        if (!plan) Py_RETURN_NONE;
        std::memcpy(block, plan->fields.data(), plan->fields.size());
        for (const auto &p : plan->pointers) {
            const uint64_t a = reinterpret_cast<uintptr_t>(ts[p.second]->data_ptr());
            std::memcpy(block + p.first, &a, sizeof a);
        }
    } catch (const std::exception &) {
        Py_RETURN_NONE;  // the Python path meets the same tensor and raises its own error
    }
    int s;
    Py_BEGIN_ALLOW_THREADS s = fn(kernel, block, stream);
    Py_END_ALLOW_THREADS return PyLong_FromLong(s);
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

PyObject *count(PyObject *, PyObject *cap) {
    Store *st = store_of(cap);
    return st ? PyLong_FromSize_t(st->plans.size()) : nullptr;
}

PyMethodDef methods[] = {
    {"plans", plans, METH_O, "plans(zero_copy) -> a store of argument plans for one kernel"},
    {"launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(launch)), METH_FASTCALL,
     "launch(store, launch_fn, kernel, vals, min_slot, stream) -> ropekv_status, or None without a plan"},
    {"remember", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(remember)), METH_FASTCALL,
     "remember(store, vals, min_slot, fields, pointers): keeps a checked plan for vals' signature"},
    {"count", count, METH_O, "count(store) -> the plans it holds"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plans", "ropekv's eager argument plans (see _plans.cpp)", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__plans(void) { return PyModule_Create(&module); }
