"""Tensor objects are made and freed correctly.

The core keeps freed ``Tensor`` objects for reuse and frees a tensor without attributes by
a shorter path than CPython's (``_C/tensor.pyx``, "A freelist of ``microtensor.Tensor``
objects").  A reused object must carry nothing of its previous life: no attributes, no
weak references, no autograd fields; attributes users set, weak references, reference
cycles through attributes, subclasses and finalizers must behave as for any Python object.
"""
import gc
import subprocess
import sys
import textwrap
import weakref

import microtensor as mt


def test_a_reused_tensor_has_nothing_of_a_freed_one():
    for i in range(600):
        x = mt.ones(2, 3, requires_grad=i % 2 == 0)
        y = x.t()
        y.note = [i]
        assert vars(y) == {"note": [i]}
        del x, y
        fresh = mt.zeros(3)
        assert vars(fresh) == {} and not hasattr(fresh, "note")
        assert fresh.grad_fn is None and fresh._base is None and not fresh.requires_grad
        assert fresh.tolist() == [0.0, 0.0, 0.0]
        del fresh


def test_attributes_can_be_set_read_and_deleted():
    t = mt.arange(3)
    t.label = "a"
    t.__dict__["other"] = 2
    assert (t.label, t.other) == ("a", 2)
    del t.label
    assert not hasattr(t, "label") and vars(t) == {"other": 2}


def test_a_cycle_through_attributes_is_collected():
    a, b = mt.ones(2), mt.ones(3)
    a.partner, b.partner = b, a
    a.itself = a
    dead = weakref.ref(a), weakref.ref(b)
    del a, b
    gc.collect()
    assert dead[0]() is None and dead[1]() is None


def test_a_weak_reference_dies_with_its_tensor_and_calls_back():
    called = []
    t = mt.ones(4)[1:]
    ref = weakref.ref(t, called.append)
    del t
    assert ref() is None and called == [ref]


def test_the_class_reference_count_is_unchanged_by_many_tensors():
    def make_and_free(count):
        tensors = [mt.ones(2).t() for _ in range(count)]
        del tensors

    make_and_free(10)  # first calls may cache what refers to the class
    gc.collect()
    before = sys.getrefcount(mt.Tensor)
    make_and_free(3000)
    gc.collect()
    after = sys.getrefcount(mt.Tensor)  # apart: the assert would hold one more reference
    assert after == before


def test_subclasses_keep_their_attributes_and_finalizers():
    finalized = []

    class Noted(mt.Tensor):
        def __del__(self):
            finalized.append(self.tag)

    n = Noted(mt.ones(2))  # the legacy constructor: an alias of the tensor
    n.tag = "n"
    del n
    gc.collect()
    assert finalized == ["n"]
    p = mt.nn.Parameter(mt.ones(2))
    p.extra = 1
    assert vars(p)["extra"] == 1


def test_freeing_a_long_chain_of_tensors_does_not_exhaust_the_stack():
    # each tensor holds the previous one: freeing the last frees them all, one inside
    # the other's deallocation, unless the deallocator defers deep chains (the trashcan)
    code = textwrap.dedent("""
        import microtensor as mt
        last = mt.ones(1)
        for _ in range(300_000):
            t = mt.ones(1)
            t.previous = last
            last = t
        del t, last
        print("freed")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "freed", done.stderr[-2000:]


def test_subclass_instances_release_their_class():
    class Sub(mt.Tensor):
        pass

    class Slotted(mt.Tensor):
        __slots__ = ()

    for cls in (Sub, Slotted, mt.nn.Parameter):
        for _ in range(10):
            cls(mt.ones(2))
        gc.collect()
        before = sys.getrefcount(cls)
        for _ in range(1000):
            cls(mt.ones(2))
        gc.collect()
        after = sys.getrefcount(cls)
        assert after == before, cls


def test_a_finalizer_added_to_the_class_runs_for_every_tensor():
    # reused objects must not carry the "already finalized" mark of their previous life
    finalized = []
    mt.Tensor.__del__ = lambda self: finalized.append(vars(self).get("index"))
    try:
        for i in range(20):
            t = mt.full((2,), float(i))
            t.index = i
            del t
    finally:
        del mt.Tensor.__del__
    assert [i for i in finalized if i is not None] == list(range(20))


def test_class_assignment_between_tensor_and_a_subclass():
    # CPython allows it only between classes with the same tp_free: the core gives every
    # subclass the freelist's (which frees a subclass's objects as CPython does)
    class Sub(mt.Tensor):
        pass

    class SubSub(Sub):
        pass

    for target in (Sub, SubSub, mt.nn.Parameter):
        t = mt.ones(2)
        t.note = "kept"
        t.__class__ = target
        assert type(t) is target and t.note == "kept"
        t.__class__ = mt.Tensor
        assert type(t) is mt.Tensor and t.note == "kept"
        t.__class__ = target
        del t   # freed as a subclass object
    for _ in range(300):   # and objects freed as Tensors go round the freelist
        u = mt.ones(3)
        u.__class__ = Sub
        u.__class__ = mt.Tensor
        del u
    assert mt.ones(2).tolist() == [1.0, 1.0]
