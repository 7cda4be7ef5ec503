"""Typed, single-threaded loops over strided memory, in nine groups (one section each):
the Layout every strided kernel walks; copy with casting (and fill); the sum of all
elements; the raw-pointer entry points of the tensor's fast paths (+ - * / with
broadcasting, sums over dims); gather / scatter_add along a dim; softmax / log_softmax, its
backward and cumulative sums along a dim; nll_loss and its backward; stacked outer
products; small matrix products.  Last, the thread's floating-point mode
(``set_flush_denormal``).

Kernels take NumPy ndarrays (zero-copy views of storages), so they know nothing of Tensor.
Every strided kernel first builds a Layout: size-1 dims dropped, dims ordered by the
destination's strides (outermost first), and neighbouring dims merged wherever they are
contiguous with each other in every operand, so most calls reduce to one flat loop.
Supported dtypes: float32, float64, int64, int32, int16, int8, uint8, bool (float16 and
bfloat16 are copied bit for bit by ``copy_raw``; NumPy casts them).

Memory safety (the module is compiled with boundscheck=False and wraparound=False): every
loop here is bounded by the shape of the array or tensor it walks, and never indexes past
it, so it is safe whenever those geometries are.  They are, by construction elsewhere:
an ndarray given to a ``def`` kernel is NumPy's own or ``TensorBase._array()`` over a
tensor; every tensor's numel fits in int64 (``_numel`` in ``_C.tensor`` checks the product
of the sizes when the tensor is made) and all its elements lie in its storage
(``_check_geometry`` for geometries from outside, derivation for views).  Hence a product
of sizes formed here (coalesced dims, ``out_stride``) divides a numel and cannot overflow,
and ``stride * size`` of a dim that is stepped (size > 1) stays within twice the
allocation; size-1 dims are dropped before their strides are scaled, and an empty shape
returns before any product is formed.  Index kernels check every position first
(``first_out_of_range``).
"""
from cython cimport floating
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

cimport numpy as cnp
import numpy as np

cnp.import_array()

cdef enum:
    MAX_DIMS = 64
    # Each of the SUM_LANES float accumulators sums SUM_BLOCK / SUM_LANES = 16 values before
    # blocks are combined pairwise, which bounds the rounding error like NumPy's pairwise sum.
    SUM_LANES = 16
    SUM_BLOCK = 256
    # Transposing copies move one cache line by one line at a time through a scratch tile
    # of SCRATCH_WORDS 8-byte words (see "Geometry of transposing copies").  64-byte lines:
    # every x86 core and most ARM server cores.
    CACHE_LINE_BYTES = 64
    SCRATCH_WORDS = CACHE_LINE_BYTES * CACHE_LINE_BYTES // 8
    # Below this many elements along either tiled dim, tiling costs more than it saves.
    MIN_TILED_EXTENT = 8

cdef enum DtypeCode:
    F32, F64, I64, I32, I16, I8, U8, BOOL

# NumPy's bool is an unsigned char, which uint8_t is too; the loops read bools as plain
# ``char`` (0 or 1) so that the fused types below tell bool and uint8 apart.
ctypedef char bool_byte

ctypedef fused src_t:
    float
    double
    int64_t
    int32_t
    int16_t
    int8_t
    uint8_t
    bool_byte

ctypedef fused dst_t:
    float
    double
    int64_t
    int32_t
    int16_t
    int8_t
    uint8_t
    bool_byte

ctypedef fused integral:
    int64_t
    int32_t
    int16_t
    int8_t
    uint8_t
    bool_byte


cdef struct Layout:
    int ndim
    int nops                         # operands: 2 for copies and sums, 3 for binary ops
    Py_ssize_t shape[MAX_DIMS]
    Py_ssize_t strides[3][MAX_DIMS]  # bytes; operand 0 is the destination or the only operand


cdef struct OuterIter:
    # Walks dims [0, ndim) of a Layout in C order, tracking each operand's byte offset.
    int ndim
    int nops
    Py_ssize_t index[MAX_DIMS]
    Py_ssize_t offset[3]


# ---------------------------------------------------------------------------------------
# Layout: loading, ordering, coalescing
# ---------------------------------------------------------------------------------------

cdef int dtype_code(cnp.ndarray a):
    """The kernel dtype of `a`, or -1 when the kernels cannot touch it directly."""
    if not (cnp.PyArray_ISALIGNED(a) and cnp.PyArray_ISNOTSWAPPED(a)):
        return -1
    cdef int type_num = cnp.PyArray_TYPE(a)
    cdef Py_ssize_t itemsize = cnp.PyArray_ITEMSIZE(a)
    if type_num == cnp.NPY_FLOAT:
        return F32
    if type_num == cnp.NPY_DOUBLE:
        return F64
    if type_num == cnp.NPY_BOOL:
        return BOOL
    if type_num in (cnp.NPY_LONG, cnp.NPY_LONGLONG, cnp.NPY_INT) and itemsize == 8:
        return I64
    if type_num in (cnp.NPY_INT, cnp.NPY_LONG) and itemsize == 4:
        return I32
    if type_num == cnp.NPY_SHORT:
        return I16
    if type_num == cnp.NPY_BYTE:
        return I8
    if type_num == cnp.NPY_UBYTE:
        return U8
    return -1


cdef bint load_layout(Layout* layout, cnp.ndarray a, cnp.ndarray b):
    """Fill `layout` from `a` (and `b`, which must have a's shape, or None); False if empty."""
    cdef int dim
    cdef Py_ssize_t size
    layout.ndim = 0
    layout.nops = 2
    for dim in range(cnp.PyArray_NDIM(a)):
        size = cnp.PyArray_DIM(a, dim)
        if size == 0:
            return False
        if size == 1:
            continue
        layout.shape[layout.ndim] = size
        layout.strides[0][layout.ndim] = cnp.PyArray_STRIDE(a, dim)
        layout.strides[1][layout.ndim] = 0 if b is None else cnp.PyArray_STRIDE(b, dim)
        layout.ndim += 1
    return True


cdef inline Py_ssize_t magnitude(Py_ssize_t x) noexcept nogil:
    return -x if x < 0 else x


cdef inline bint is_inner_to(Layout* layout, int dim, int other) noexcept nogil:
    """True when `dim` should iterate faster than `other` (smaller |stride| in operand 0)."""
    cdef Py_ssize_t d0 = magnitude(layout.strides[0][dim])
    cdef Py_ssize_t o0 = magnitude(layout.strides[0][other])
    if d0 != o0:
        return d0 < o0
    return magnitude(layout.strides[1][dim]) < magnitude(layout.strides[1][other])


cdef inline void swap_dims(Layout* layout, int i, int j) noexcept nogil:
    cdef Py_ssize_t tmp
    cdef int op
    tmp = layout.shape[i]
    layout.shape[i] = layout.shape[j]
    layout.shape[j] = tmp
    for op in range(layout.nops):
        tmp = layout.strides[op][i]
        layout.strides[op][i] = layout.strides[op][j]
        layout.strides[op][j] = tmp


cdef inline bint mergeable(Layout* layout, int outer, int inner) noexcept nogil:
    """Whether dim `outer` continues dim `inner` in every operand (one flat dim together)."""
    cdef int op
    for op in range(layout.nops):
        if layout.strides[op][outer] != layout.strides[op][inner] * layout.shape[inner]:
            return False
    return True


cdef void order_and_coalesce(Layout* layout) noexcept nogil:
    """Sort dims so operand 0's innermost dim comes last, then merge dims that are
    contiguous with each other in every operand."""
    cdef int i, j, kept, op
    for i in range(1, layout.ndim):
        j = i
        while j > 0 and is_inner_to(layout, j - 1, j):
            swap_dims(layout, j - 1, j)
            j -= 1
    if layout.ndim == 0:
        return
    kept = 0
    for i in range(1, layout.ndim):
        if mergeable(layout, kept, i):
            layout.shape[kept] *= layout.shape[i]
        else:
            kept += 1
            layout.shape[kept] = layout.shape[i]
        for op in range(layout.nops):
            layout.strides[op][kept] = layout.strides[op][i]
    layout.ndim = kept + 1


cdef bint move_tile_dim(Layout* layout, Py_ssize_t src_itemsize) noexcept nogil:
    """When the source runs fastest along a dim other than the destination's innermost,
    move that dim next to the innermost so the copy can walk both in 2-D tiles."""
    cdef int inner = layout.ndim - 1
    cdef int dim, best = -1
    cdef Py_ssize_t best_stride
    if layout.ndim < 2 or magnitude(layout.strides[1][inner]) <= src_itemsize:
        return False
    best_stride = magnitude(layout.strides[1][inner])
    for dim in range(inner):
        if magnitude(layout.strides[1][dim]) < best_stride and layout.shape[dim] >= MIN_TILED_EXTENT:
            best = dim
            best_stride = magnitude(layout.strides[1][dim])
    if best < 0 or best_stride == 0 or layout.shape[inner] < MIN_TILED_EXTENT:
        return False
    while best < inner - 1:
        swap_dims(layout, best, best + 1)
        best += 1
    return True


cdef inline void start_outer(OuterIter* it, int ndim, int nops) noexcept nogil:
    cdef int dim
    it.ndim = ndim
    it.nops = nops
    it.offset[0] = 0
    it.offset[1] = 0
    it.offset[2] = 0
    for dim in range(ndim):
        it.index[dim] = 0


cdef inline bint advance_outer(OuterIter* it, Layout* layout) noexcept nogil:
    """Step to the next outer position; False once every position has been visited."""
    cdef int dim, op
    for dim in range(it.ndim - 1, -1, -1):
        it.index[dim] += 1
        for op in range(it.nops):
            it.offset[op] += layout.strides[op][dim]
        if it.index[dim] < layout.shape[dim]:
            return True
        it.index[dim] = 0
        for op in range(it.nops):
            it.offset[op] -= layout.strides[op][dim] * layout.shape[dim]
    return False


cdef void byte_extent(cnp.ndarray a, Py_ssize_t* lo, Py_ssize_t* hi):
    """[lo, hi): the addresses a non-empty array `a` can touch."""
    cdef Py_ssize_t step
    cdef int dim
    lo[0] = <Py_ssize_t>cnp.PyArray_DATA(a)
    hi[0] = lo[0] + cnp.PyArray_ITEMSIZE(a)
    for dim in range(cnp.PyArray_NDIM(a)):
        step = cnp.PyArray_STRIDE(a, dim) * (cnp.PyArray_DIM(a, dim) - 1)
        if step < 0:
            lo[0] += step
        else:
            hi[0] += step


# ---------------------------------------------------------------------------------------
# Geometry of transposing copies
#
# A copy whose source runs fastest along another dim than the destination (a.t().clone())
# reads one side across its rows.  Tiles that keep lines cached between visits depend on
# the cache's associativity: the former 256 x 256 float32 tiles (8 x 8 pieces) came back
# to each of 256 source lines after 32 pieces; for a 4096-wide float32 source those lines
# lie 16 KiB apart, and an L2 of S bytes and W ways puts lines 16 KiB apart into only
# S / W / 16 KiB set groups: 8 groups x 8 ways = 64 lines on a 1 MiB 8-way L2, 16 x 16 =
# 256 on a 4 MiB 16-way L2, both too few for 256 lines plus the destination's, so each
# tile re-read its source from L3 (fast on some CPUs, 1.8x PyTorch's time on others).
#
# Here a tile is one cache line of the source by one line of the destination (16 x 16
# float32, 8 x 8 float64): each source line is read whole into a contiguous scratch tile
# (at most 64 lines of 64 bytes = 4 KiB, in L1 on any current CPU: L1d >= 32 KiB), and each
# destination line written whole from it.  With rows aligned to lines (the first tile of
# each side stops at a line boundary: exact when the row strides are whole lines, as for
# 4000- or 4096-wide float32), no line is used by two tiles, so no line has to
# stay cached between tiles and the sets and ways of L1 and L2 play no part.
#
# What is left is the TLB: tiles walk a band of source rows down the destination's rows
# before moving on, and the next band re-reads the following line of the same source
# rows, on the same pages.  A band of B rows touches B * stride / page pages (at least
# one per row), at most COPY_BAND_PAGES = 256: a sixth of the smallest second-level TLB of
# current x86 cores (1536 entries), so a band's pages are still mapped when the next band
# needs them, with room for the destination's (one line tile writes 16 float32 rows).
# (512 pages measured up to 1.4x slower for 8192^2 float32 with 4 KiB pages.)  And B
# lines (the next line of each row, fetched with its neighbour by the adjacent-line
# prefetcher) fit in half the L2.  4096^2 float32, 4 KiB pages, 1 MiB L2: one row per
# page, B = min(256, 1 MiB / 2 / 64 = 8192) = 256 rows.  A tile touches 16 source and 16
# destination pages (the 256 x 256 tiles touched 256 of each).
# ---------------------------------------------------------------------------------------

cdef enum:
    COPY_BAND_PAGES = 256

cdef Py_ssize_t page_bytes = 4096, l2_bytes = 1 << 20     # replaced at import when readable


cdef inline Py_ssize_t band_rows(Py_ssize_t row_stride, Py_ssize_t page,
                                 Py_ssize_t l2) noexcept nogil:
    cdef Py_ssize_t rows_per_page = max(<Py_ssize_t>1, page // max(row_stride, <Py_ssize_t>1))
    return max(<Py_ssize_t>CACHE_LINE_BYTES,
               min(COPY_BAND_PAGES * rows_per_page, l2 // (2 * CACHE_LINE_BYTES)))


def copy_band_rows(Py_ssize_t row_stride_bytes, page=None, l2=None):
    """How many source rows (`row_stride_bytes` apart) a transposing copy walks per band,
    for this machine's page and L2 sizes or the given ones."""
    return band_rows(abs(row_stride_bytes), page_bytes if page is None else page,
                     l2_bytes if l2 is None else l2)


def _sysfs_cache_bytes(level):
    """The size of CPU 0's level-`level` data (or unified) cache from sysfs, or None."""
    import glob, os
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(index, "level")) as f:
                found = int(f.read())
            with open(os.path.join(index, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(index, "size")) as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        if found == level and kind != "Instruction":
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            try:
                return int(text.rstrip("KMG")) * scale
            except ValueError:
                return None
    return None


def copy_geometry(read=True):
    """The page and L2 sizes (bytes) transposing copies are tiled for: read from sysconf,
    else sysfs, else common defaults (4 KiB pages, 1 MiB L2); implausible readings count
    as unreadable.  `read=False` gives the defaults."""
    import os
    sizes = {"page": 4096, "l2": 1 << 20}
    sources = {"page": ("SC_PAGESIZE", None), "l2": ("SC_LEVEL2_CACHE_SIZE", 2)}
    for key, (name, level) in sources.items() if read else ():
        try:
            value = os.sysconf(name)
        except (ValueError, OSError):
            value = None
        if (value is None or value <= 0) and level is not None:
            value = _sysfs_cache_bytes(level)
        if value is not None and 4096 <= value <= 1 << 30:
            sizes[key] = value
    return sizes


def _load_geometry():
    global page_bytes, l2_bytes
    sizes = copy_geometry()
    page_bytes, l2_bytes = sizes["page"], sizes["l2"]


_load_geometry()


# ---------------------------------------------------------------------------------------
# Copy with casting
# ---------------------------------------------------------------------------------------

cdef inline dst_t convert(src_t value, dst_t* target_type) noexcept nogil:
    # NumPy's unsafe cast: C conversion, except that bool means "non-zero".
    if dst_t is bool_byte:
        return value != 0
    elif (src_t is float or src_t is double) and (dst_t is int16_t or dst_t is int8_t or
                                                  dst_t is uint8_t):
        return <dst_t><int64_t>value   # through int64, as PyTorch: -1.0 to uint8 is 255
    else:
        return <dst_t>value


cdef inline void copy_row(dst_t* d, Py_ssize_t ds, const src_t* s, Py_ssize_t ss,
                          Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef dst_t value
    if ss == 0:
        value = convert(s[0], d)
        if ds == 1:
            for i in range(n):
                d[i] = value
        else:
            for i in range(n):
                d[i * ds] = value
    elif ds == 1 and ss == 1:
        if dst_t is src_t:
            memcpy(d, s, n * sizeof(dst_t))
        else:
            for i in range(n):
                d[i] = convert(s[i], d)
    else:
        for i in range(n):
            d[i * ds] = convert(s[i * ss], d)


cdef inline Py_ssize_t to_line_boundary(const void* p, Py_ssize_t itemsize,
                                       Py_ssize_t line_items) noexcept nogil:
    """Elements from `p` to the next cache-line boundary (a whole line when on one)."""
    return line_items - (<size_t>p % CACHE_LINE_BYTES) // itemsize


cdef void copy_line_tile(dst_t* d, Py_ssize_t d_rs, Py_ssize_t d_cs,
                         const src_t* s, Py_ssize_t s_rs, Py_ssize_t s_cs,
                         Py_ssize_t rows, Py_ssize_t cols, dst_t* scratch) noexcept nogil:
    # One tile of at most a source line (rows) by a destination line (cols): each source
    # run is read once into the scratch tile, then each destination run written once.
    cdef Py_ssize_t r, c, stride = CACHE_LINE_BYTES // sizeof(src_t)
    cdef dst_t* out
    cdef const src_t* run
    for c in range(cols):
        run = s + c * s_cs
        out = scratch + c * stride
        for r in range(rows):
            out[r] = convert(run[r * s_rs], out)
    for r in range(rows):
        out = d + r * d_rs
        for c in range(cols):
            out[c * d_cs] = scratch[c * stride + r]


cdef inline void copy_full_line_tile(dst_t* d, Py_ssize_t d_rs, const src_t* s,
                                     Py_ssize_t s_cs, dst_t* scratch) noexcept nogil:
    # copy_line_tile for a whole tile of unit inner strides, with constant trip counts.
    # The scratch tile is filled along source lines, vectorised: the destination pass
    # reads it element by element, which store forwarding serves (it does not serve a
    # vector load of several scalar stores still in flight).
    cdef Py_ssize_t r, c
    cdef dst_t* out
    cdef const src_t* run
    for c in range(CACHE_LINE_BYTES // sizeof(dst_t)):
        run = s + c * s_cs
        out = scratch + c * (CACHE_LINE_BYTES // sizeof(src_t))
        for r in range(CACHE_LINE_BYTES // sizeof(src_t)):
            out[r] = convert(run[r], out)
    for r in range(CACHE_LINE_BYTES // sizeof(src_t)):
        out = d + r * d_rs
        for c in range(CACHE_LINE_BYTES // sizeof(dst_t)):
            out[c] = scratch[c * (CACHE_LINE_BYTES // sizeof(src_t)) + r]


cdef void copy_tiled_2d(dst_t* d, Py_ssize_t d_rs, Py_ssize_t d_cs,
                        const src_t* s, Py_ssize_t s_rs, Py_ssize_t s_cs,
                        Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t band) noexcept nogil:
    # Rows follow the source's fastest dim, columns the destination's.
    cdef double scratch_words[SCRATCH_WORDS]
    cdef dst_t* scratch = <dst_t*>scratch_words
    cdef Py_ssize_t line_rows = CACHE_LINE_BYTES // sizeof(src_t)
    cdef Py_ssize_t line_cols = CACHE_LINE_BYTES // sizeof(dst_t)
    cdef Py_ssize_t r, c, c_band, band_end, tile_rows, tile_cols, head_cols
    cdef bint unit_strides = d_cs == 1 and s_rs == 1
    head_cols = to_line_boundary(d, sizeof(dst_t), line_cols) if d_cs == 1 else line_cols
    c_band = 0
    while c_band < cols:
        band_end = min(c_band + band, cols)
        if band_end < cols and band_end > head_cols:       # end the band on a line boundary
            band_end -= (band_end - head_cols) % line_cols
        r = 0
        tile_rows = to_line_boundary(s, sizeof(src_t), line_rows) if s_rs == 1 else line_rows
        while r < rows:
            tile_rows = min(tile_rows, rows - r)
            c = c_band
            tile_cols = head_cols if c == 0 else line_cols
            while c < band_end:
                tile_cols = min(tile_cols, band_end - c)
                if unit_strides and tile_rows == line_rows and tile_cols == line_cols:
                    copy_full_line_tile(d + r * d_rs + c, d_rs, s + r + c * s_cs, s_cs, scratch)
                else:
                    copy_line_tile(d + r * d_rs + c * d_cs, d_rs, d_cs, s + r * s_rs + c * s_cs,
                                   s_rs, s_cs, tile_rows, tile_cols, scratch)
                c += tile_cols
                tile_cols = line_cols
            r += tile_rows
            tile_rows = line_rows
        c_band = band_end


cdef void copy_layout(dst_t* dst, const src_t* src, Layout* layout, bint tiled) noexcept nogil:
    cdef int inner = layout.ndim - 1
    cdef Py_ssize_t ds, ss, d_rs = 0, s_rs = 0, band = 0
    cdef OuterIter it
    if layout.ndim == 0:
        dst[0] = convert(src[0], dst)
        return
    ds = layout.strides[0][inner] // <Py_ssize_t>sizeof(dst_t)
    ss = layout.strides[1][inner] // <Py_ssize_t>sizeof(src_t)
    if tiled:
        d_rs = layout.strides[0][inner - 1] // <Py_ssize_t>sizeof(dst_t)
        s_rs = layout.strides[1][inner - 1] // <Py_ssize_t>sizeof(src_t)
        band = band_rows(magnitude(layout.strides[1][inner]), page_bytes, l2_bytes)
    start_outer(&it, layout.ndim - 2 if tiled else layout.ndim - 1, 2)
    while True:
        if tiled:
            copy_tiled_2d(<dst_t*>(<char*>dst + it.offset[0]), d_rs, ds,
                          <const src_t*>(<const char*>src + it.offset[1]), s_rs, ss,
                          layout.shape[inner - 1], layout.shape[inner], band)
        else:
            copy_row(<dst_t*>(<char*>dst + it.offset[0]), ds,
                     <const src_t*>(<const char*>src + it.offset[1]), ss, layout.shape[inner])
        if not advance_outer(&it, layout):
            break


cdef void copy_from(dst_t* dst, int src_code, const char* src, Layout* layout,
                    bint tiled) noexcept nogil:
    if src_code == F32:
        copy_layout(dst, <const float*>src, layout, tiled)
    elif src_code == F64:
        copy_layout(dst, <const double*>src, layout, tiled)
    elif src_code == I64:
        copy_layout(dst, <const int64_t*>src, layout, tiled)
    elif src_code == I32:
        copy_layout(dst, <const int32_t*>src, layout, tiled)
    elif src_code == I16:
        copy_layout(dst, <const int16_t*>src, layout, tiled)
    elif src_code == I8:
        copy_layout(dst, <const int8_t*>src, layout, tiled)
    elif src_code == U8:
        copy_layout(dst, <const uint8_t*>src, layout, tiled)
    else:
        copy_layout(dst, <const bool_byte*>src, layout, tiled)


cdef void run_copy(int dst_code, char* dst, int src_code, const char* src,
                   Layout* layout, bint tiled) noexcept nogil:
    if dst_code == F32:
        copy_from(<float*>dst, src_code, src, layout, tiled)
    elif dst_code == F64:
        copy_from(<double*>dst, src_code, src, layout, tiled)
    elif dst_code == I64:
        copy_from(<int64_t*>dst, src_code, src, layout, tiled)
    elif dst_code == I32:
        copy_from(<int32_t*>dst, src_code, src, layout, tiled)
    elif dst_code == I16:
        copy_from(<int16_t*>dst, src_code, src, layout, tiled)
    elif dst_code == I8:
        copy_from(<int8_t*>dst, src_code, src, layout, tiled)
    elif dst_code == U8:
        copy_from(<uint8_t*>dst, src_code, src, layout, tiled)
    else:
        copy_from(<bool_byte*>dst, src_code, src, layout, tiled)


cdef void copy_disjoint(cnp.ndarray dst, int dst_code, cnp.ndarray src, int src_code):
    """Copy between same-shape arrays whose memory does not overlap."""
    cdef Layout layout
    cdef bint tiled
    if not load_layout(&layout, dst, src):
        return
    order_and_coalesce(&layout)
    tiled = move_tile_dim(&layout, cnp.PyArray_ITEMSIZE(src))
    with nogil:
        run_copy(dst_code, <char*>cnp.PyArray_DATA(dst), src_code,
                 <const char*>cnp.PyArray_DATA(src), &layout, tiled)


cdef int copy_raw(int typenum, Py_ssize_t itemsize, char* dst, const Py_ssize_t* dst_strides, const char* src,
                  const Py_ssize_t* src_strides, const Py_ssize_t* shape,
                  int ndim) noexcept nogil:
    """Same-dtype copy between disjoint strided buffers, from raw pointers (strides in
    bytes): the tensor's fast paths use it without building arrays.  A same-dtype copy
    only moves bits, so any other dtype (float16, bfloat16) is copied as the integer of
    its width; -1 when there is none (nothing is copied then)."""
    cdef Layout layout
    cdef int code, dim
    if typenum == cnp.NPY_FLOAT:
        code = F32
    elif typenum == cnp.NPY_DOUBLE:
        code = F64
    elif typenum == cnp.NPY_INT64:
        code = I64
    elif typenum == cnp.NPY_INT32:
        code = I32
    elif typenum == cnp.NPY_BOOL:
        code = BOOL
    elif itemsize == 8:
        code = I64
    elif itemsize == 4:
        code = I32
    elif itemsize == 2:
        code = I16
    elif itemsize == 1:
        code = U8
    else:
        return -1
    layout.ndim = 0
    layout.nops = 2
    for dim in range(ndim):
        if shape[dim] == 0:
            return 0
        if shape[dim] == 1:
            continue
        layout.shape[layout.ndim] = shape[dim]
        layout.strides[0][layout.ndim] = dst_strides[dim]
        layout.strides[1][layout.ndim] = src_strides[dim]
        layout.ndim += 1
    order_and_coalesce(&layout)
    run_copy(code, dst, code, src, &layout, move_tile_dim(&layout, itemsize))
    return 0


cdef bint same_shape(cnp.ndarray a, cnp.ndarray b, bint and_strides):
    cdef int dim
    if cnp.PyArray_NDIM(a) != cnp.PyArray_NDIM(b):
        return False
    for dim in range(cnp.PyArray_NDIM(a)):
        if cnp.PyArray_DIM(a, dim) != cnp.PyArray_DIM(b, dim):
            return False
        if and_strides and cnp.PyArray_STRIDE(a, dim) != cnp.PyArray_STRIDE(b, dim):
            return False
    return True


def copy_(cnp.ndarray dst not None, cnp.ndarray src not None):
    """Copy `src` into `dst` element by element, casting like NumPy's unsafe cast (to bool:
    value != 0). `src` is broadcast to dst's shape; the two may share memory."""
    cdef int dst_code, src_code
    cdef Py_ssize_t dst_lo, dst_hi, src_lo, src_hi
    cdef cnp.ndarray staged
    if not cnp.PyArray_ISWRITEABLE(dst):
        raise RuntimeError("copy_(): the destination array is read-only")
    if not same_shape(dst, src, False):
        shape = (<object>dst).shape
        try:
            src = np.broadcast_to(src, shape)
        except ValueError:
            raise RuntimeError(
                f"copy_(): source of shape {list((<object>src).shape)} cannot be broadcast "
                f"to the destination's shape {list(shape)}") from None
    if dst.size == 0:
        return
    dst_code = dtype_code(dst)
    src_code = dtype_code(src)
    if src_code < 0 and dst_code >= 0 and cnp.PyArray_ITEMSIZE(src) == 2:
        # float16 and bfloat16 widen exactly to float32, whose conversion to the integer
        # types is the kernels' (through int64, as PyTorch's: -2.0 to uint8 is 254)
        src = src.astype(np.float32)
        src_code = F32
    if dst_code < 0 or src_code < 0:
        np.copyto(dst, src, casting="unsafe")
        return
    byte_extent(dst, &dst_lo, &dst_hi)
    byte_extent(src, &src_lo, &src_hi)
    if dst_lo < src_hi and src_lo < dst_hi:
        if (dst_code == src_code and cnp.PyArray_DATA(dst) == cnp.PyArray_DATA(src)
                and same_shape(dst, src, True)):
            return
        staged = np.empty((<object>dst).shape, dtype=src.dtype)
        copy_disjoint(staged, src_code, src, src_code)
        src = staged
    copy_disjoint(dst, dst_code, src, src_code)


def fill_(cnp.ndarray dst not None, value):
    """Set every element of `dst` to `value` (a Python or NumPy scalar), cast to dst's dtype."""
    cdef Layout layout
    cdef int dst_code, src_code
    cdef cnp.ndarray scalar = np.asarray(value)
    if scalar.ndim != 0:
        raise TypeError(f"fill_() expects a scalar value, got an array of shape "
                        f"{(<object>scalar).shape}")
    if not cnp.PyArray_ISWRITEABLE(dst):
        raise RuntimeError("fill_(): the destination array is read-only")
    if scalar.dtype.kind == "f":
        scalar = scalar.astype(np.float64)
    elif scalar.dtype.kind in "iu":
        scalar = scalar.astype(np.int64)
    elif scalar.dtype.kind == "c" and dst.dtype.kind == "c":
        dst[...] = scalar       # complex storage: NumPy's own fill
        return
    elif scalar.dtype.kind != "b":
        raise TypeError(f"fill_(): unsupported value {value!r} of type {type(value).__name__}")
    dst_code = dtype_code(dst)
    src_code = dtype_code(scalar)
    if dst_code < 0:
        dst[...] = scalar
        return
    if not load_layout(&layout, dst, None):
        return
    order_and_coalesce(&layout)
    with nogil:
        run_copy(dst_code, <char*>cnp.PyArray_DATA(dst), src_code,
                 <const char*>cnp.PyArray_DATA(scalar), &layout, False)


# ---------------------------------------------------------------------------------------
# Sum of all elements
# ---------------------------------------------------------------------------------------

cdef inline floating block_sum(const floating* a, Py_ssize_t n, Py_ssize_t stride) noexcept nogil:
    """Sum of n <= SUM_BLOCK elements in SUM_LANES independent accumulators, which lets the
    compiler vectorise the contiguous case; lanes are then combined pairwise."""
    cdef floating acc[SUM_LANES]
    cdef Py_ssize_t i, lane, width
    cdef Py_ssize_t n_full = n - n % SUM_LANES
    for lane in range(SUM_LANES):
        acc[lane] = 0
    if stride == 1:
        for i in range(0, n_full // SUM_LANES):
            for lane in range(SUM_LANES):
                acc[lane] += a[i * SUM_LANES + lane]
    else:
        for i in range(0, n_full // SUM_LANES):
            for lane in range(SUM_LANES):
                acc[lane] += a[(i * SUM_LANES + lane) * stride]
    for i in range(n_full, n):
        acc[i - n_full] += a[i * stride]
    width = SUM_LANES // 2
    while width > 0:
        for lane in range(width):
            acc[lane] += acc[lane + width]
        width //= 2
    return acc[0]


cdef double pairwise_sum(const floating* a, Py_ssize_t n, Py_ssize_t stride) noexcept nogil:
    """Block sums combined pairwise in double: partial[level] holds the sum of 2**level
    consecutive blocks, merged like the carries of a binary counter."""
    cdef double partial[64]
    cdef double total
    cdef Py_ssize_t block, count
    cdef Py_ssize_t n_blocks = n // SUM_BLOCK
    cdef int level
    for block in range(n_blocks):
        total = block_sum(a + block * SUM_BLOCK * stride, SUM_BLOCK, stride)
        count = block + 1
        level = 0
        while count % 2 == 0:
            total += partial[level]
            count //= 2
            level += 1
        partial[level] = total
    total = block_sum(a + n_blocks * SUM_BLOCK * stride, n % SUM_BLOCK, stride)
    count = n_blocks
    level = 0
    while count:
        if count % 2:
            total += partial[level]
        count //= 2
        level += 1
    return total


cdef uint64_t integer_row_sum(const integral* a, Py_ssize_t n, Py_ssize_t stride) noexcept nogil:
    # Unsigned accumulators: wrap-around on overflow is defined, and matches int64's.
    cdef uint64_t acc[8]
    cdef Py_ssize_t i, lane
    cdef Py_ssize_t n_full = n - n % 8
    for lane in range(8):
        acc[lane] = 0
    if stride == 1:
        for i in range(0, n_full, 8):
            for lane in range(8):
                acc[lane] += <uint64_t>a[i + lane]
    else:
        for i in range(0, n_full, 8):
            for lane in range(8):
                acc[lane] += <uint64_t>a[(i + lane) * stride]
    for i in range(n_full, n):
        acc[0] += <uint64_t>a[i * stride]
    return acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7]


cdef double float_layout_sum(const floating* a, Layout* layout) noexcept nogil:
    cdef int inner = layout.ndim - 1
    cdef double total = 0
    cdef OuterIter it
    if layout.ndim == 0:
        return a[0]
    start_outer(&it, inner, 1)
    while True:
        total += pairwise_sum(<const floating*>(<const char*>a + it.offset[0]),
                              layout.shape[inner],
                              layout.strides[0][inner] // <Py_ssize_t>sizeof(floating))
        if not advance_outer(&it, layout):
            return total


cdef int64_t integer_layout_sum(const integral* a, Layout* layout) noexcept nogil:
    cdef int inner = layout.ndim - 1
    cdef uint64_t total = 0
    cdef OuterIter it
    if layout.ndim == 0:
        return a[0]
    start_outer(&it, inner, 1)
    while True:
        total += integer_row_sum(<const integral*>(<const char*>a + it.offset[0]),
                                 layout.shape[inner],
                                 layout.strides[0][inner] // <Py_ssize_t>sizeof(integral))
        if not advance_outer(&it, layout):
            return <int64_t>total


def sum_all(cnp.ndarray a not None):
    """Sum of every element: a Python float for floating dtypes (float32 is accumulated with
    float64 block combining), a Python int (int64, wrapping) for integer and bool dtypes."""
    cdef Layout layout
    cdef int code = dtype_code(a)
    cdef const char* data = <const char*>cnp.PyArray_DATA(a)
    cdef double float_total
    cdef int64_t integer_total
    if code < 0:
        return a.sum().item()
    if not load_layout(&layout, a, None):
        return 0.0 if code in (F32, F64) else 0
    order_and_coalesce(&layout)
    with nogil:
        if code == F32:
            float_total = float_layout_sum(<const float*>data, &layout)
        elif code == F64:
            float_total = float_layout_sum(<const double*>data, &layout)
        elif code == I64:
            integer_total = integer_layout_sum(<const int64_t*>data, &layout)
        elif code == I32:
            integer_total = integer_layout_sum(<const int32_t*>data, &layout)
        elif code == I16:
            integer_total = integer_layout_sum(<const int16_t*>data, &layout)
        elif code == I8:
            integer_total = integer_layout_sum(<const int8_t*>data, &layout)
        elif code == U8:
            integer_total = integer_layout_sum(<const uint8_t*>data, &layout)
        else:
            integer_total = integer_layout_sum(<const bool_byte*>data, &layout)
    if code in (F32, F64):
        return float_total
    return integer_total


# ---------------------------------------------------------------------------------------
# Raw-pointer entry points for the tensor's fast paths (declared in kernels.pxd)
# ---------------------------------------------------------------------------------------

cdef void load_raw(Layout* layout, int operand, int ndim, const Py_ssize_t* strides,
                   Py_ssize_t itemsize) noexcept nogil:
    """Operand `operand`'s strides (in elements) into `layout`, whose shape is loaded, in
    bytes; dims of size 1 are skipped as in `load_layout`."""
    cdef int dim, kept = 0
    for dim in range(ndim):
        if layout.shape[dim] != 1:
            layout.strides[operand][kept] = strides[dim] * itemsize
            kept += 1


cdef bint load_shape(Layout* layout, int ndim, const Py_ssize_t* shape) noexcept nogil:
    """`shape` without its size-1 dims into `layout` (then `load_raw` each operand in the
    same order, before `compact_shape`); False when the shape is empty."""
    cdef int dim
    layout.ndim = ndim
    for dim in range(ndim):
        if shape[dim] == 0:
            return False
        layout.shape[dim] = shape[dim]
    return True


cdef void compact_shape(Layout* layout) noexcept nogil:
    cdef int dim, kept = 0
    for dim in range(layout.ndim):
        if layout.shape[dim] != 1:
            layout.shape[kept] = layout.shape[dim]
            kept += 1
    layout.ndim = kept


cdef double sum_raw(int typenum, const char* a, int ndim, const Py_ssize_t* shape,
                    const Py_ssize_t* strides) noexcept nogil:
    """Sum of a float32 or float64 strided buffer (strides in elements), in double.
    Safe for a tensor's own sizes and strides (see the module's docstring)."""
    cdef Layout layout
    layout.nops = 1
    if not load_shape(&layout, ndim, shape):
        return 0
    load_raw(&layout, 0, ndim, strides, 4 if typenum == cnp.NPY_FLOAT else 8)
    compact_shape(&layout)
    order_and_coalesce(&layout)
    if typenum == cnp.NPY_FLOAT:
        return float_layout_sum(<const float*>a, &layout)
    return float_layout_sum(<const double*>a, &layout)


# Sums along strided dims.  When a kept dim runs faster in the source than every reduced
# dim (x.sum(0) of a matrix, x.t().sum(1)), summing one output at a time would walk down a
# column: one element per source line, lines a row stride apart, whose reuse by the next
# column depends on the cache's sets and ways (a 16 x 4096 float32 sum(0) took 20x
# NumPy's time).  Instead whole rows are added into a band of COLUMN_BAND accumulators:
# each source element is read once, in runs of COLUMN_BAND elements (at least 32 lines,
# so one TLB entry and one prefetch stream serve many lines), and the accumulators (4 KiB
# of doubles) stay in L1 on any current CPU (L1d >= 32 KiB).  Accumulation is in double,
# row after row: float32 gets its sums in double, float64 NumPy's row-wise order.
cdef enum:
    COLUMN_BAND = 512


cdef void add_rows(double* acc, const floating* src, Py_ssize_t step, Py_ssize_t width,
                   Layout* rows) noexcept nogil:
    """acc[j] = the sum over every position of `rows` (byte strides, at least one dim) of
    src[j * step]."""
    cdef OuterIter it
    cdef const floating* row
    cdef int inner = rows.ndim - 1
    cdef Py_ssize_t i, j, row_step = rows.strides[0][inner] // <Py_ssize_t>sizeof(floating)
    for j in range(width):
        acc[j] = 0
    start_outer(&it, inner, 1)
    while True:
        if floating is float and step == 1:   # compiled for AVX2 too (bandmath.h)
            mt_add_rows_f32(acc, <const float*>(<const char*>src + it.offset[0]), row_step,
                            rows.shape[inner], width)
        else:
            for i in range(rows.shape[inner]):
                row = <const floating*>(<const char*>src + it.offset[0]) + i * row_step
                if step == 1:
                    for j in range(width):
                        acc[j] += row[j]
                else:
                    for j in range(width):
                        acc[j] += row[j * step]
        if not advance_outer(&it, rows):
            return


cdef void sum_columns(floating* out, Py_ssize_t out_step, const floating* src,
                      Py_ssize_t step, Py_ssize_t count, Layout* rows) noexcept nogil:
    """out[j * out_step] = the sum of src[j * step] over `rows`, for j < count."""
    cdef double acc[COLUMN_BAND]
    cdef Py_ssize_t start = 0, j, width
    while start < count:
        width = min(<Py_ssize_t>COLUMN_BAND, count - start)
        add_rows(acc, src + start * step, step, width, rows)
        for j in range(width):
            out[(start + j) * out_step] = <floating>acc[j]
        start += width


cdef void sum_columns_layout(int typenum, char* out, const char* src, Layout* kept,
                             Layout* rows) noexcept nogil:
    """`sum_dims_raw` along whole rows: kept's innermost dim (the source's fastest) is
    summed a band at a time, for every position of kept's other dims."""
    cdef int inner = kept.ndim - 1
    cdef Py_ssize_t itemsize = 4 if typenum == cnp.NPY_FLOAT else 8
    cdef Py_ssize_t out_step = kept.strides[0][inner] // itemsize
    cdef Py_ssize_t step = kept.strides[1][inner] // itemsize
    cdef OuterIter it
    start_outer(&it, inner, 2)
    while True:
        if typenum == cnp.NPY_FLOAT:
            sum_columns(<float*>(out + it.offset[0]), out_step,
                        <const float*>(src + it.offset[1]), step, kept.shape[inner], rows)
        else:
            sum_columns(<double*>(out + it.offset[0]), out_step,
                        <const double*>(src + it.offset[1]), step, kept.shape[inner], rows)
        if not advance_outer(&it, kept):
            return


cdef void copy_kept(floating* out, const floating* src, Layout* kept) noexcept nogil:
    """``sum_dims_raw``'s sums over nothing but dims of size 1: ``src`` copied into
    ``out`` along ``kept`` (operand 0 ``out``, 1 ``src``; strides in bytes), a typed loop
    per innermost row rather than one sum call per element."""
    cdef int inner = kept.ndim - 1
    cdef OuterIter it
    cdef Py_ssize_t i, n, out_step, src_step
    cdef floating* row
    cdef const floating* source
    if kept.ndim == 0:
        out[0] = src[0]
        return
    n = kept.shape[inner]
    out_step = kept.strides[0][inner] // <Py_ssize_t>sizeof(floating)
    src_step = kept.strides[1][inner] // <Py_ssize_t>sizeof(floating)
    start_outer(&it, inner, 2)
    while True:
        row = <floating*>(<char*>out + it.offset[0])
        source = <const floating*>(<const char*>src + it.offset[1])
        if out_step == 1 and src_step == 1:
            for i in range(n):
                row[i] = source[i]
        else:
            for i in range(n):
                row[i * out_step] = source[i * src_step]
        if not advance_outer(&it, kept):
            return


cdef void split_dims(int typenum, int ndim, const Py_ssize_t* shape, const Py_ssize_t* strides,
                     const bint* reduced, Layout* kept, Layout* inner) noexcept nogil:
    """The layouts of a sum over the dims flagged in `reduced`: `inner`, the reduced dims
    (source byte strides); `kept`, the others (operand 0 the contiguous output, 1 the
    source); dims of size 1 left out, each ordered and coalesced."""
    cdef Py_ssize_t itemsize = 4 if typenum == cnp.NPY_FLOAT else 8, out_stride = itemsize
    cdef int d
    kept.nops = 2
    inner.nops = 1
    kept.ndim = inner.ndim = 0
    for d in range(ndim - 1, -1, -1):       # innermost first, for out's contiguous strides
        if shape[d] == 1:
            continue
        if reduced[d]:
            inner.shape[inner.ndim] = shape[d]
            inner.strides[0][inner.ndim] = strides[d] * itemsize
            inner.ndim += 1
        else:
            kept.shape[kept.ndim] = shape[d]
            kept.strides[0][kept.ndim] = out_stride
            kept.strides[1][kept.ndim] = strides[d] * itemsize
            out_stride *= shape[d]
            kept.ndim += 1
    order_and_coalesce(inner)
    order_and_coalesce(kept)


cdef inline bint by_columns(Layout* kept, Layout* inner) noexcept nogil:
    """Whether a kept dim runs faster in the source than every reduced one: the sums then
    add whole rows into a band (`sum_columns_layout`)."""
    return kept.ndim and inner.ndim and magnitude(kept.strides[1][kept.ndim - 1]) < \
        magnitude(inner.strides[0][inner.ndim - 1])


cdef void short_row_sums(float* out, const float* src, Layout* kept,
                         Py_ssize_t n) noexcept nogil:
    """`sum_dims_raw` over one contiguous dim of at most SUM_BLOCK float32 elements: the
    rows along kept's innermost dim at a time (`mt_short_row_sums_f32`), for every
    position of its other dims."""
    cdef int inner = kept.ndim - 1
    cdef OuterIter it
    start_outer(&it, inner, 2)
    while True:
        mt_short_row_sums_f32(<float*>(<char*>out + it.offset[0]), kept.strides[0][inner] // 4,
                              <const float*>(<const char*>src + it.offset[1]),
                              kept.strides[1][inner] // 4, kept.shape[inner], n)
        if not advance_outer(&it, kept):
            return


cdef bint sum_in_one_pass(int typenum, int ndim, const Py_ssize_t* shape,
                          const Py_ssize_t* strides, const bint* reduced) noexcept nogil:
    """Whether `sum_dims_raw` reads the source once, in order, for these dims, which beats
    NumPy's reductions at any size: by rows that one band covers whole (the kept dims run
    fastest, contiguously, at most COLUMN_BAND elements: x.sum(0) of a (N, 64) matrix;
    5-9x NumPy at 65536 x 64 and 262144 x 16 float32), or float32 rows of at most
    SUM_BLOCK contiguous elements summed one by one (x.sum(1) of a (N, 64) matrix, 3x
    NumPy).  Other large sums are NumPy's (the C band walk is slower on wide rows)."""
    cdef Layout kept, inner
    cdef Py_ssize_t itemsize = 4 if typenum == cnp.NPY_FLOAT else 8
    split_dims(typenum, ndim, shape, strides, reduced, &kept, &inner)
    if by_columns(&kept, &inner):
        return kept.strides[1][kept.ndim - 1] == itemsize and \
            kept.shape[kept.ndim - 1] <= COLUMN_BAND
    return short_rows(typenum, &kept, &inner)


cdef inline bint short_rows(int typenum, Layout* kept, Layout* inner) noexcept nogil:
    """Whether the sum is over one contiguous dim of at most SUM_BLOCK float32 elements,
    for `short_row_sums`."""
    return typenum == cnp.NPY_FLOAT and kept.ndim and inner.ndim == 1 and \
        inner.strides[0][0] == 4 and inner.shape[0] <= SUM_BLOCK


cdef void sum_dims_raw(int typenum, const char* src, int ndim, const Py_ssize_t* shape,
                       const Py_ssize_t* strides, const bint* reduced,
                       char* out) noexcept nogil:
    """Sums of a float32/float64 strided buffer (strides in elements) over the dims flagged
    in `reduced`, into `out`: contiguous over the other dims, in their order.  No dim may
    be empty (``TensorBase.sum`` sends empty tensors elsewhere), so ``out_stride``, a
    product of kept sizes, divides the numel and fits."""
    cdef Layout kept, inner
    cdef OuterIter it
    cdef double total
    split_dims(typenum, ndim, shape, strides, reduced, &kept, &inner)
    if inner.ndim == 0:     # only dims of size 1 are reduced: the sums are a copy
        if typenum == cnp.NPY_FLOAT:
            copy_kept(<float*>out, <const float*>src, &kept)
        else:
            copy_kept(<double*>out, <const double*>src, &kept)
        return
    if by_columns(&kept, &inner):
        sum_columns_layout(typenum, out, src, &kept, &inner)
        return
    if short_rows(typenum, &kept, &inner):
        short_row_sums(<float*>out, <const float*>src, &kept, inner.shape[0])
        return
    start_outer(&it, kept.ndim, 2)
    while True:
        if typenum == cnp.NPY_FLOAT:
            total = float_layout_sum(<const float*>(src + it.offset[1]), &inner)
            (<float*>(out + it.offset[0]))[0] = <float>total
        else:
            total = float_layout_sum(<const double*>(src + it.offset[1]), &inner)
            (<double*>(out + it.offset[0]))[0] = total
        if not advance_outer(&it, &kept):
            return


cdef inline floating arith(char opcode, floating x, floating y) noexcept nogil:
    if opcode == b"+":
        return x + y
    if opcode == b"-":
        return x - y
    if opcode == b"*":
        return x * y
    return x / y


cdef void binary_row(char opcode, floating* out, const floating* a, Py_ssize_t sa,
                     const floating* b, Py_ssize_t sb, Py_ssize_t n) noexcept nogil:
    """One contiguous row of out = a `opcode` b.  The opcode is tested outside the loops
    and the usual stride patterns (both contiguous, one operand a broadcast scalar) get
    loops of their own, which the compiler vectorises."""
    cdef Py_ssize_t i
    cdef floating x, y
    if sa == 1 and sb == 1:
        if opcode == b"+":
            for i in range(n):
                out[i] = a[i] + b[i]
        elif opcode == b"-":
            for i in range(n):
                out[i] = a[i] - b[i]
        elif opcode == b"*":
            for i in range(n):
                out[i] = a[i] * b[i]
        else:
            for i in range(n):
                out[i] = a[i] / b[i]
    elif sa == 1 and sb == 0:
        y = b[0]
        if opcode == b"+":
            for i in range(n):
                out[i] = a[i] + y
        elif opcode == b"-":
            for i in range(n):
                out[i] = a[i] - y
        elif opcode == b"*":
            for i in range(n):
                out[i] = a[i] * y
        else:
            for i in range(n):
                out[i] = a[i] / y
    elif sa == 0 and sb == 1:
        x = a[0]
        if opcode == b"+":
            for i in range(n):
                out[i] = x + b[i]
        elif opcode == b"-":
            for i in range(n):
                out[i] = x - b[i]
        elif opcode == b"*":
            for i in range(n):
                out[i] = x * b[i]
        else:
            for i in range(n):
                out[i] = x / b[i]
    else:
        for i in range(n):
            out[i] = arith(opcode, a[i * sa], b[i * sb])


cdef inline void swap_operands(Layout* layout, int p, int q) noexcept nogil:
    cdef int dim
    cdef Py_ssize_t stride
    for dim in range(layout.ndim):
        stride = layout.strides[p][dim]
        layout.strides[p][dim] = layout.strides[q][dim]
        layout.strides[q][dim] = stride


cdef void outer_layout(floating* out, const floating* a, const floating* b,
                       Layout* layout) noexcept nogil:
    """out = a * b where, in the two innermost dims (m, n), ``out`` is a contiguous block,
    ``a`` a column (stride 0 along n) and ``b`` a contiguous row (stride 0 along m)."""
    cdef int inner = layout.ndim - 1
    cdef OuterIter it
    cdef Py_ssize_t m = layout.shape[inner - 1], n = layout.shape[inner]
    cdef Py_ssize_t sa = layout.strides[1][inner - 1] // <Py_ssize_t>sizeof(floating)
    start_outer(&it, inner - 1, 3)
    while True:
        outer_block(<floating*>(<char*>out + it.offset[0]),
                    <const floating*>(<const char*>a + it.offset[1]), sa,
                    <const floating*>(<const char*>b + it.offset[2]), 1, m, n)
        if not advance_outer(&it, layout):
            return


cdef void binary_layout(char opcode, floating* out, const floating* a, const floating* b,
                        Layout* layout) noexcept nogil:
    cdef int inner = layout.ndim - 1
    cdef Py_ssize_t so, sa, sb, i
    cdef OuterIter it
    cdef floating* o
    if layout.ndim == 0:
        out[0] = arith(opcode, a[0], b[0])
        return
    so = layout.strides[0][inner] // <Py_ssize_t>sizeof(floating)
    sa = layout.strides[1][inner] // <Py_ssize_t>sizeof(floating)
    sb = layout.strides[2][inner] // <Py_ssize_t>sizeof(floating)
    if opcode == b"*" and so == 1 and inner > 0 and \
            layout.strides[0][inner - 1] == layout.shape[inner] * <Py_ssize_t>sizeof(floating):
        # stacked outer products (column times row: every per-sample weight gradient) run
        # as whole (m, n) blocks, not as m short rows each with its own outer step
        if sa == 0 and sb == 1 and layout.strides[2][inner - 1] == 0:
            outer_layout(out, a, b, layout)
            return
        if sb == 0 and sa == 1 and layout.strides[1][inner - 1] == 0:
            swap_operands(layout, 1, 2)
            outer_layout(out, b, a, layout)
            return
    start_outer(&it, inner, 3)
    while True:
        o = <floating*>(<char*>out + it.offset[0])
        if so == 1:
            binary_row(opcode, o, <const floating*>(<const char*>a + it.offset[1]), sa,
                       <const floating*>(<const char*>b + it.offset[2]), sb,
                       layout.shape[inner])
        else:
            for i in range(layout.shape[inner]):
                o[i * so] = arith(opcode,
                                  (<const floating*>(<const char*>a + it.offset[1]))[i * sa],
                                  (<const floating*>(<const char*>b + it.offset[2]))[i * sb])
        if not advance_outer(&it, layout):
            return


# An operand that runs fastest along another dim than the result (a + b.t()) is read down
# its columns, one element per line, each line needed again for the next row of the
# result: with rows a power of two apart too few of those lines stay cached (a 4096²
# float32 a + b.t() took 2.9x the time of 4000²).  When the operands span more than half
# the L2, the result is made a block of outer rows at a time: such an operand's block,
# at most half the L2, is first copied densely in the result's order by the transposing
# copy (tiled for any geometry, see "Geometry of transposing copies"), then combined
# while it is still in L2.

cdef bint runs_across(Layout* layout, int op) noexcept nogil:
    """Whether operand `op` of `layout` (ordered, coalesced) runs fastest along another dim
    than the innermost, with no broadcast dim."""
    cdef int dim
    cdef Py_ssize_t inner_stride = magnitude(layout.strides[op][layout.ndim - 1])
    cdef bint across = False
    for dim in range(layout.ndim):
        if layout.strides[op][dim] == 0:
            return False
        across = across or magnitude(layout.strides[op][dim]) < inner_stride
    return across


cdef void binary_typed(char opcode, int code, char* out, const char* a, const char* b,
                       Layout* layout) noexcept nogil:
    if code == F32:
        binary_layout(opcode, <float*>out, <const float*>a, <const float*>b, layout)
    else:
        binary_layout(opcode, <double*>out, <const double*>a, <const double*>b, layout)


cdef bint binary_by_blocks(char opcode, int code, Layout* layout, char* out,
                           const char* a, const char* b, Py_ssize_t itemsize) noexcept nogil:
    """`binary_raw` a block of layout's outer dim at a time, operands that run across
    staged (see above); False (nothing done) when there is no memory for the blocks."""
    cdef Py_ssize_t slice_items = 1, rows, start, count, stride
    cdef Layout block, copy
    cdef char* staged[3]
    cdef const char* data[3]
    cdef int op, dim, inner = layout.ndim - 1
    cdef bint ok = True
    for dim in range(1, layout.ndim):
        slice_items *= layout.shape[dim]
    rows = min(layout.shape[0], max(<Py_ssize_t>1, (l2_bytes // 2) // (slice_items * itemsize)))
    data[1] = a
    data[2] = b
    for op in range(1, 3):
        staged[op] = NULL
        if runs_across(layout, op):
            staged[op] = <char*>malloc(rows * slice_items * itemsize)
            ok = ok and staged[op] != NULL
    start = 0
    while ok and start < layout.shape[0]:
        count = min(rows, layout.shape[0] - start)
        block = layout[0]
        block.shape[0] = count
        for op in range(1, 3):
            if staged[op] == NULL:
                continue
            copy.nops = 2
            copy.ndim = layout.ndim
            stride = itemsize
            for dim in range(inner, -1, -1):
                copy.shape[dim] = block.shape[dim]
                copy.strides[0][dim] = stride
                copy.strides[1][dim] = layout.strides[op][dim]
                block.strides[op][dim] = stride
                stride *= block.shape[dim]
            order_and_coalesce(&copy)
            run_copy(code, staged[op], code, data[op] + start * layout.strides[op][0], &copy,
                     move_tile_dim(&copy, itemsize))
        order_and_coalesce(&block)
        binary_typed(opcode, code, out + start * layout.strides[0][0],
                     staged[1] if staged[1] != NULL else a + start * layout.strides[1][0],
                     staged[2] if staged[2] != NULL else b + start * layout.strides[2][0],
                     &block)
        start += count
    free(staged[1])
    free(staged[2])
    return ok


cdef void binary_raw(char opcode, int typenum, int ndim, const Py_ssize_t* shape,
                     char* out, const Py_ssize_t* out_strides, const char* a,
                     const Py_ssize_t* a_strides, const char* b,
                     const Py_ssize_t* b_strides) noexcept nogil:
    """out = a `opcode` b (one of + - * /) over `shape` for float32 or float64 (`typenum`),
    strides in elements, 0 where an operand is broadcast.  `out` must not overlap a or b."""
    cdef Layout layout
    cdef Py_ssize_t itemsize = 4 if typenum == cnp.NPY_FLOAT else 8, numel = 1
    cdef int code = F32 if typenum == cnp.NPY_FLOAT else F64, dim
    layout.nops = 3
    if not load_shape(&layout, ndim, shape):
        return
    load_raw(&layout, 0, ndim, out_strides, itemsize)
    load_raw(&layout, 1, ndim, a_strides, itemsize)
    load_raw(&layout, 2, ndim, b_strides, itemsize)
    compact_shape(&layout)
    order_and_coalesce(&layout)
    for dim in range(layout.ndim):
        numel *= layout.shape[dim]
    if layout.ndim >= 2 and numel * itemsize > l2_bytes // 2 and \
            (runs_across(&layout, 1) or runs_across(&layout, 2)) and \
            binary_by_blocks(opcode, code, &layout, out, a, b, itemsize):
        return
    binary_typed(opcode, code, out, a, b, &layout)


# ---------------------------------------------------------------------------------------
# gather / scatter_add along a dim: every element of an int64 `positions` array names the
# coordinate, along `dim`, of the element it reads or writes (its other coordinates are its
# own).  Operand 0 of the layout is `positions`, operand 1 the array of positions' shape
# (gather's result, scatter's source), operand 2 the indexed array with stride 0 along dim.
# ---------------------------------------------------------------------------------------

cdef Py_ssize_t along_layout(Layout* layout, cnp.ndarray positions, cnp.ndarray data,
                             cnp.ndarray indexed, int dim) except? -1:
    """Fill `layout` for a walk over `positions`; returns `indexed`'s byte stride along
    `dim` (0 when there is nothing to walk: the layout is then empty)."""
    cdef int ndim = cnp.PyArray_NDIM(positions), d, kept = 0
    if cnp.PyArray_TYPE(positions) != cnp.NPY_INT64 or cnp.PyArray_NDIM(data) != ndim or \
            cnp.PyArray_NDIM(indexed) != ndim or not 0 <= dim < ndim or \
            cnp.PyArray_TYPE(data) != cnp.PyArray_TYPE(indexed):
        raise TypeError("along: int64 positions and same-rank arrays of one dtype expected")
    layout.nops = 3
    layout.ndim = 0
    for d in range(ndim):
        if cnp.PyArray_DIM(positions, d) == 0:
            return 0
        if cnp.PyArray_DIM(positions, d) > cnp.PyArray_DIM(data, d) or \
                (d != dim and cnp.PyArray_DIM(positions, d) > cnp.PyArray_DIM(indexed, d)):
            raise ValueError("along: positions reach past an operand")
        layout.shape[kept] = cnp.PyArray_DIM(positions, d)
        layout.strides[0][kept] = cnp.PyArray_STRIDE(positions, d)
        layout.strides[1][kept] = cnp.PyArray_STRIDE(data, d)
        layout.strides[2][kept] = 0 if d == dim else cnp.PyArray_STRIDE(indexed, d)
        kept += 1
    layout.ndim = kept
    order_and_coalesce(layout)
    return cnp.PyArray_STRIDE(indexed, dim)


cdef bint first_out_of_range(Layout* layout, const char* positions, int64_t bound,
                             int64_t* bad) noexcept nogil:
    cdef int inner = layout.ndim - 1
    cdef Py_ssize_t i, step = layout.strides[0][inner]
    cdef int64_t value
    cdef OuterIter it
    start_outer(&it, inner, 1)
    while True:
        for i in range(layout.shape[inner]):
            value = (<const int64_t*>(positions + it.offset[0] + i * step))[0]
            if value < 0 or value >= bound:
                bad[0] = value
                return True
        if not advance_outer(&it, layout):
            return False


cdef void gather_layout(Layout* layout, const char* positions, char* out, const char* src,
                        Py_ssize_t dim_stride, Py_ssize_t itemsize) noexcept nogil:
    cdef int inner = layout.ndim - 1
    cdef Py_ssize_t i
    cdef OuterIter it
    cdef const char* read
    start_outer(&it, inner, 3)
    while True:
        for i in range(layout.shape[inner]):
            read = src + it.offset[2] + i * layout.strides[2][inner] + dim_stride * \
                (<const int64_t*>(positions + it.offset[0] + i * layout.strides[0][inner]))[0]
            memcpy(out + it.offset[1] + i * layout.strides[1][inner], read, itemsize)
        if not advance_outer(&it, layout):
            return


cdef void scatter_add_layout(Layout* layout, const char* positions, const char* src,
                             char* target, Py_ssize_t dim_stride,
                             src_t* dtype_marker) noexcept nogil:
    cdef int inner = layout.ndim - 1
    cdef Py_ssize_t i
    cdef OuterIter it
    cdef src_t* write
    start_outer(&it, inner, 3)
    while True:
        for i in range(layout.shape[inner]):
            write = <src_t*>(target + it.offset[2] + i * layout.strides[2][inner] + dim_stride *
                             (<const int64_t*>(positions + it.offset[0] +
                                               i * layout.strides[0][inner]))[0])
            write[0] = write[0] + (<const src_t*>(src + it.offset[1] +
                                                  i * layout.strides[1][inner]))[0]
        if not advance_outer(&it, layout):
            return


def gather_(cnp.ndarray out not None, cnp.ndarray src not None, cnp.ndarray positions not None,
            int dim):
    """out[p] = src[p with coordinate `dim` replaced by positions[p]] for every position p
    of `positions` (int64, out's shape).  Returns the first index outside src's extent
    along `dim` (nothing is read then), else None."""
    cdef Layout layout
    cdef int64_t bad
    cdef Py_ssize_t dim_stride = along_layout(&layout, positions, out, src, dim)
    if layout.ndim == 0 and dim_stride == 0:
        return None
    if first_out_of_range(&layout, <const char*>cnp.PyArray_DATA(positions),
                          cnp.PyArray_DIM(src, dim), &bad):
        return bad
    gather_layout(&layout, <const char*>cnp.PyArray_DATA(positions),
                  <char*>cnp.PyArray_DATA(out), <const char*>cnp.PyArray_DATA(src), dim_stride,
                  cnp.PyArray_ITEMSIZE(src))
    return None


def scatter_add_(cnp.ndarray target not None, cnp.ndarray positions not None,
                 cnp.ndarray src not None, int dim):
    """target[p with coordinate `dim` replaced by positions[p]] += src[p] for every position
    p of `positions` (int64; src at least its shape), repeated positions all counting.
    Returns the first index outside target's extent along `dim` (nothing is written
    then), else None.  float32/float64/int64/int32 only (TypeError otherwise); `src` must
    not overlap `target`."""
    cdef Layout layout
    cdef int64_t bad
    cdef int code = dtype_code(target)
    cdef Py_ssize_t dim_stride = along_layout(&layout, positions, src, target, dim)
    if code not in (F32, F64, I64, I32) or not cnp.PyArray_ISWRITEABLE(target):
        raise TypeError("scatter_add_: a writeable float32, float64, int64 or int32 target "
                        "expected")
    if layout.ndim == 0 and dim_stride == 0:
        return None
    cdef const char* where = <const char*>cnp.PyArray_DATA(positions)
    cdef const char* values = <const char*>cnp.PyArray_DATA(src)
    cdef char* data = <char*>cnp.PyArray_DATA(target)
    if first_out_of_range(&layout, where, cnp.PyArray_DIM(target, dim), &bad):
        return bad
    if code == F32:
        scatter_add_layout(&layout, where, values, data, dim_stride, <float*>NULL)
    elif code == F64:
        scatter_add_layout(&layout, where, values, data, dim_stride, <double*>NULL)
    elif code == I64:
        scatter_add_layout(&layout, where, values, data, dim_stride, <int64_t*>NULL)
    else:
        scatter_add_layout(&layout, where, values, data, dim_stride, <int32_t*>NULL)
    return None


# ---------------------------------------------------------------------------------------
# softmax / log_softmax, log_softmax's backward and cumsum along one axis: each row is
# shifted by its maximum before exp, so that no exp overflows; sums are accumulated in
# double.
# ---------------------------------------------------------------------------------------

cdef extern from "<math.h>" nogil:
    double exp(double)
    double log(double)
    float expf(float)
    float logf(float)


cdef extern from "nnmath.h" nogil:
    float mt_expf(float)     # vectorisable, about 1 ulp (the layer kernels' exp)


cdef extern from "bandmath.h" nogil:
    void mt_short_row_sums_f32(float* out, Py_ssize_t so, const float* x, Py_ssize_t ss,
                               Py_ssize_t rows, Py_ssize_t n)
    void mt_add_rows_f32(double* acc, const float* x, Py_ssize_t ss, Py_ssize_t n,
                         Py_ssize_t width)
    void mt_log_softmax_backward_band_f32(float* o, Py_ssize_t so, const float* g,
                                          Py_ssize_t sg, const float* y, Py_ssize_t sy,
                                          Py_ssize_t n, Py_ssize_t width, double* total)
    void mt_softmax_band_f32(float* o, Py_ssize_t so, const float* x, Py_ssize_t ss,
                             Py_ssize_t n, Py_ssize_t width, bint log_of, float* peak,
                             double* total)


cdef inline floating exp_of(floating x) noexcept nogil:
    if floating is float:
        return mt_expf(x)
    else:
        return exp(x)


cdef void softmax_row(floating* out, Py_ssize_t so, const floating* src, Py_ssize_t ss,
                      Py_ssize_t n, bint log_of) noexcept nogil:
    cdef Py_ssize_t i
    cdef floating peak = src[0], shifted
    cdef double total = 0
    for i in range(1, n):
        if src[i * ss] > peak or src[i * ss] != src[i * ss]:   # NaN wins, as in amax
            peak = src[i * ss]
    for i in range(n):
        shifted = src[i * ss] - peak
        out[i * so] = shifted
        total += exp_of(shifted)
    if log_of:
        for i in range(n):
            out[i * so] = <floating>(out[i * so] - log(total))
    else:
        for i in range(n):
            out[i * so] = <floating>(exp_of(out[i * so]) / total)


cdef void log_softmax_backward_row(floating* out, Py_ssize_t so, const floating* grad,
                                   Py_ssize_t sg, const floating* output, Py_ssize_t sy,
                                   Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef double total = 0
    for i in range(n):
        total += grad[i * sg]
    for i in range(n):
        out[i * so] = <floating>(grad[i * sg] - exp_of(output[i * sy]) * total)


cdef void cumsum_row(floating* out, Py_ssize_t so, const floating* src, Py_ssize_t ss,
                     Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef double total = 0
    for i in range(n):
        total += src[i * ss]
        out[i * so] = <floating>total


# Along a strided axis (softmax(0) of a matrix, or of a transposed view), one line at a
# time would step down a column, one element per source line: the cliff of `sum_columns`
# (8-18x the contiguous time).  The column kernels sweep whole rows instead, a band of
# COLUMN_BAND neighbouring lines at a time, with that band's running maxima and sums in
# arrays; each pass reads every element of the band once, in runs of COLUMN_BAND.  Same
# arithmetic, in the same order per line, as the row kernels above.

cdef inline void softmax_band(floating* o, Py_ssize_t ov, Py_ssize_t so, const floating* x,
                              Py_ssize_t sv, Py_ssize_t ss, Py_ssize_t n, Py_ssize_t width,
                              bint log_of, floating* peak, double* total) noexcept nogil:
    # The loops over j are kept free of branches (selects, `|`), so that with unit steps
    # the compiler vectorises them.  softmax keeps exp(x - peak) in `o` for the last pass.
    cdef Py_ssize_t i, j
    cdef const floating* row
    cdef floating* out_row
    cdef floating value, e
    for j in range(width):
        peak[j] = x[j * sv]
        total[j] = 0
    for i in range(1, n):
        row = x + i * ss
        for j in range(width):
            value = row[j * sv]
            peak[j] = value if (value > peak[j]) | (value != value) else peak[j]  # NaN wins
    for i in range(n):
        row = x + i * ss
        out_row = o + i * so
        if log_of:
            for j in range(width):
                total[j] += exp_of(<floating>(row[j * sv] - peak[j]))
        else:
            for j in range(width):
                e = exp_of(<floating>(row[j * sv] - peak[j]))
                out_row[j * ov] = e
                total[j] += e
    for j in range(width):
        total[j] = log(total[j]) if log_of else 1 / total[j]
    for i in range(n):
        row = x + i * ss
        out_row = o + i * so
        if log_of:
            for j in range(width):
                out_row[j * ov] = <floating>((row[j * sv] - peak[j]) - total[j])
        else:
            for j in range(width):
                out_row[j * ov] = <floating>(out_row[j * ov] * total[j])


cdef inline void softmax_band_unit(floating* o, Py_ssize_t so, const floating* x,
                                   Py_ssize_t ss, Py_ssize_t n, Py_ssize_t width,
                                   bint log_of, floating* peak,
                                   double* total) noexcept nogil:
    """`softmax_band` with unit steps; float32's is also compiled for AVX2 (bandmath.h)."""
    if floating is float:
        mt_softmax_band_f32(o, so, x, ss, n, width, log_of, peak, total)
    else:
        softmax_band(o, 1, so, x, 1, ss, n, width, log_of, peak, total)


cdef inline void stage_band(floating* dense, const floating* src, Py_ssize_t sv,
                            Py_ssize_t ss, Py_ssize_t n, Py_ssize_t width) noexcept nogil:
    """Copy `n` lines of `width` neighbouring elements (`sv` apart; lines `ss` apart) into
    `dense`, line after line."""
    cdef Py_ssize_t i
    for i in range(n):
        copy_row(dense + i * width, 1, src + i * ss, sv, width)


cdef inline void unstage_band(floating* out, Py_ssize_t ov, Py_ssize_t so,
                              const floating* dense, Py_ssize_t n,
                              Py_ssize_t width) noexcept nogil:
    """`stage_band` backwards: the dense lines copied out to `out`'s layout."""
    cdef Py_ssize_t i
    for i in range(n):
        copy_row(out + i * so, ov, dense + i * width, 1, width)


cdef void softmax_columns(floating* out, Py_ssize_t ov, Py_ssize_t so, const floating* src,
                          Py_ssize_t sv, Py_ssize_t ss, Py_ssize_t n, Py_ssize_t count,
                          bint log_of, floating* scratch, Py_ssize_t scratch_band) noexcept nogil:
    """Bands of lines; with a `scratch` (room for `scratch_band` lines), each band is first
    copied into it, densely, and the result copied out (see `scratch_band_lines`)."""
    cdef floating peak[COLUMN_BAND]
    cdef double total[COLUMN_BAND]
    cdef Py_ssize_t start = 0, width
    while start < count:
        if scratch != NULL:
            width = min(scratch_band, count - start)
            stage_band(scratch, src + start * sv, sv, ss, n, width)
            softmax_band_unit(scratch, width, scratch, width, n, width, log_of, peak, total)
            unstage_band(out + start * ov, ov, so, scratch, n, width)
        else:
            width = min(<Py_ssize_t>COLUMN_BAND, count - start)
            if sv == 1 and ov == 1:     # unit steps as constants: vectorised loops
                softmax_band_unit(out + start, so, src + start, ss, n, width, log_of, peak,
                                  total)
            else:
                softmax_band(out + start * ov, ov, so, src + start * sv, sv, ss, n, width,
                             log_of, peak, total)
        start += width


cdef Py_ssize_t scratch_band_lines(Py_ssize_t n, Py_ssize_t axis_stride, Py_ssize_t count,
                                   Py_ssize_t item, int arrays) noexcept nogil:
    """How many of `count` neighbouring lines of `n` elements (`axis_stride` bytes apart
    along the axis) softmax (or log_softmax's backward, `arrays` = 2 inputs) copies into
    a scratch band at a time, or 0 to work in place.  Its passes re-read a band.  In
    place, a band that spans more than half the L2 (4096 lines of 16 KiB rows: 64 MiB for
    8 MiB of data) comes back from L3 or memory each pass, and its rows, when a power of
    two apart, share a few cache sets: 8 ways of a set hold 8 rows' pieces.  A dense copy
    of at most half the L2 (at least a line per row) has neither problem.  A band that is
    dense already (its rows no further apart than twice its width, say 65536 x 64) gains
    nothing from the copy."""
    cdef Py_ssize_t line_items = CACHE_LINE_BYTES // item, band
    if n * magnitude(axis_stride) <= l2_bytes // 2 or \
            magnitude(axis_stride) <= 2 * min(<Py_ssize_t>COLUMN_BAND, count) * item:
        return 0
    band = (l2_bytes // 2) // (n * item * arrays)
    band -= band % line_items
    return min(<Py_ssize_t>COLUMN_BAND, max(line_items, band))


cdef inline void log_softmax_backward_band(floating* o, Py_ssize_t ov, Py_ssize_t so,
                                           const floating* g, Py_ssize_t gv, Py_ssize_t sg,
                                           const floating* y, Py_ssize_t yv, Py_ssize_t sy,
                                           Py_ssize_t n, Py_ssize_t width,
                                           double* total) noexcept nogil:
    cdef Py_ssize_t i, j
    for j in range(width):
        total[j] = 0
    for i in range(n):
        for j in range(width):
            total[j] += g[i * sg + j * gv]
    for i in range(n):
        for j in range(width):
            o[i * so + j * ov] = <floating>(g[i * sg + j * gv] -
                                            exp_of(y[i * sy + j * yv]) * total[j])


cdef inline void log_softmax_backward_band_unit(floating* o, Py_ssize_t so,
                                                const floating* g, Py_ssize_t sg,
                                                const floating* y, Py_ssize_t sy,
                                                Py_ssize_t n, Py_ssize_t width,
                                                double* total) noexcept nogil:
    """`log_softmax_backward_band` with unit steps; float32's is also compiled for AVX2
    (bandmath.h)."""
    if floating is float:
        mt_log_softmax_backward_band_f32(o, so, g, sg, y, sy, n, width, total)
    else:
        log_softmax_backward_band(o, 1, so, g, 1, sg, y, 1, sy, n, width, total)


cdef void log_softmax_backward_columns(floating* out, Py_ssize_t ov, Py_ssize_t so,
                                       const floating* grad, Py_ssize_t gv, Py_ssize_t sg,
                                       const floating* output, Py_ssize_t yv, Py_ssize_t sy,
                                       Py_ssize_t n, Py_ssize_t count, floating* scratch,
                                       Py_ssize_t scratch_band) noexcept nogil:
    """Bands of lines; with a `scratch` (room for `scratch_band` lines of grad and as many
    of output), each band of both is first copied into it, as in `softmax_columns`."""
    cdef double total[COLUMN_BAND]
    cdef Py_ssize_t start = 0, width
    cdef floating* staged_y
    while start < count:
        if scratch != NULL:
            width = min(scratch_band, count - start)
            staged_y = scratch + n * width
            stage_band(scratch, grad + start * gv, gv, sg, n, width)
            stage_band(staged_y, output + start * yv, yv, sy, n, width)
            log_softmax_backward_band_unit(scratch, width, scratch, width, staged_y, width, n,
                                           width, total)
            unstage_band(out + start * ov, ov, so, scratch, n, width)
        else:
            width = min(<Py_ssize_t>COLUMN_BAND, count - start)
            if ov == 1 and gv == 1 and yv == 1:
                log_softmax_backward_band_unit(out + start, so, grad + start, sg,
                                               output + start, sy, n, width, total)
            else:
                log_softmax_backward_band(out + start * ov, ov, so, grad + start * gv, gv, sg,
                                          output + start * yv, yv, sy, n, width, total)
        start += width


cdef inline void cumsum_band(floating* o, Py_ssize_t ov, Py_ssize_t so, const floating* x,
                             Py_ssize_t sv, Py_ssize_t ss, Py_ssize_t n, Py_ssize_t width,
                             double* total) noexcept nogil:
    cdef Py_ssize_t i, j
    for j in range(width):
        total[j] = 0
    for i in range(n):
        for j in range(width):
            total[j] += x[i * ss + j * sv]
            o[i * so + j * ov] = <floating>total[j]


cdef void cumsum_columns(floating* out, Py_ssize_t ov, Py_ssize_t so, const floating* src,
                         Py_ssize_t sv, Py_ssize_t ss, Py_ssize_t n,
                         Py_ssize_t count) noexcept nogil:
    cdef double total[COLUMN_BAND]
    cdef Py_ssize_t start = 0, width
    while start < count:
        width = min(<Py_ssize_t>COLUMN_BAND, count - start)
        if sv == 1 and ov == 1:
            cumsum_band(out + start, 1, so, src + start, 1, ss, n, width, total)
        else:
            cumsum_band(out + start * ov, ov, so, src + start * sv, sv, ss, n, width, total)
        start += width


cdef enum AlongKind:
    SOFTMAX, LOG_SOFTMAX, LOG_SOFTMAX_BACKWARD, CUMSUM


cdef void along_lines(int kind, floating* out, Py_ssize_t ov, Py_ssize_t so,
                      const floating* x, Py_ssize_t xv, Py_ssize_t sx, const floating* y,
                      Py_ssize_t yv, Py_ssize_t sy, Py_ssize_t n, Py_ssize_t count,
                      floating* scratch, Py_ssize_t scratch_band) noexcept nogil:
    """`count` lines of `n` elements along the axis (steps so, sx, sy), neighbouring lines
    ov, xv, yv apart; `y` is log_softmax's output for its backward, else unused; softmax
    goes through `scratch` when not NULL."""
    if count == 1:
        if kind == CUMSUM:
            cumsum_row(out, so, x, sx, n)
        elif kind == LOG_SOFTMAX_BACKWARD:
            log_softmax_backward_row(out, so, x, sx, y, sy, n)
        else:
            softmax_row(out, so, x, sx, n, kind == LOG_SOFTMAX)
    elif kind == CUMSUM:
        cumsum_columns(out, ov, so, x, xv, sx, n, count)
    elif kind == LOG_SOFTMAX_BACKWARD:
        log_softmax_backward_columns(out, ov, so, x, xv, sx, y, yv, sy, n, count, scratch,
                                     scratch_band)
    else:
        softmax_columns(out, ov, so, x, xv, sx, n, count, kind == LOG_SOFTMAX, scratch,
                        scratch_band)


cdef bint fastest_dim_last(Layout* layout, Py_ssize_t axis_stride) noexcept nogil:
    """Move the dim along which operand 1 runs fastest to the end of `layout`; True when
    it runs faster than along the axis (`axis_stride` bytes), so lines go by bands."""
    cdef int dim, best = 0
    if layout.ndim == 0:
        return False
    for dim in range(1, layout.ndim):
        if magnitude(layout.strides[1][dim]) < magnitude(layout.strides[1][best]):
            best = dim
    if magnitude(layout.strides[1][best]) >= magnitude(axis_stride):
        return False
    while best < layout.ndim - 1:
        swap_dims(layout, best, best + 1)
        best += 1
    return True


cdef void run_along(int kind, int code, Layout* layout, bint bands, char* out, const char* x,
                    const char* y, const Py_ssize_t* axis_strides, Py_ssize_t n,
                    Py_ssize_t item, char* scratch, Py_ssize_t scratch_band) noexcept nogil:
    """Every line along the axis (strides in bytes: `axis_strides` for out, x, y), the
    other dims in `layout` (operands out, x, y); by `bands` of neighbouring lines along
    layout's last dim (`fastest_dim_last`) or line by line."""
    cdef int last = layout.ndim - 1
    cdef Py_ssize_t count = layout.shape[last] if bands else 1
    cdef Py_ssize_t ov = layout.strides[0][last] // item if bands else 0
    cdef Py_ssize_t xv = layout.strides[1][last] // item if bands else 0
    cdef Py_ssize_t yv = layout.strides[2][last] // item if bands and layout.nops == 3 else 0
    cdef Py_ssize_t so = axis_strides[0] // item, sx = axis_strides[1] // item
    cdef Py_ssize_t sy = axis_strides[2] // item
    cdef OuterIter it
    start_outer(&it, last if bands else layout.ndim, layout.nops)
    while True:
        if code == F32:
            along_lines(kind, <float*>(out + it.offset[0]), ov, so,
                        <const float*>(x + it.offset[1]), xv, sx,
                        <const float*>(y + it.offset[2]), yv, sy, n, count,
                        <float*>scratch, scratch_band)
        else:
            along_lines(kind, <double*>(out + it.offset[0]), ov, so,
                        <const double*>(x + it.offset[1]), xv, sx,
                        <const double*>(y + it.offset[2]), yv, sy, n, count,
                        <double*>scratch, scratch_band)
        if not advance_outer(&it, layout):
            return


cdef bint rows_layout(Layout* layout, cnp.ndarray first, cnp.ndarray second,
                      cnp.ndarray third, int axis):
    """`layout` over every dim but `axis` of up to three same-shape arrays (`third` may be
    None); False when there is nothing to compute."""
    cdef int d
    layout.nops = 2 if third is None else 3
    layout.ndim = 0
    for d in range(cnp.PyArray_NDIM(first)):
        if cnp.PyArray_DIM(first, d) == 0:
            return False
        if d != axis and cnp.PyArray_DIM(first, d) != 1:
            layout.shape[layout.ndim] = cnp.PyArray_DIM(first, d)
            layout.strides[0][layout.ndim] = cnp.PyArray_STRIDE(first, d)
            layout.strides[1][layout.ndim] = cnp.PyArray_STRIDE(second, d)
            if third is not None:
                layout.strides[2][layout.ndim] = cnp.PyArray_STRIDE(third, d)
            layout.ndim += 1
    return True


cdef bint crosses(cnp.ndarray out, cnp.ndarray x, int axis):
    """Whether `x` runs fastest along some dim but `axis` and `out` along `axis` (a
    transposing pass: x.t().softmax(1) into a contiguous result)."""
    cdef int d, fastest = -1
    for d in range(cnp.PyArray_NDIM(x)):
        if d != axis and cnp.PyArray_DIM(x, d) > 1 and (fastest < 0 or magnitude(
                cnp.PyArray_STRIDE(x, d)) < magnitude(cnp.PyArray_STRIDE(x, fastest))):
            fastest = d
    return fastest >= 0 and \
        magnitude(cnp.PyArray_STRIDE(x, fastest)) < magnitude(cnp.PyArray_STRIDE(x, axis)) and \
        magnitude(cnp.PyArray_STRIDE(out, axis)) < magnitude(cnp.PyArray_STRIDE(out, fastest))


cdef void along_axis(int kind, cnp.ndarray out, cnp.ndarray x, cnp.ndarray y, int axis):
    """`run_along` over arrays of one shape (`y` may be None), checked by the caller.  A
    transposing pass writes into an array of x's dim order, then one transposing copy
    (tiled for any geometry, see "Geometry of transposing copies") moves it to `out`:
    bands of lines would otherwise write one element per line of `out`."""
    cdef Layout layout
    cdef Py_ssize_t axis_strides[3]
    if crosses(out, x, axis):
        staged = np.empty_like(x, order="K")
        along_axis(kind, staged, x, y, axis)
        copy_disjoint(out, dtype_code(out), staged, dtype_code(staged))
        return
    if not rows_layout(&layout, out, x, y, axis):
        return
    axis_strides[0] = cnp.PyArray_STRIDE(out, axis)
    axis_strides[1] = cnp.PyArray_STRIDE(x, axis)
    axis_strides[2] = 0 if y is None else cnp.PyArray_STRIDE(y, axis)
    cdef char* o = <char*>cnp.PyArray_DATA(out)
    cdef const char* xd = <const char*>cnp.PyArray_DATA(x)
    cdef const char* yd = NULL if y is None else <const char*>cnp.PyArray_DATA(y)
    cdef int code = dtype_code(x)
    cdef Py_ssize_t n = cnp.PyArray_DIM(x, axis), item = cnp.PyArray_ITEMSIZE(x)
    cdef bint bands = fastest_dim_last(&layout, axis_strides[1])
    cdef Py_ssize_t scratch_band = 0
    cdef char* scratch = NULL
    cdef int arrays = 2 if kind == LOG_SOFTMAX_BACKWARD else 1
    if bands and kind != CUMSUM:     # cumsum makes a single pass
        scratch_band = scratch_band_lines(n, axis_strides[1], layout.shape[layout.ndim - 1],
                                          item, arrays)
    if scratch_band:
        scratch_array = np.empty(arrays * scratch_band * n, x.dtype)
        scratch = <char*>cnp.PyArray_DATA(scratch_array)
    with nogil:
        run_along(kind, code, &layout, bands, o, xd, yd, axis_strides, n, item, scratch,
                  scratch_band)


cdef bint same_float_arrays(cnp.ndarray out, cnp.ndarray first, cnp.ndarray second, int axis):
    """Whether the arrays suit the along-axis kernels: float32/float64 of one shape and
    dtype (`second` may be None), a writeable `out`, `axis` one of their dims."""
    cdef int code = dtype_code(first)
    return (code == F32 or code == F64) and dtype_code(out) == code and \
        same_shape(out, first, False) and 0 <= axis < cnp.PyArray_NDIM(first) and \
        cnp.PyArray_ISWRITEABLE(out) and \
        (second is None or (dtype_code(second) == code and same_shape(out, second, False)))


def log_softmax_backward_(cnp.ndarray out not None, cnp.ndarray grad not None,
                          cnp.ndarray output not None, int axis):
    """out = grad - exp(output) * (grad summed along `axis`): the gradient of log_softmax
    (`output`) for the incoming `grad`; float32/float64 arrays of one shape and dtype,
    `out` not overlapping the others."""
    if not same_float_arrays(out, grad, output, axis):
        raise TypeError("log_softmax_backward_: float32/float64 arrays of one shape and dtype "
                        "expected")
    along_axis(LOG_SOFTMAX_BACKWARD, out, grad, output, axis)


def softmax_(cnp.ndarray out not None, cnp.ndarray src not None, int axis, bint log_of):
    """out = softmax (or log_softmax) of src along `axis`: float32/float64 arrays of one
    shape and dtype that do not overlap."""
    if not same_float_arrays(out, src, None, axis):
        raise TypeError("softmax_: float32/float64 arrays of one shape and dtype expected")
    along_axis(LOG_SOFTMAX if log_of else SOFTMAX, out, src, None, axis)


def cumsum_(cnp.ndarray out not None, cnp.ndarray src not None, int axis):
    """out = the inclusive cumulative sum of src along `axis`, accumulated in double (as
    PyTorch's CPU kernel), each element rounded once: float32/float64 arrays of one shape
    and dtype that do not overlap."""
    if not same_float_arrays(out, src, None, axis):
        raise TypeError("cumsum_: float32/float64 arrays of one shape and dtype expected")
    along_axis(CUMSUM, out, src, None, axis)


# ---------------------------------------------------------------------------------------
# nll_loss over rows: row n's loss is minus its target class's log-probability times that
# class's weight; a target equal to ignore_index weighs 0.
# ---------------------------------------------------------------------------------------

cdef bint row_weights(const int64_t* targets, Py_ssize_t t_stride, Py_ssize_t n,
                      const floating* weight, Py_ssize_t w_stride, int64_t ignore_index,
                      Py_ssize_t classes, floating* weights, int64_t* bad) noexcept nogil:
    """Each row's target weight into `weights` (0 where ignored); False (and the target in
    `bad`) at the first target outside [0, classes)."""
    cdef Py_ssize_t i
    cdef int64_t target
    for i in range(n):
        target = targets[i * t_stride]
        if target == ignore_index:
            weights[i] = 0
        elif target < 0 or target >= classes:
            bad[0] = target
            return False
        else:
            weights[i] = weight[target * w_stride] if weight != NULL else 1
    return True


cdef void nll_rows(const floating* rows, Py_ssize_t r_stride, Py_ssize_t c_stride,
                   const int64_t* targets, Py_ssize_t t_stride, const floating* weights,
                   Py_ssize_t n, floating* losses) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        losses[i] = 0 if weights[i] == 0 else \
            -rows[i * r_stride + targets[i * t_stride] * c_stride] * weights[i]


cdef void nll_rows_backward(floating* grad_rows, Py_ssize_t classes, const int64_t* targets,
                            Py_ssize_t t_stride, const floating* weights,
                            const floating* grads, Py_ssize_t g_stride, double scale,
                            Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if weights[i] != 0:
            grad_rows[i * classes + targets[i * t_stride]] = \
                <floating>(-grads[i * g_stride] * weights[i] * scale)


cdef inline double _reciprocal(double total):
    # all weights 0 (every target ignored): nothing is written, as in PyTorch
    return 1 / total if total != 0 else float("inf")


cdef object weights_of_rows(cnp.ndarray targets, object weight, int64_t ignore_index,
                            Py_ssize_t classes, cnp.ndarray weights, int code):
    """Each row's target weight into `weights` (see `row_weights`); the first target
    outside [0, classes), or None."""
    cdef int64_t bad
    cdef bint ok
    cdef Py_ssize_t item = cnp.PyArray_ITEMSIZE(weights)
    cdef const int64_t* t = <const int64_t*>cnp.PyArray_DATA(targets)
    cdef Py_ssize_t ts = cnp.PyArray_STRIDE(targets, 0) // 8
    cdef Py_ssize_t ws = 0 if weight is None else \
        cnp.PyArray_STRIDE(<cnp.ndarray>weight, 0) // item
    cdef const char* w = NULL if weight is None else \
        <const char*>cnp.PyArray_DATA(<cnp.ndarray>weight)
    if code == F32:
        ok = row_weights(t, ts, cnp.PyArray_DIM(targets, 0), <const float*>w, ws,
                         ignore_index, classes, <float*>cnp.PyArray_DATA(weights), &bad)
    else:
        ok = row_weights(t, ts, cnp.PyArray_DIM(targets, 0), <const double*>w, ws,
                         ignore_index, classes, <double*>cnp.PyArray_DATA(weights), &bad)
    return None if ok else bad


cdef object check_nll_arrays(cnp.ndarray values, cnp.ndarray targets, object weight,
                             cnp.ndarray weights):
    cdef int code = dtype_code(values)
    if (code != F32 and code != F64) or cnp.PyArray_TYPE(targets) != cnp.NPY_INT64 or \
            cnp.PyArray_NDIM(targets) != 1 or dtype_code(weights) != code or \
            not cnp.PyArray_IS_C_CONTIGUOUS(weights) or \
            cnp.PyArray_DIM(weights, 0) != cnp.PyArray_DIM(targets, 0) or \
            (weight is not None and (dtype_code(weight) != code or
                                     cnp.PyArray_NDIM(<cnp.ndarray>weight) != 1)):
        raise TypeError("nll: float32/float64 values, weights of their dtype and int64 "
                        "targets expected")
    return code


def nll_forward_(cnp.ndarray rows not None, cnp.ndarray targets not None, weight,
                 int64_t ignore_index, cnp.ndarray losses not None,
                 cnp.ndarray weights not None):
    """losses[n] = -rows[n, targets[n]] * w[n] and weights[n] = w[n], the target's class
    weight (1 without `weight`; 0, and a loss of 0, for ignore_index).  `rows` is (N, C),
    `losses` and `weights` contiguous (N,).  Returns the first target outside [0, C)
    (nothing is read then), else None."""
    cdef int code = check_nll_arrays(rows, targets, weight, weights)
    cdef Py_ssize_t n = cnp.PyArray_DIM(targets, 0), classes = cnp.PyArray_DIM(rows, 1)
    cdef Py_ssize_t item = cnp.PyArray_ITEMSIZE(rows)
    if cnp.PyArray_NDIM(rows) != 2 or cnp.PyArray_DIM(rows, 0) != n or \
            dtype_code(losses) != code or not cnp.PyArray_IS_C_CONTIGUOUS(losses) or \
            cnp.PyArray_SIZE(losses) != n:
        raise TypeError("nll_forward_: (N, C) rows and contiguous (N,) outputs expected")
    cdef const int64_t* t = <const int64_t*>cnp.PyArray_DATA(targets)
    cdef Py_ssize_t ts = cnp.PyArray_STRIDE(targets, 0) // 8
    cdef Py_ssize_t rs = cnp.PyArray_STRIDE(rows, 0) // item
    cdef Py_ssize_t cs = cnp.PyArray_STRIDE(rows, 1) // item
    bad = weights_of_rows(targets, weight, ignore_index, classes, weights, code)
    if bad is not None:
        return bad
    if code == F32:
        nll_rows(<const float*>cnp.PyArray_DATA(rows), rs, cs, t, ts,
                 <const float*>cnp.PyArray_DATA(weights), n, <float*>cnp.PyArray_DATA(losses))
    else:
        nll_rows(<const double*>cnp.PyArray_DATA(rows), rs, cs, t, ts,
                 <const double*>cnp.PyArray_DATA(weights), n,
                 <double*>cnp.PyArray_DATA(losses))
    return None


def holds_int64(cnp.ndarray values not None, int64_t value):
    """Whether the int64 array `values` holds `value` (whether a target is ignored): one
    scan, where `value in values` makes a comparison array and reduces it."""
    if cnp.PyArray_TYPE(values) != cnp.NPY_INT64:
        raise TypeError("holds_int64: an int64 array expected")
    if cnp.PyArray_NDIM(values) != 1:
        values = values.reshape(-1)
    cdef const int64_t* p = <const int64_t*>cnp.PyArray_DATA(values)
    cdef Py_ssize_t n = cnp.PyArray_DIM(values, 0), step = cnp.PyArray_STRIDE(values, 0) // 8, i
    for i in range(n):
        if p[i * step] == value:
            return True
    return False


def nll_backward_(cnp.ndarray grad_rows not None, cnp.ndarray targets not None, weight,
                  int64_t ignore_index, cnp.ndarray grads not None, bint mean):
    """grad_rows[n, targets[n]] = -grads[n] * w[n] (over the total weight when `mean`) and 0
    elsewhere, into a contiguous (N, C) `grad_rows`; `grads` is (N,), or (1,) for a reduced
    loss.  Returns the first target outside [0, C) (nothing is written then), else None."""
    cdef Py_ssize_t n = cnp.PyArray_DIM(targets, 0), classes = cnp.PyArray_DIM(grad_rows, 1)
    cdef Py_ssize_t item = cnp.PyArray_ITEMSIZE(grad_rows), gs
    cdef double total = 0
    cdef cnp.ndarray weights = np.empty(n, grad_rows.dtype)
    cdef int code = check_nll_arrays(grad_rows, targets, weight, weights)
    if cnp.PyArray_NDIM(grad_rows) != 2 or cnp.PyArray_DIM(grad_rows, 0) != n or \
            not cnp.PyArray_IS_C_CONTIGUOUS(grad_rows) or dtype_code(grads) != code or \
            cnp.PyArray_NDIM(grads) != 1 or cnp.PyArray_DIM(grads, 0) not in (n, 1):
        raise TypeError("nll_backward_: contiguous (N, C) gradient rows and (N,) or (1,) "
                        "grads expected")
    gs = cnp.PyArray_STRIDE(grads, 0) // item if cnp.PyArray_DIM(grads, 0) == n else 0
    cdef const int64_t* t = <const int64_t*>cnp.PyArray_DATA(targets)
    cdef Py_ssize_t ts = cnp.PyArray_STRIDE(targets, 0) // 8
    bad = weights_of_rows(targets, weight, ignore_index, classes, weights, code)
    if bad is not None:
        return bad
    if mean:
        total = weights.sum()
    memset(cnp.PyArray_DATA(grad_rows), 0, n * classes * item)
    if code == F32:
        nll_rows_backward(<float*>cnp.PyArray_DATA(grad_rows), classes, t, ts,
                          <const float*>cnp.PyArray_DATA(weights),
                          <const float*>cnp.PyArray_DATA(grads), gs,
                          _reciprocal(total) if mean else 1, n)
    else:
        nll_rows_backward(<double*>cnp.PyArray_DATA(grad_rows), classes, t, ts,
                          <const double*>cnp.PyArray_DATA(weights),
                          <const double*>cnp.PyArray_DATA(grads), gs,
                          _reciprocal(total) if mean else 1, n)
    return None


# ---------------------------------------------------------------------------------------
# Stacked outer products, (..., m, 1) @ (..., 1, n): every per-sample weight gradient of a
# linear layer.  BLAS is slow on these and einsum costs microseconds to set up.
#
# An operand whose vectors are strided (a view of a (m, batch) array: per-sample vectors
# down its columns) would be read m (or n) times per block, one element per line, lines a
# row stride apart: a cliff at power-of-two strides (6x NumPy at 4096 x 64 x 64), as in
# the transposing copies.  Such an operand is staged instead: the vectors of OUTER_CHUNK
# consecutive samples (one cache line's worth along the batch dim) are copied into a
# contiguous buffer, reading each source line once, then the blocks read the buffer.
# ---------------------------------------------------------------------------------------

cdef enum:
    OUTER_CHUNK_BYTES = CACHE_LINE_BYTES


cdef void outer_block(floating* out, const floating* a, Py_ssize_t sa, const floating* b,
                      Py_ssize_t sb, Py_ssize_t m, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i, j
    cdef floating ai
    for i in range(m):
        ai = a[i * sa]
        if sb == 1:
            for j in range(n):
                out[i * n + j] = ai * b[j]
        else:
            for j in range(n):
                out[i * n + j] = ai * b[j * sb]


cdef void stage_vectors(floating* buffer, const floating* src, Py_ssize_t sample_step,
                        Py_ssize_t step, Py_ssize_t samples, Py_ssize_t length) noexcept nogil:
    """buffer[k * length + i] = src[k * sample_step + i * step], read along whichever of the
    two source steps is shorter (along its lines)."""
    cdef Py_ssize_t k, i
    if magnitude(sample_step) < magnitude(step):
        for i in range(length):
            for k in range(samples):
                buffer[k * length + i] = src[k * sample_step + i * step]
    else:
        for k in range(samples):
            for i in range(length):
                buffer[k * length + i] = src[k * sample_step + i * step]


cdef void outer_run(floating* out, Py_ssize_t out_step, const floating* a,
                    Py_ssize_t a_step, Py_ssize_t sa, const floating* b, Py_ssize_t b_step,
                    Py_ssize_t sb, Py_ssize_t samples, Py_ssize_t m, Py_ssize_t n,
                    floating* staged_a, floating* staged_b) noexcept nogil:
    """`samples` blocks along one batch dim (steps in elements), strided vectors staged
    (`staged_a`, `staged_b`: room for a chunk of vectors) a chunk at a time."""
    cdef Py_ssize_t chunk = OUTER_CHUNK_BYTES // sizeof(floating)
    cdef Py_ssize_t start = 0, k, count
    while start < samples:
        count = min(chunk, samples - start)
        if sa != 1:
            stage_vectors(staged_a, a + start * a_step, a_step, sa, count, m)
        if sb != 1:
            stage_vectors(staged_b, b + start * b_step, b_step, sb, count, n)
        for k in range(count):
            outer_block(out + (start + k) * out_step,
                        staged_a + k * m if sa != 1 else a + (start + k) * a_step, 1,
                        staged_b + k * n if sb != 1 else b + (start + k) * b_step, 1, m, n)
        start += count


def outer_products_(cnp.ndarray out not None, cnp.ndarray a not None, cnp.ndarray b not None):
    """out[..., i, j] = a[..., i, 0] * b[..., 0, j] for float32/float64 arrays of one dtype:
    `out` contiguous (..., m, n); `a` (..., m, 1) and `b` (..., 1, n) with the same number
    of dims, their batch dims of out's size or 1 (broadcast)."""
    cdef Layout layout
    cdef OuterIter it
    cdef int ndim = cnp.PyArray_NDIM(out), d, code = dtype_code(out)
    cdef Py_ssize_t m, n, size
    if (code != F32 and code != F64) or dtype_code(a) != code or dtype_code(b) != code or \
            ndim < 2 or cnp.PyArray_NDIM(a) != ndim or cnp.PyArray_NDIM(b) != ndim or \
            not cnp.PyArray_IS_C_CONTIGUOUS(out) or not cnp.PyArray_ISWRITEABLE(out):
        raise TypeError("outer_products_: float32/float64 arrays of one rank expected")
    m, n = cnp.PyArray_DIM(out, ndim - 2), cnp.PyArray_DIM(out, ndim - 1)
    if cnp.PyArray_DIM(a, ndim - 2) != m or cnp.PyArray_DIM(a, ndim - 1) != 1 or \
            cnp.PyArray_DIM(b, ndim - 2) != 1 or cnp.PyArray_DIM(b, ndim - 1) != n:
        raise ValueError("outer_products_: (..., m, 1) and (..., 1, n) operands expected")
    layout.nops = 3
    layout.ndim = 0
    for d in range(ndim - 2):
        size = cnp.PyArray_DIM(out, d)
        if size == 0:
            return
        if (cnp.PyArray_DIM(a, d) != size and cnp.PyArray_DIM(a, d) != 1) or \
                (cnp.PyArray_DIM(b, d) != size and cnp.PyArray_DIM(b, d) != 1):
            raise ValueError("outer_products_: batch dims do not broadcast")
        if size != 1:
            layout.shape[layout.ndim] = size
            layout.strides[0][layout.ndim] = cnp.PyArray_STRIDE(out, d)
            layout.strides[1][layout.ndim] = \
                cnp.PyArray_STRIDE(a, d) if cnp.PyArray_DIM(a, d) != 1 else 0
            layout.strides[2][layout.ndim] = \
                cnp.PyArray_STRIDE(b, d) if cnp.PyArray_DIM(b, d) != 1 else 0
            layout.ndim += 1
    if m == 0 or n == 0:
        return
    cdef char* o = <char*>cnp.PyArray_DATA(out)
    cdef const char* x = <const char*>cnp.PyArray_DATA(a)
    cdef const char* y = <const char*>cnp.PyArray_DATA(b)
    cdef Py_ssize_t item = cnp.PyArray_ITEMSIZE(out)
    # a vector of one element is contiguous whatever its stride
    cdef Py_ssize_t sa = cnp.PyArray_STRIDE(a, ndim - 2) // item if m > 1 else 1
    cdef Py_ssize_t sb = cnp.PyArray_STRIDE(b, ndim - 1) // item if n > 1 else 1
    # the innermost batch dim is walked by outer_run (a single block when there is none)
    cdef int inner = layout.ndim - 1
    cdef Py_ssize_t samples = layout.shape[inner] if layout.ndim else 1
    cdef Py_ssize_t o_step = layout.strides[0][inner] // item if layout.ndim else 0
    cdef Py_ssize_t a_step = layout.strides[1][inner] // item if layout.ndim else 0
    cdef Py_ssize_t b_step = layout.strides[2][inner] // item if layout.ndim else 0
    cdef Py_ssize_t chunk = OUTER_CHUNK_BYTES // item
    cdef Py_ssize_t staged = chunk * ((m if sa != 1 else 0) + (n if sb != 1 else 0))
    cdef char* staged_a = NULL
    cdef char* staged_b = NULL
    if staged:
        staging = np.empty(staged, out.dtype)
        staged_a = <char*>cnp.PyArray_DATA(staging)
        staged_b = staged_a + (chunk * m * item if sa != 1 else 0)
    start_outer(&it, max(inner, 0), 3)
    with nogil:
        while True:
            if code == F32:
                outer_run(<float*>(o + it.offset[0]), o_step,
                          <const float*>(x + it.offset[1]), a_step, sa,
                          <const float*>(y + it.offset[2]), b_step, sb, samples, m, n,
                          <float*>staged_a, <float*>staged_b)
            else:
                outer_run(<double*>(o + it.offset[0]), o_step,
                          <const double*>(x + it.offset[1]), a_step, sa,
                          <const double*>(y + it.offset[2]), b_step, sb, samples, m, n,
                          <double*>staged_a, <double*>staged_b)
            if not advance_outer(&it, &layout):
                break


# ---------------------------------------------------------------------------------------
# Small matrix products: below a few thousand multiply-adds a plain loop beats the cost of
# calling BLAS through NumPy.
# ---------------------------------------------------------------------------------------

cdef void matmul_small(floating* out, const floating* a, Py_ssize_t a_rs, Py_ssize_t a_cs,
                       const floating* b, Py_ssize_t b_rs, Py_ssize_t b_cs,
                       Py_ssize_t m, Py_ssize_t n, Py_ssize_t k) noexcept nogil:
    # Safe: i, j, p stay below the operands' own sizes, so every index is an element of a
    # tensor; the caller (``TensorBase.__matmul__``) sends only m * n * k <= 4096 here,
    # checking that product for overflow, and made ``out`` with m * n checked.
    cdef Py_ssize_t i, j, p
    cdef floating acc
    for i in range(m):
        for j in range(n):
            acc = 0
            for p in range(k):
                acc = acc + a[i * a_rs + p * a_cs] * b[p * b_rs + j * b_cs]
            out[i * n + j] = acc


# ---------------------------------------------------------------------------------------
# The calling thread's floating-point mode: flushing denormals (x86's MXCSR register, which
# every SSE/AVX loop of this thread reads, NumPy's and BLAS's included).
# ---------------------------------------------------------------------------------------

cdef extern from *:
    """
    #if defined(__x86_64__) || defined(_M_X64)
    #include <xmmintrin.h>
    /* FTZ (bit 15) flushes denormal results to zero, DAZ (bit 6) reads denormal operands
       as zero */
    static int mt_set_flush_denormal(int on) {
        unsigned int csr = _mm_getcsr();
        _mm_setcsr(on ? (csr | 0x8040u) : (csr & ~0x8040u));
        return 1;
    }
    #else
    static int mt_set_flush_denormal(int on) { (void)on; return 0; }
    #endif
    """
    int mt_set_flush_denormal(int on) nogil


def set_flush_denormal(bint on):
    """Flush denormal floats to zero on the calling thread (or stop): True where the CPU
    supports it (x86-64), else False and nothing changes."""
    return bool(mt_set_flush_denormal(on))
