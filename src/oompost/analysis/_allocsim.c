/* _allocsim: one counterfactual replay of a snapshot trace, in C.
 *
 * A line-for-line port of ``analysis.allocator.CachingAllocator`` (malloc, the
 * fallback chain, expandable segments, GC, pending frees) and of
 * ``analysis.replay._Run.step`` (the per-entry bookkeeping), so that a replay of
 * millions of entries takes seconds instead of a minute.  The Python model stays
 * the reference: this file mirrors its data structures on purpose — the free
 * pools are sorted arrays searched by binary search and edited by memmove, just
 * like the Python lists edited with ``bisect`` — so every index-based walk
 * (best fit, the expandable "smaller hole" walk, release_available's backward
 * walk) takes the same decisions in the same order.
 *
 * Why a sorted array and not a tree: the pools hold the *free* blocks, a few
 * thousand at most in real traces, and identity with the Python model matters
 * more than asymptotics.
 *
 * The columns come from untrusted pickles: every index into them is checked,
 * sizes outside +-2^60 and any arithmetic overflow make ``run`` return None
 * ("declined"), and the caller then replays in Python, which gives the
 * reference answer whatever it is.  Internal inconsistencies that Python would
 * turn into an exception (deleting past the end of a pool) also decline.
 *
 * Blocks live in an arena addressed by int32 index; blocks that Python would
 * drop (merged into a neighbour, released to CUDA) go back to a free list with
 * their generation bumped, so a stale reference kept in the replay's ``live``
 * map (addr -> block) is recognised as the dead object it is in Python (neither
 * allocated nor pending: every operation on it is a no-op).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KMIN_BLOCK 512
#define KSMALL_SIZE (1LL << 20)
#define KSMALL_BUFFER (2LL << 20)
#define KMIN_LARGE_ALLOC (10LL << 20)
#define KROUND_LARGE (2LL << 20)
#define ADDR_ALIGN (2LL << 20)
#define VALUE_LIMIT (1LL << 60)   /* inputs beyond this decline: sums of two never overflow */

enum { EV_ALLOC = 0, EV_FREE = 1, EV_MAP = 2, EV_UNMAP = 3 };

typedef struct {
    int64_t ptr, size, stream, gc_base;
    int32_t prev, next, seg;       /* block indices / segment index, -1 for none */
    int32_t pprev, pnext;          /* pending list (insertion order, like the dict) */
    uint32_t gen;                  /* bumped when the slot is recycled */
    uint8_t small, allocated, pending, mapped, in_pending;
} Block;

typedef struct { int64_t base, page; } ESeg;                 /* an expandable segment */
typedef struct { int64_t stream, size, ptr; int32_t blk; } FEnt;  /* free pool entry */
typedef struct { int64_t stream, ptr; int32_t blk; } UEnt;        /* unmapped pool entry */
typedef struct { FEnt *a; Py_ssize_t n, cap; } FPool;
typedef struct { UEnt *a; Py_ssize_t n, cap; } UPool;
typedef struct { int64_t addr, size, offset, index; int8_t action; } Event;

/* the replay's live map: trace address -> (block, generation); linear probing */
/* int64 -> int64 open-addressing map (linear probing, backward-shift deletion): the replay's live
 * addresses (value: block index and generation, packed) and alloc_deltas' live / pending sizes */
typedef struct { int64_t key, val; uint8_t used; } ISlot;
typedef struct { ISlot *s; Py_ssize_t cap, n; } IMap;

typedef struct {
    /* settings */
    int64_t max_split;             /* INT64_MAX when unlimited */
    int has_max_split;
    int64_t nsr, large_seg, vs_small, vs_large;
    int expandable, gc_on;
    int64_t gc_threshold;          /* int(threshold * cap), computed by the caller */
    int64_t div[16];
    int has_cap;
    int64_t cap, avail;            /* avail INT64_MAX when unbounded */
    int64_t *twins; Py_ssize_t ntwins;
    int diverged;
    /* state */
    Block *b; Py_ssize_t nb, capb;
    int32_t *freeb; Py_ssize_t nfreeb, capfreeb;
    ESeg *segs; Py_ssize_t nsegs, capsegs;
    FPool fp[2]; UPool up[2];
    int64_t gc_clock[2];
    int64_t reserved, peak_reserved, allocated, peak_allocated, retries, device_allocs, next_addr, index;
    int32_t phead, ptail;
    Event *ev; Py_ssize_t nev, capev;
    int err;                       /* 1: declined (overflow, inconsistency); 2: no memory */
} Sim;

#define DECLINE(s) do { if (!(s)->err) (s)->err = 1; } while (0)

/* ---------------------------------------------------------------- helpers */

static int grow_array(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t item) {
    if (need <= *cap) return 0;
    Py_ssize_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    if ((size_t)nc > PY_SSIZE_T_MAX / item) return -1;
    void *q = PyMem_RawRealloc(*p, (size_t)nc * item);
    if (!q) return -1;
    *p = q; *cap = nc;
    return 0;
}

static int64_t add(Sim *s, int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) { DECLINE(s); return 0; }
    return r;
}

/* Python's ceil_to: -(-n // step) * step, floor division; step > 0 */
static int64_t ceil_to(Sim *s, int64_t n, int64_t step) {
    int64_t q = n / step;
    if (n % step != 0 && n > 0) q += 1;          /* C truncates; for n < 0 truncation is the ceiling */
    int64_t r;
    if (__builtin_mul_overflow(q, step, &r)) { DECLINE(s); return 0; }
    return r;
}

static int64_t floor_div(int64_t n, int64_t d) {  /* Python's //, d > 0 */
    int64_t q = n / d;
    if (n % d != 0 && n < 0) q -= 1;
    return q;
}

static int bit_length(int64_t v) { return v <= 0 ? 0 : 64 - __builtin_clzll((unsigned long long)v); }

/* ---------------------------------------------------------------- sizing rules (allocator_rules) */

static int64_t round_size(Sim *s, int64_t size) {
    if (size < KMIN_BLOCK) return KMIN_BLOCK;
    int log_size = bit_length(size) - 1;
    int idx = log_size > 20 ? log_size - 20 : 0;
    if (idx > 15) idx = 15;
    int64_t d = s->div[idx];                      /* |d| <= 2^40, checked by the caller */
    if (d > 1 && size > KMIN_BLOCK * d) {
        if ((size & (size - 1)) == 0) return size;
        int64_t p2 = (int64_t)1 << log_size;
        int64_t step = p2 >> (bit_length(d) - 1);
        if (step == 0) return p2 << 1;
        int64_t fl = size & ~(step - 1);
        return fl == size ? size : fl + step;
    }
    return KMIN_BLOCK * ((size + KMIN_BLOCK - 1) / KMIN_BLOCK);
}

static int64_t alloc_size(Sim *s, int64_t rounded) {
    if (rounded <= KSMALL_SIZE) return KSMALL_BUFFER;
    if (rounded < KMIN_LARGE_ALLOC) return s->large_seg;
    return ceil_to(s, rounded, KROUND_LARGE);
}

/* ---------------------------------------------------------------- blocks */

static int32_t new_block(Sim *s, int64_t ptr, int64_t size, int64_t stream, int small, int32_t seg, int mapped) {
    int32_t i;
    if (s->nfreeb) {
        i = s->freeb[--s->nfreeb];
    } else {
        if (s->nb >= INT32_MAX) { DECLINE(s); return -1; }
        if (grow_array((void **)&s->b, &s->capb, s->nb + 1, sizeof(Block))) { s->err = 2; return -1; }
        i = (int32_t)s->nb++;
        s->b[i].gen = 0;
    }
    Block *b = &s->b[i];
    uint32_t gen = b->gen;
    memset(b, 0, sizeof *b);
    b->gen = gen;
    b->ptr = ptr; b->size = size; b->stream = stream; b->small = (uint8_t)small;
    b->seg = seg; b->mapped = (uint8_t)mapped;
    b->prev = b->next = b->pprev = b->pnext = -1;
    return i;
}

/* the Python object is dropped: recycle the slot, stale references see a new generation */
static void drop_block(Sim *s, int32_t i) {
    if (grow_array((void **)&s->freeb, &s->capfreeb, s->nfreeb + 1, sizeof(int32_t))) { s->err = 2; return; }
    s->b[i].gen++;
    s->b[i].allocated = s->b[i].pending = 0;
    s->freeb[s->nfreeb++] = i;
}

/* ---------------------------------------------------------------- pools (sorted arrays, bisect_left) */

static int fcmp(const FEnt *e, int64_t stream, int64_t size, int64_t ptr) {   /* e < key ? */
    if (e->stream != stream) return e->stream < stream;
    if (e->size != size) return e->size < size;
    return e->ptr < ptr;
}

static Py_ssize_t f_lb(FPool *p, int64_t stream, int64_t size, int64_t ptr) {
    Py_ssize_t lo = 0, hi = p->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (fcmp(&p->a[mid], stream, size, ptr)) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static void f_del(Sim *s, FPool *p, Py_ssize_t i) {
    if (i < 0 || i >= p->n) { DECLINE(s); return; }   /* Python: IndexError */
    memmove(&p->a[i], &p->a[i + 1], (size_t)(p->n - i - 1) * sizeof(FEnt));
    p->n--;
}

static void insert_free(Sim *s, int32_t bi) {
    Block *b = &s->b[bi];
    b->gc_base = s->gc_clock[b->small];
    FPool *p = &s->fp[b->small];
    /* insort = bisect_right; keys are unique by ptr among well-formed pools */
    Py_ssize_t lo = 0, hi = p->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        const FEnt *e = &p->a[mid];
        int key_lt_e = (b->stream != e->stream) ? b->stream < e->stream
                     : (b->size != e->size) ? b->size < e->size : b->ptr < e->ptr;
        if (key_lt_e) hi = mid; else lo = mid + 1;
    }
    if (lo > 0 && p->a[lo - 1].stream == b->stream && p->a[lo - 1].size == b->size && p->a[lo - 1].ptr == b->ptr) {
        DECLINE(s);                               /* Python would compare two Blocks: TypeError */
        return;
    }
    if (grow_array((void **)&p->a, &p->cap, p->n + 1, sizeof(FEnt))) { s->err = 2; return; }
    memmove(&p->a[lo + 1], &p->a[lo], (size_t)(p->n - lo) * sizeof(FEnt));
    p->a[lo] = (FEnt){b->stream, b->size, b->ptr, bi};
    p->n++;
}

static void remove_free(Sim *s, int32_t bi) {
    Block *b = &s->b[bi];
    FPool *p = &s->fp[b->small];
    f_del(s, p, f_lb(p, b->stream, b->size, b->ptr));
}

static Py_ssize_t u_lb(UPool *p, int64_t stream, int64_t ptr) {
    Py_ssize_t lo = 0, hi = p->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        const UEnt *e = &p->a[mid];
        int lt = (e->stream != stream) ? e->stream < stream : e->ptr < ptr;
        if (lt) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static void insert_unmapped(Sim *s, int32_t bi) {
    Block *b = &s->b[bi];
    UPool *p = &s->up[b->small];
    Py_ssize_t lo = 0, hi = p->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        const UEnt *e = &p->a[mid];
        int key_lt_e = (b->stream != e->stream) ? b->stream < e->stream : b->ptr < e->ptr;
        if (key_lt_e) hi = mid; else lo = mid + 1;
    }
    if (lo > 0 && p->a[lo - 1].stream == b->stream && p->a[lo - 1].ptr == b->ptr) {
        DECLINE(s);                               /* (as in insert_free) */
        return;
    }
    if (grow_array((void **)&p->a, &p->cap, p->n + 1, sizeof(UEnt))) { s->err = 2; return; }
    memmove(&p->a[lo + 1], &p->a[lo], (size_t)(p->n - lo) * sizeof(UEnt));
    p->a[lo] = (UEnt){b->stream, b->ptr, bi};
    p->n++;
}

static void remove_unmapped(Sim *s, int32_t bi) {
    Block *b = &s->b[bi];
    UPool *p = &s->up[b->small];
    Py_ssize_t i = u_lb(p, b->stream, b->ptr);
    if (i >= p->n) { DECLINE(s); return; }
    memmove(&p->a[i], &p->a[i + 1], (size_t)(p->n - i - 1) * sizeof(UEnt));
    p->n--;
}

/* ---------------------------------------------------------------- small state changes */

static int64_t new_address(Sim *s, int64_t size) {
    int64_t a = s->next_addr;
    s->next_addr = ceil_to(s, add(s, a, size), ADDR_ALIGN);
    return a;
}

static void emit(Sim *s, int action, int64_t addr, int64_t size, int32_t seg) {
    if (grow_array((void **)&s->ev, &s->capev, s->nev + 1, sizeof(Event))) { s->err = 2; return; }
    Event *e = &s->ev[s->nev++];
    e->action = (int8_t)action; e->addr = addr; e->size = size; e->index = s->index;
    e->offset = seg < 0 ? -1 : addr - s->segs[seg].base;
}

static void grow(Sim *s, int64_t n) {
    s->reserved = add(s, s->reserved, n);
    if (s->reserved > s->peak_reserved) s->peak_reserved = s->reserved;
}

static void link_after(Sim *s, int32_t bi, int32_t ri) {   /* r.prev, r.next = b, b.next; ... b.next = r */
    Block *b = &s->b[bi], *r = &s->b[ri];
    r->prev = bi; r->next = b->next;
    if (b->next >= 0) s->b[b->next].prev = ri;
    b->next = ri;
}

/* try_merge_blocks: dst (not in any pool) absorbs a free neighbour */
static void merge(Sim *s, int32_t di, int32_t si) {
    if (si < 0) return;
    Block *d = &s->b[di], *src = &s->b[si];
    if (src->allocated || src->pending || d->mapped != src->mapped) return;
    if (src->mapped) remove_free(s, si); else remove_unmapped(s, si);
    d = &s->b[di]; src = &s->b[si];
    if (d->prev == si) {
        d->ptr = src->ptr;
        d->prev = src->prev;
        if (d->prev >= 0) s->b[d->prev].next = di;
    } else {
        d->next = src->next;
        if (d->next >= 0) s->b[d->next].prev = di;
    }
    d->size += src->size;
    drop_block(s, si);
}

static int64_t exp_size(Sim *s, int32_t bi) {
    Block *b = &s->b[bi];
    int64_t n = b->size;
    if (b->next >= 0 && !s->b[b->next].mapped) n += s->b[b->next].size;
    return n;
}

/* ---------------------------------------------------------------- pending frees */

static void pend_push(Sim *s, int32_t bi) {
    Block *b = &s->b[bi];
    b->in_pending = 1; b->pnext = -1; b->pprev = s->ptail;
    if (s->ptail >= 0) s->b[s->ptail].pnext = bi; else s->phead = bi;
    s->ptail = bi;
}

static int pend_pop(Sim *s, int32_t bi) {               /* pending.pop(id(b), None) is not None */
    Block *b = &s->b[bi];
    if (!b->in_pending) return 0;
    if (b->pprev >= 0) s->b[b->pprev].pnext = b->pnext; else s->phead = b->pnext;
    if (b->pnext >= 0) s->b[b->pnext].pprev = b->pprev; else s->ptail = b->pprev;
    b->in_pending = 0; b->pprev = b->pnext = -1;
    return 1;
}

static void request_free(Sim *s, int32_t bi) {
    Block *b = &s->b[bi];
    b->allocated = 0;
    s->allocated -= b->size;
    b->pending = 1;
    if (!b->in_pending) pend_push(s, bi);
}

/* bi < 0: a stale reference (the Python block is dead: neither allocated nor pending) */
static void complete_free(Sim *s, int32_t bi) {
    if (bi < 0) return;
    if (s->b[bi].allocated) request_free(s, bi);
    if (!pend_pop(s, bi)) return;
    s->b[bi].pending = 0;
    merge(s, bi, s->b[bi].prev);
    merge(s, bi, s->b[bi].next);
    insert_free(s, bi);
}

/* ---------------------------------------------------------------- releasing memory */

static int release_block(Sim *s, int32_t bi) {
    Block *b = &s->b[bi];
    if (b->seg >= 0 || b->prev >= 0 || b->next >= 0) return 0;
    remove_free(s, bi);
    b = &s->b[bi];
    s->reserved -= b->size;
    emit(s, EV_FREE, b->ptr, b->size, -1);
    drop_block(s, bi);
    return 1;
}

static void unmap_block(Sim *s, int32_t bi) {
    Block *b = &s->b[bi];
    int32_t seg = b->seg;
    int64_t base = s->segs[seg].base, P = s->segs[seg].page;
    int64_t lo = base + ceil_to(s, b->ptr - base, P);
    int64_t hi = base + floor_div(b->ptr + b->size - base, P) * P;
    if (hi <= lo) return;
    remove_free(s, bi);
    if (lo > s->b[bi].ptr) {
        int32_t fi = new_block(s, s->b[bi].ptr, lo - s->b[bi].ptr, s->b[bi].stream, s->b[bi].small, seg, 1);
        if (fi < 0) return;
        Block *f = &s->b[fi]; b = &s->b[bi];
        f->prev = b->prev; f->next = bi;
        if (b->prev >= 0) s->b[b->prev].next = fi;
        b->prev = fi;
        insert_free(s, fi);
    }
    b = &s->b[bi];
    int64_t end = b->ptr + b->size;
    if (end > hi) {
        int32_t ai = new_block(s, hi, end - hi, b->stream, b->small, seg, 1);
        if (ai < 0) return;
        link_after(s, bi, ai);
        insert_free(s, ai);
    }
    b = &s->b[bi];
    b->ptr = lo; b->size = hi - lo; b->mapped = 0;
    merge(s, bi, s->b[bi].prev);
    merge(s, bi, s->b[bi].next);
    s->reserved -= hi - lo;
    emit(s, EV_UNMAP, lo, hi - lo, seg);
    b = &s->b[bi];
    if (b->prev < 0 && b->next < 0) { drop_block(s, bi); return; }   /* the whole range is gone */
    insert_unmapped(s, bi);
}

static void release_cached(Sim *s) {
    while (s->phead >= 0 && !s->err) complete_free(s, s->phead);    /* synchronize_and_free_events */
    for (int small = 0; small <= 1 && !s->err; small++) {
        FPool *p = &s->fp[small];
        Py_ssize_t n = p->n;
        if (!n) continue;
        int32_t *copy = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
        int32_t *to_unmap = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
        if (!copy || !to_unmap) { PyMem_RawFree(copy); PyMem_RawFree(to_unmap); s->err = 2; return; }
        for (Py_ssize_t k = 0; k < n; k++) copy[k] = p->a[k].blk;   /* list(self.free_pools[small]) */
        Py_ssize_t nu = 0;
        for (Py_ssize_t k = 0; k < n && !s->err; k++) {
            Block *b = &s->b[copy[k]];
            if (b->seg >= 0) to_unmap[nu++] = copy[k];
            else if (b->prev < 0 && b->next < 0) release_block(s, copy[k]);
        }
        for (Py_ssize_t k = 0; k < nu && !s->err; k++) unmap_block(s, to_unmap[k]);
        PyMem_RawFree(copy); PyMem_RawFree(to_unmap);
    }
}

static int release_available(Sim *s, int64_t n, int64_t stream, int small) {
    if (!s->has_max_split) return 0;
    int64_t ms = s->max_split;
    FPool *p = &s->fp[small];
    int64_t key = n > ms ? n : ms;
    Py_ssize_t i = f_lb(p, stream, key, 0);
    if (i == p->n || p->a[i].stream != stream || s->b[p->a[i].blk].seg >= 0) {
        if (i == 0) return 0;
        int64_t released = 0;
        i -= 1;
        while (released < key && i >= 0 && p->a[i].size >= ms && p->a[i].stream == stream && !s->err) {
            int32_t bi = p->a[i].blk;
            i -= 1;
            if (s->b[bi].seg < 0) {
                int64_t sz = s->b[bi].size;
                if (release_block(s, bi)) released = add(s, released, sz);
            }
        }
        return released >= key;
    }
    return release_block(s, p->a[i].blk);
}

static void garbage_collect(Sim *s) {
    int64_t threshold = s->gc_threshold;
    if (s->reserved <= threshold) return;
    int64_t target = s->reserved - threshold;
    int64_t clock = s->gc_clock[0];
    FPool *p = &s->fp[0];
    int64_t total_age = 0, count = 0;
    for (Py_ssize_t k = 0; k < p->n; k++) {
        Block *b = &s->b[p->a[k].blk];
        if (b->prev < 0 && b->next < 0) { total_age += clock - b->gc_base; count++; }
    }
    if (!count) return;
    int64_t reclaimed = 0;
    int freed = 1;
    int32_t *copy = NULL;
    while (reclaimed < target && freed && count > 0 && !s->err) {
        double threshold_age = (double)total_age / (double)count;
        freed = 0;
        Py_ssize_t n = p->n;                      /* for e in list(pool) */
        PyMem_RawFree(copy);
        copy = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(int32_t));
        if (!copy) { s->err = 2; return; }
        for (Py_ssize_t k = 0; k < n; k++) copy[k] = p->a[k].blk;
        for (Py_ssize_t k = 0; k < n && !s->err; k++) {
            Block *b = &s->b[copy[k]];
            if (b->prev < 0 && b->next < 0 && b->seg < 0 && (double)(clock - b->gc_base) >= threshold_age) {
                freed = 1;
                reclaimed = add(s, reclaimed, b->size);
                total_age -= clock - b->gc_base;
                count -= 1;
                release_block(s, copy[k]);
            }
        }
    }
    PyMem_RawFree(copy);
}

/* ---------------------------------------------------------------- expandable segments */

static int32_t map_block(Sim *s, int32_t ui, int64_t nbytes) {
    Block *u = &s->b[ui];
    int32_t seg = u->seg;
    int64_t base = s->segs[seg].base, page = s->segs[seg].page;
    int64_t start = u->ptr - base;
    int64_t m = ceil_to(s, add(s, start, nbytes), page) - start;
    if (s->err) return -1;
    if (m <= 0 || add(s, s->reserved, m) > s->avail) return -1;
    remove_unmapped(s, ui);
    u = &s->b[ui];
    u->mapped = 1;
    if (m < u->size) {
        int32_t ri = new_block(s, u->ptr + m, u->size - m, u->stream, u->small, seg, 0);
        if (ri < 0) return -1;
        link_after(s, ui, ri);
        s->b[ui].size = m;
        insert_unmapped(s, ri);
    }
    int64_t mapped_at = s->b[ui].ptr;
    merge(s, ui, s->b[ui].prev);
    merge(s, ui, s->b[ui].next);
    insert_free(s, ui);
    grow(s, m);
    s->device_allocs++;
    emit(s, EV_MAP, mapped_at, m, seg);
    return s->err ? -1 : ui;
}

static int32_t find_expandable_block(Sim *s, int64_t n, int64_t stream, int small) {
    UPool *l = &s->up[small];
    for (Py_ssize_t i = u_lb(l, stream, 0); i < l->n && l->a[i].stream == stream; i++) {
        int32_t c = l->a[i].blk;
        int32_t pr = s->b[c].prev;
        if (pr >= 0 && !s->b[pr].allocated && !s->b[pr].pending) c = pr;
        int64_t total = 0;
        int32_t x = c;
        while (total < n && x >= 0 && !s->b[x].allocated && !s->b[x].pending) {
            total = add(s, total, s->b[x].size);
            x = s->b[x].next;
        }
        if (total >= n) return c;
    }
    int64_t vs = small ? s->vs_small : s->vs_large;
    if (grow_array((void **)&s->segs, &s->capsegs, s->nsegs + 1, sizeof(ESeg)) || s->nsegs >= INT32_MAX) {
        s->err = 2; return -1;
    }
    int32_t seg = (int32_t)s->nsegs++;
    s->segs[seg].base = new_address(s, vs);
    s->segs[seg].page = small ? KSMALL_BUFFER : s->large_seg;
    int32_t u = new_block(s, s->segs[seg].base, vs, stream, small, seg, 0);
    if (u < 0) return -1;
    insert_unmapped(s, u);
    return u;
}

static int32_t alloc_expandable(Sim *s, int64_t n, int64_t stream, int small) {
    int32_t c = find_expandable_block(s, n, stream, small);
    if (c < 0 || s->err) return -1;
    if (!s->b[c].mapped) {
        int64_t sz = s->b[c].size;
        c = map_block(s, c, sz < n ? sz : n);
        if (c < 0) return -1;
    }
    while (s->b[c].size < n) {
        int32_t nxt = s->b[c].next;
        if (nxt < 0 || s->b[nxt].mapped) return -1;
        int64_t want = n - s->b[c].size, nsz = s->b[nxt].size;
        int32_t c2 = map_block(s, nxt, want < nsz ? want : nsz);
        if (c2 < 0) return -1;
        c = c2;
    }
    remove_free(s, c);
    return s->err ? -1 : c;
}

/* ---------------------------------------------------------------- malloc */

static int32_t get_free_block(Sim *s, int64_t n, int64_t stream, int small) {
    if (s->gc_on) s->gc_clock[small]++;
    FPool *p = &s->fp[small];
    Py_ssize_t i = f_lb(p, stream, n, 0);
    if (i == p->n || p->a[i].stream != stream) return -1;
    int32_t bi = p->a[i].blk;
    if (s->b[bi].seg >= 0 && s->expandable) {
        /* best fit avoids the growable tail: prefer any fitting hole whose "expandable size" is smaller */
        Py_ssize_t last = p->n - 1;
        while (s->b[bi].seg >= 0 && i < last && p->a[i + 1].stream == stream
               && exp_size(s, p->a[i + 1].blk) < exp_size(s, bi)) {
            i++;
            bi = p->a[i].blk;
        }
    }
    int64_t sz = s->b[bi].size;
    if (n < s->max_split && sz >= s->max_split) return -1;
    if (n >= s->max_split && sz >= n + s->nsr) return -1;
    f_del(s, p, i);
    return bi;
}

static int32_t alloc_block(Sim *s, int64_t n, int64_t asz, int64_t stream, int small, int retry) {
    if (retry) s->retries++;
    int64_t need = add(s, s->reserved, asz);
    if (s->err) return -1;
    if (s->ntwins) {
        int over = s->has_cap && need > s->cap;
        for (Py_ssize_t k = 0; k < s->ntwins; k++)
            if ((need > s->twins[k]) != over) { s->diverged = 1; s->ntwins = 0; break; }
    }
    if (s->has_cap && need > s->cap) return -1;
    if (s->expandable) return alloc_expandable(s, n, stream, small);
    if (need > s->avail) return -1;
    int64_t ptr = new_address(s, asz);
    int32_t bi = new_block(s, ptr, asz, stream, small, -1, 1);
    if (bi < 0 || s->err) return -1;
    grow(s, asz);
    s->device_allocs++;
    emit(s, EV_ALLOC, ptr, asz, -1);
    return bi;
}

static int32_t sim_malloc(Sim *s, int64_t req, int64_t stream) {
    int64_t n = round_size(s, req);
    int64_t asz = alloc_size(s, n);
    int small = n <= KSMALL_SIZE;
    int32_t bi = get_free_block(s, n, stream, small);
    if (bi < 0) {
        if (s->gc_on) garbage_collect(s);
        if (s->err) return -1;
        bi = alloc_block(s, n, asz, stream, small, 0);
        if (bi < 0 && !s->err && release_available(s, n, stream, small) && !s->err)
            bi = alloc_block(s, n, asz, stream, small, 0);
        if (bi < 0 && !s->err) {
            release_cached(s);
            if (!s->err) bi = alloc_block(s, n, asz, stream, small, 1);
        }
        if (bi < 0 || s->err) return -1;
    }
    Block *b = &s->b[bi];
    int64_t rem = b->size - n;
    int split = (small || s->expandable) ? rem >= KMIN_BLOCK : (n < s->max_split && rem > KSMALL_SIZE);
    if (split) {
        int32_t ri = new_block(s, b->ptr + n, rem, stream, small, b->seg, 1);
        if (ri < 0) return -1;
        link_after(s, bi, ri);
        s->b[bi].size = n;
        insert_free(s, ri);
    }
    b = &s->b[bi];
    b->allocated = 1;
    s->allocated = add(s, s->allocated, b->size);
    if (s->allocated > s->peak_allocated) s->peak_allocated = s->allocated;
    return s->err ? -1 : bi;
}

/* ---------------------------------------------------------------- the replay's live map */

/* splitmix64's finaliser: every input bit reaches the low bits the table uses (trace
 * addresses are 512-byte aligned, synthetic ones far more) */
static uint64_t lhash(int64_t k) {
    uint64_t x = (uint64_t)k;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static Py_ssize_t imap_find(IMap *m, int64_t key) {
    if (!m->cap) return -1;
    size_t mask = (size_t)(m->cap - 1);
    for (size_t j = lhash(key) & mask;; j = (j + 1) & mask) {
        if (!m->s[j].used) return -1;
        if (m->s[j].key == key) return (Py_ssize_t)j;
    }
}

static int imap_put(IMap *m, int64_t key, int64_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        Py_ssize_t nc = m->cap ? m->cap * 2 : 1024;
        ISlot *ns = PyMem_RawCalloc((size_t)nc, sizeof(ISlot));
        if (!ns) return -1;
        for (Py_ssize_t i = 0; i < m->cap; i++) {
            if (!m->s[i].used) continue;
            size_t j = lhash(m->s[i].key) & (size_t)(nc - 1);
            while (ns[j].used) j = (j + 1) & (size_t)(nc - 1);
            ns[j] = m->s[i];
        }
        PyMem_RawFree(m->s);
        m->s = ns; m->cap = nc;
    }
    size_t mask = (size_t)(m->cap - 1);
    size_t j = lhash(key) & mask;
    while (m->s[j].used && m->s[j].key != key) j = (j + 1) & mask;
    if (!m->s[j].used) m->n++;
    m->s[j] = (ISlot){key, val, 1};
    return 0;
}

static void imap_del(IMap *m, Py_ssize_t j) {           /* backward-shift deletion */
    size_t mask = (size_t)(m->cap - 1), i = (size_t)j;
    m->s[i].used = 0; m->n--;
    for (size_t k = (i + 1) & mask; m->s[k].used; k = (k + 1) & mask) {
        size_t h = lhash(m->s[k].key) & mask;
        /* move k back to i if its home is not in the cyclic range (i, k] */
        if ((k > i && (h <= i || h > k)) || (k < i && (h <= i && h > k))) {
            m->s[i] = m->s[k]; m->s[k].used = 0; i = k;
        }
    }
}

/* a live address's value: its block index (low 32 bits) and that block's generation (high 32) */
static int live_put(IMap *m, int64_t key, int32_t blk, uint32_t gen) {
    return imap_put(m, key, (int64_t)(((uint64_t)gen << 32) | (uint32_t)blk));
}

/* the block a live slot refers to: its index, or -2 when the slot's block is dead (stale) */
static int32_t live_block(Sim *s, ISlot *e) {
    int32_t blk = (int32_t)(uint32_t)((uint64_t)e->val & 0xFFFFFFFFu);
    uint32_t gen = (uint32_t)((uint64_t)e->val >> 32);
    return s->b[blk].gen == gen ? blk : -2;
}

/* ---------------------------------------------------------------- buffers */

static int get_col(PyObject *o, Py_buffer *v, Py_ssize_t itemsize, const char *codes, const char *name) {
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = v->format ? v->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    if (v->ndim != 1 || v->itemsize != itemsize || f[0] == 0 || f[1] != 0 || !strchr(codes, f[0])) {
        PyErr_Format(PyExc_TypeError, "%s: expected a 1-d array of %zd-byte integers", name, itemsize);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

static void release_cols(Py_buffer *v, int n) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&v[i]);
}

/* The trace columns a replay reads: [0] the selected event indices, [1] one byte per event (kind or
 * action), [2..] one int64 per event.  All are acquired or none: 0 ok, -1 error (set). */
typedef struct { Py_ssize_t item; const char *codes, *name; } ColSpec;
static int get_cols(PyObject *const *objs, const ColSpec *spec, int n, Py_buffer *v) {
    for (int i = 0; i < n; i++)
        if (get_col(objs[i], &v[i], spec[i].item, spec[i].codes, spec[i].name) < 0) { release_cols(v, i); return -1; }
    for (int i = 2; i < n; i++)
        if (v[i].len / 8 != v[1].len) {
            PyErr_SetString(PyExc_ValueError, "columns of different lengths");
            release_cols(v, n);
            return -1;
        }
    return 0;
}

/* a Python int as long long, with the sign of an overflow: 0 ok, -1 error (not an int) */
static int read_long(PyObject *o, long long *v, int *overflow) {
    if (!PyLong_Check(o)) { PyErr_SetString(PyExc_TypeError, "expected an int"); return -1; }
    *overflow = 0;
    *v = PyLong_AsLongLongAndOverflow(o, overflow);
    return (*v == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* an int argument as int64: 0 ok, 1 out of range (decline), -1 error */
static int as_i64(PyObject *o, int64_t *out) {
    long long v; int overflow;
    if (read_long(o, &v, &overflow)) return -1;
    if (overflow || v > VALUE_LIMIT || v < -VALUE_LIMIT) return 1;
    *out = v;
    return 0;
}

/* a bound (cap, twin cap, avail, GC threshold) as int64, clamped: comparisons with values
 * below 2^62 give the same answer as with the Python int */
static int as_bound(PyObject *o, int64_t *out) {
    long long v; int overflow;
    if (read_long(o, &v, &overflow)) return -1;
    *out = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : v;
    return 0;
}

static void sim_free(Sim *s) {
    PyMem_RawFree(s->b); PyMem_RawFree(s->freeb); PyMem_RawFree(s->segs); PyMem_RawFree(s->ev); PyMem_RawFree(s->twins);
    for (int k = 0; k < 2; k++) { PyMem_RawFree(s->fp[k].a); PyMem_RawFree(s->up[k].a); }
}

/* ---------------------------------------------------------------- a seeded start */

/* int64 items of a bytes object; NULL (TypeError set) unless it is bytes of whole items */
static const int64_t *i64s(PyObject *o, Py_ssize_t *n) {
    if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) % 8) {
        PyErr_SetString(PyExc_TypeError, "state: int64 bytes expected");
        return NULL;
    }
    *n = PyBytes_GET_SIZE(o) / 8;
    return (const int64_t *)PyBytes_AS_STRING(o);
}

#define BLOCK_FIELDS 11   /* ptr, size, stream, small, allocated, pending, mapped, prev, next, seg, gc_base */

/* The allocator as Python left it after rebuilding a truncated trace's starting
 * layout: blocks, expandable segments, the pools in their (sorted) order, the
 * pending frees in insertion order, the live map, the counters.  Everything is
 * range-checked; 0 ok, 1 decline, -1 error. */
static int load_state(Sim *s, IMap *live, PyObject *st) {
    if (!PyTuple_Check(st) || PyTuple_GET_SIZE(st) != 9) { PyErr_SetString(PyExc_ValueError, "state: 9 items"); return -1; }
    Py_ssize_t nf, ns;
    const int64_t *f = i64s(PyTuple_GET_ITEM(st, 0), &nf);
    if (!f) return -1;
    const int64_t *g = i64s(PyTuple_GET_ITEM(st, 1), &ns);
    if (!g) return -1;
    if (nf % BLOCK_FIELDS || ns % 2) { PyErr_SetString(PyExc_ValueError, "state: ragged arrays"); return -1; }
    Py_ssize_t nb = nf / BLOCK_FIELDS;
    ns /= 2;
    if (nb >= INT32_MAX || ns >= INT32_MAX) return 1;
    if (grow_array((void **)&s->b, &s->capb, nb, sizeof(Block)) ||
        grow_array((void **)&s->segs, &s->capsegs, ns, sizeof(ESeg))) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t k = 0; k < ns; k++) {
        int64_t base = g[2 * k], page = g[2 * k + 1];
        if (base < -VALUE_LIMIT || base > VALUE_LIMIT || page <= 0 || page > VALUE_LIMIT) return 1;
        s->segs[k] = (ESeg){base, page};
    }
    s->nsegs = ns;
    for (Py_ssize_t k = 0; k < nb; k++) {
        const int64_t *r = f + k * BLOCK_FIELDS;
        for (int q = 0; q < 3; q++) if (r[q] < -VALUE_LIMIT || r[q] > VALUE_LIMIT) return 1;
        for (int q = 3; q < 7; q++) if (r[q] != 0 && r[q] != 1) return 1;
        for (int q = 7; q < 9; q++) if (r[q] < -1 || r[q] >= nb) return 1;
        if (r[9] < -1 || r[9] >= ns || r[10] < -VALUE_LIMIT || r[10] > VALUE_LIMIT) return 1;
        if (r[1] <= 0) return 1;              /* (the chain walks assume growing totals) */
        Block *b = &s->b[k];
        memset(b, 0, sizeof *b);
        b->ptr = r[0]; b->size = r[1]; b->stream = r[2];
        b->small = (uint8_t)r[3]; b->allocated = (uint8_t)r[4]; b->pending = (uint8_t)r[5]; b->mapped = (uint8_t)r[6];
        b->prev = (int32_t)r[7]; b->next = (int32_t)r[8]; b->seg = (int32_t)r[9]; b->gc_base = r[10];
        b->pprev = b->pnext = -1;
    }
    s->nb = nb;
    for (int small = 0; small <= 1; small++) {
        Py_ssize_t n;
        const int64_t *ix = i64s(PyTuple_GET_ITEM(st, 2 + small), &n);
        if (!ix) return -1;
        FPool *p = &s->fp[small];
        if (grow_array((void **)&p->a, &p->cap, n ? n : 1, sizeof(FEnt))) { PyErr_NoMemory(); return -1; }
        for (Py_ssize_t k = 0; k < n; k++) {
            if (ix[k] < 0 || ix[k] >= nb) return 1;
            Block *b = &s->b[ix[k]];
            p->a[k] = (FEnt){b->stream, b->size, b->ptr, (int32_t)ix[k]};
        }
        p->n = n;
        const int64_t *ux = i64s(PyTuple_GET_ITEM(st, 4 + small), &n);
        if (!ux) return -1;
        UPool *u = &s->up[small];
        if (grow_array((void **)&u->a, &u->cap, n ? n : 1, sizeof(UEnt))) { PyErr_NoMemory(); return -1; }
        for (Py_ssize_t k = 0; k < n; k++) {
            if (ux[k] < 0 || ux[k] >= nb) return 1;
            Block *b = &s->b[ux[k]];
            u->a[k] = (UEnt){b->stream, b->ptr, (int32_t)ux[k]};
        }
        u->n = n;
    }
    Py_ssize_t n;
    const int64_t *pend = i64s(PyTuple_GET_ITEM(st, 6), &n);
    if (!pend) return -1;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (pend[k] < 0 || pend[k] >= nb || s->b[pend[k]].in_pending) return 1;
        pend_push(s, (int32_t)pend[k]);
    }
    const int64_t *lv = i64s(PyTuple_GET_ITEM(st, 7), &n);
    if (!lv) return -1;
    if (n % 2) { PyErr_SetString(PyExc_ValueError, "state: live pairs"); return -1; }
    for (Py_ssize_t k = 0; k < n; k += 2) {
        if (lv[k + 1] < 0 || lv[k + 1] >= nb) return 1;
        if (live_put(live, lv[k], (int32_t)lv[k + 1], 0)) { PyErr_NoMemory(); return -1; }
    }
    PyObject *c = PyTuple_GET_ITEM(st, 8);       /* peak_reserved, allocated, peak_allocated, retries,
                                                    device_allocs, gc_clock[False], gc_clock[True] */
    if (!PyTuple_Check(c) || PyTuple_GET_SIZE(c) != 7) { PyErr_SetString(PyExc_ValueError, "state: 7 counters"); return -1; }
    int64_t *dst[7] = {&s->peak_reserved, &s->allocated, &s->peak_allocated, &s->retries, &s->device_allocs,
                       &s->gc_clock[0], &s->gc_clock[1]};
    for (int k = 0; k < 7; k++) {
        int r_ = as_i64(PyTuple_GET_ITEM(c, k), dst[k]);
        if (r_) return r_;
    }
    return 0;
}

/* ---------------------------------------------------------------- run */

PyDoc_STRVAR(run_doc,
"run(sel, kind, addr, size, stream, settings, state=None) -> tuple | None\n\n"
"Replay the entries ``sel`` (int64 indices into the int8 ``kind`` and int64 addr / size /\n"
"stream columns) through an allocator, fresh or in ``state``.  ``settings`` and ``state`` are built by\n"
"``analysis.allocsim``.  None: declined (a value out of range or an overflow).");

static PyObject *run(PyObject *self, PyObject *args) {
    PyObject *osel, *okind, *oaddr, *osize, *ostream, *oset, *ostate = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOO!|O", &osel, &okind, &oaddr, &osize, &ostream, &PyTuple_Type, &oset, &ostate))
        return NULL;
    /* settings: (max_split|None, nsr, expandable, gc_threshold|None, large_seg, divisions[16],
     *            cap|None, avail|None, vs_small, vs_large, base_addr, reserved0, twins, has_completed) */
    if (PyTuple_GET_SIZE(oset) != 14) { PyErr_SetString(PyExc_ValueError, "settings: 14 items"); return NULL; }
    Sim s;
    memset(&s, 0, sizeof s);
    s.phead = s.ptail = -1;
    IMap live = {0};
    Py_buffer col[5];
    int nbuf = 0, declined = 0;                  /* nbuf: columns held, for the release at done */
    PyObject *result = NULL;
    int64_t has_completed = 0, reserved0 = 0;

#define SETI(k, dst) do { int r_ = as_i64(PyTuple_GET_ITEM(oset, k), dst); if (r_ < 0) goto done; if (r_) { declined = 1; goto done; } } while (0)
#define SETB(k, dst) do { if (as_bound(PyTuple_GET_ITEM(oset, k), dst) < 0) goto done; } while (0)
    if (PyTuple_GET_ITEM(oset, 0) == Py_None) { s.max_split = INT64_MAX; s.has_max_split = 0; }
    else { SETI(0, &s.max_split); s.has_max_split = 1; if (s.max_split < 0) { declined = 1; goto done; } }
    SETI(1, &s.nsr);
    s.expandable = PyObject_IsTrue(PyTuple_GET_ITEM(oset, 2));
    if (s.expandable < 0) goto done;
    if (PyTuple_GET_ITEM(oset, 3) != Py_None) { s.gc_on = 1; SETB(3, &s.gc_threshold); }
    SETI(4, &s.large_seg);
    if (s.large_seg <= 0) { declined = 1; goto done; }
    PyObject *divs = PyTuple_GET_ITEM(oset, 5);
    if (!PyTuple_Check(divs) || PyTuple_GET_SIZE(divs) != 16) { PyErr_SetString(PyExc_ValueError, "16 divisions"); goto done; }
    for (int k = 0; k < 16; k++) {
        int r_ = as_i64(PyTuple_GET_ITEM(divs, k), &s.div[k]);
        if (r_ < 0) goto done;
        if (r_ || s.div[k] > (1LL << 40)) { declined = 1; goto done; }
    }
    if (PyTuple_GET_ITEM(oset, 6) != Py_None) { s.has_cap = 1; SETB(6, &s.cap); }
    if (PyTuple_GET_ITEM(oset, 7) == Py_None) s.avail = INT64_MAX; else SETB(7, &s.avail);
    SETI(8, &s.vs_small); SETI(9, &s.vs_large); SETI(10, &s.next_addr); SETI(11, &reserved0);
    PyObject *twins = PyTuple_GET_ITEM(oset, 12);
    if (!PyTuple_Check(twins)) { PyErr_SetString(PyExc_TypeError, "twins: a tuple"); goto done; }
    s.ntwins = PyTuple_GET_SIZE(twins);
    if (s.ntwins) {
        s.twins = PyMem_RawMalloc((size_t)s.ntwins * sizeof(int64_t));
        if (!s.twins) { PyErr_NoMemory(); goto done; }
        for (Py_ssize_t k = 0; k < s.ntwins; k++) if (as_bound(PyTuple_GET_ITEM(twins, k), &s.twins[k]) < 0) goto done;
    }
    has_completed = PyObject_IsTrue(PyTuple_GET_ITEM(oset, 13));
    if (has_completed < 0) goto done;
#undef SETI
#undef SETB
    if (s.next_addr < 0 || reserved0 < 0) { declined = 1; goto done; }
    s.reserved = s.peak_reserved = reserved0;
    if (ostate != Py_None) {                     /* a seeded start (peak_reserved among its counters) */
        int r_ = load_state(&s, &live, ostate);
        if (r_ < 0) goto done;
        if (r_) { declined = 1; goto done; }
    }

    static const ColSpec RUN_COLS[5] = {{8, "lq", "sel"}, {1, "b", "kind"}, {8, "lq", "addr"}, {8, "lq", "size"},
                                        {8, "lq", "stream"}};
    PyObject *const run_objs[5] = {osel, okind, oaddr, osize, ostream};
    if (get_cols(run_objs, RUN_COLS, 5, col) < 0) goto done;
    nbuf = 5;
    Py_ssize_t n = col[1].len;
    const int64_t *sel = col[0].buf, *caddr = col[2].buf, *csize = col[3].buf, *cstream = col[4].buf;
    const int8_t *ckind = col[1].buf;
    Py_ssize_t nsel = col[0].len / 8;

    int64_t replayed = 0, orphans = 0, first_oom = -1, res_oom = 0, alloc_oom = 0, stopped = -1;
    int fits = -1;                               /* -1 None, 0 False, 1 True */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < nsel && !s.err; j++) {
        int64_t i = sel[j];
        if (i < 0 || i >= n) { s.err = 1; break; }
        int k = ckind[i];
        int64_t addr = caddr[i], size = csize[i], stream = cstream[i];
        if (size > VALUE_LIMIT || size < -VALUE_LIMIT) { s.err = 1; break; }
        s.index = i;
        replayed++;
        if (k == 0) {                                            /* alloc */
            Py_ssize_t e = imap_find(&live, addr);
            if (e >= 0) {                                        /* its free was not recorded: free it now */
                int32_t prev = live_block(&s, &live.s[e]);
                imap_del(&live, e);
                complete_free(&s, prev);
                if (s.err) break;
            }
            int32_t b = sim_malloc(&s, size, stream);
            if (s.err) break;
            if (b < 0) {
                first_oom = i; res_oom = s.reserved; alloc_oom = s.allocated;
                stopped = i;
                break;
            }
            if (live_put(&live, addr, b, s.b[b].gen)) { s.err = 2; break; }
        } else if (k == 1) {                                     /* free_requested */
            Py_ssize_t e = imap_find(&live, addr);
            if (e < 0) { orphans++; continue; }
            int32_t b = live_block(&s, &live.s[e]);
            if (b >= 0 && s.b[b].allocated) request_free(&s, b);
            if (!has_completed) {
                imap_del(&live, e);
                complete_free(&s, b);
            }
        } else if (k == 2) {                                     /* free_completed */
            Py_ssize_t e = imap_find(&live, addr);
            if (e < 0) { orphans++; continue; }
            int32_t b = live_block(&s, &live.s[e]);
            imap_del(&live, e);
            complete_free(&s, b);
        } else {                                                 /* oom: the recorded failed request */
            int32_t b = sim_malloc(&s, size, stream);
            if (s.err) break;
            if (b < 0) {
                if (first_oom < 0) { first_oom = i; res_oom = s.reserved; alloc_oom = s.allocated; }
                fits = 0;
                continue;
            }
            fits = 1;
            stopped = i;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    if (s.err == 2) { PyErr_NoMemory(); goto done; }
    if (s.err) { declined = 1; goto done; }

    /* segment events as five int64 byte strings: action, addr, size, offset (-1: none), index */
    PyObject *cols[5] = {0};
    for (int c = 0; c < 5; c++) {
        cols[c] = PyBytes_FromStringAndSize(NULL, s.nev * 8);
        if (!cols[c]) { for (int d = 0; d < c; d++) Py_DECREF(cols[d]); goto done; }
        int64_t *out = (int64_t *)PyBytes_AS_STRING(cols[c]);
        for (Py_ssize_t e = 0; e < s.nev; e++) {
            Event *ev = &s.ev[e];
            out[e] = c == 0 ? ev->action : c == 1 ? ev->addr : c == 2 ? ev->size : c == 3 ? ev->offset : ev->index;
        }
    }
    result = Py_BuildValue("(LLLLLLiLLLLLLiNNNNN)",
        (long long)replayed, (long long)orphans, (long long)first_oom, (long long)res_oom, (long long)alloc_oom,
        (long long)stopped, fits, (long long)s.peak_reserved, (long long)s.peak_allocated,
        (long long)s.device_allocs, (long long)s.reserved, (long long)s.allocated, (long long)s.retries,
        s.diverged, cols[0], cols[1], cols[2], cols[3], cols[4]);
done:
    release_cols(col, nbuf);
    PyMem_RawFree(live.s);
    sim_free(&s);
    if (declined && !PyErr_Occurred()) Py_RETURN_NONE;
    return result;
}

/* ---------------------------------------------------------------- allocated deltas */

/* alloc_deltas keeps its live and pending sizes in the IMap above */

static PyObject *imap_keys(IMap *m) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, m->n * 8);
    if (!b) return NULL;
    int64_t *out = (int64_t *)PyBytes_AS_STRING(b);
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < m->cap; i++) if (m->s[i].used) out[k++] = m->s[i].key;
    return b;
}

PyDoc_STRVAR(alloc_deltas_doc,
"alloc_deltas(sel, action, addr, size, codes, divisions) -> tuple | None\n\n"
"``snapshot_metrics._trace_start``'s pass over the entries ``sel`` (codes: the action codes of\n"
"alloc, free_requested, free_completed): (per-entry deltas as int64 bytes, their sum, orphan\n"
"frees, addresses still live, addresses still pending, both as int64 bytes).  None: declined.");

static PyObject *alloc_deltas(PyObject *self, PyObject *args) {
    PyObject *osel, *oact, *oaddr, *osize, *divs;
    long long A, RQ;
    long long CP;
    if (!PyArg_ParseTuple(args, "OOOO(LLL)O!", &osel, &oact, &oaddr, &osize, &A, &RQ, &CP, &PyTuple_Type, &divs))
        return NULL;
    (void)CP;                                    /* the else branch, as in Python */
    Sim s;
    memset(&s, 0, sizeof s);
    if (PyTuple_GET_SIZE(divs) != 16) { PyErr_SetString(PyExc_ValueError, "16 divisions"); return NULL; }
    for (int k = 0; k < 16; k++) {
        int r_ = as_i64(PyTuple_GET_ITEM(divs, k), &s.div[k]);
        if (r_ < 0) return NULL;
        if (r_ || s.div[k] > (1LL << 40)) Py_RETURN_NONE;
    }
    Py_buffer col[4];
    int nbuf = 0, declined = 0;                  /* nbuf: columns held, for the release at done */
    IMap live = {0}, pending = {0};
    PyObject *result = NULL, *delta = NULL;
    static const ColSpec DELTA_COLS[4] = {{8, "lq", "sel"}, {1, "B", "action"}, {8, "lq", "addr"}, {8, "lq", "size"}};
    PyObject *const delta_objs[4] = {osel, oact, oaddr, osize};
    if (get_cols(delta_objs, DELTA_COLS, 4, col) < 0) goto done;
    nbuf = 4;
    Py_ssize_t n = col[1].len;
    delta = PyBytes_FromStringAndSize(NULL, n * 8);
    if (!delta) goto done;
    int64_t *d = (int64_t *)PyBytes_AS_STRING(delta);
    memset(d, 0, (size_t)n * 8);
    const int64_t *sel = col[0].buf, *caddr = col[2].buf, *csize = col[3].buf;
    const uint8_t *cact = col[1].buf;
    Py_ssize_t nsel = col[0].len / 8;
    int64_t total = 0, orphan = 0;
    int err = 0;                                 /* 1 declined, 2 no memory */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < nsel; j++) {
        int64_t i = sel[j];
        if (i < 0 || i >= n) { err = 1; break; }
        int64_t a = cact[i], addr = caddr[i], size = csize[i], sz;
        if (size > VALUE_LIMIT || size < -VALUE_LIMIT) { err = 1; break; }
        if (a == A) {
            sz = round_size(&s, size);
            if (imap_put(&live, addr, sz)) { err = 2; break; }
        } else if (a == RQ) {
            Py_ssize_t e = imap_find(&live, addr);
            if (e >= 0) { sz = live.s[e].val; imap_del(&live, e); }
            else { orphan++; sz = round_size(&s, size); }
            sz = -sz;
            if (imap_put(&pending, addr, 0)) { err = 2; break; }
        } else {
            Py_ssize_t e = imap_find(&pending, addr);
            if (e >= 0) { imap_del(&pending, e); continue; }
            e = imap_find(&live, addr);
            if (e >= 0) { sz = live.s[e].val; imap_del(&live, e); }
            else { orphan++; sz = round_size(&s, size); }
            sz = -sz;
        }
        if (__builtin_add_overflow(total, sz, &total)) { err = 1; break; }
        d[i] = sz;
    }
    Py_END_ALLOW_THREADS
    if (err == 2) { PyErr_NoMemory(); goto done; }
    if (err) { declined = 1; goto done; }
    PyObject *lk = imap_keys(&live), *pk = lk ? imap_keys(&pending) : NULL;
    if (!pk) { Py_XDECREF(lk); goto done; }
    result = Py_BuildValue("(OLLNN)", delta, (long long)total, (long long)orphan, lk, pk);
done:
    Py_XDECREF(delta);
    release_cols(col, nbuf);
    PyMem_RawFree(live.s);
    PyMem_RawFree(pending.s);
    if (declined && !PyErr_Occurred()) Py_RETURN_NONE;
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, run_doc},
    {"alloc_deltas", alloc_deltas, METH_VARARGS, alloc_deltas_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_allocsim",
    "Compiled allocator replay (see analysis.allocsim); the Python model is the reference.", -1, methods,
};

PyMODINIT_FUNC PyInit__allocsim(void) { return PyModule_Create(&module); }
