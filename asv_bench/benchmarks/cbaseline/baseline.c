/* C baselines for rtsoa's executors, over the same CSR arrays rtsoa uses.
 *
 * Compiled with `gcc -O2 -shared -fPIC` by loader.py and called through ctypes. Every
 * baseline dispatches each node through a table of 8 kernel function pointers (no inlining
 * is possible through the table). Kernel k does the same work as rtsoa's "Checksum<k>" kernel
 * (rtsoa/kernels/checksum.py): it folds the node id into a uint64 checksum,
 *     x = (node + SALT[k]) * MULTIPLIER;  checksum += x ^ (x >> 31)   (mod 2**64)
 * which is order-independent, so every executor must give the same checksum. The checksum
 * escapes to the caller, so the compiler cannot drop the calls.
 *
 * Work buffers (in-degree counters, ready queue, heap) are allocated once by the caller, as
 * rtsoa's prepared executors do; a run resets them by memcpy from templates.
 */
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define ALWAYS_INLINE static inline __attribute__((always_inline))

typedef int32_t (*kernel_fn)(int32_t node, uint64_t *checksum);

/* Must equal CHECKSUM_SALTS / CHECKSUM_MULTIPLIER in loader.py (checked at load). */
#define MULTIPLIER 0xBF58476D1CE4E5B9ULL

#define KERNEL(k, salt)                                                       \
    static int32_t checksum##k(int32_t node, uint64_t *checksum) {           \
        uint64_t x = ((uint64_t)(uint32_t)node + salt) * MULTIPLIER;         \
        *checksum += x ^ (x >> 31);                                           \
        return 0;                                                             \
    }

/* SALT[k] = (k + 1) * 0x9E3779B97F4A7C15 mod 2**64, as rtsoa's salt_of(k). */
KERNEL(0, 0x9E3779B97F4A7C15ULL)
KERNEL(1, 0x3C6EF372FE94F82AULL)
KERNEL(2, 0xDAA66D2C7DDF743FULL)
KERNEL(3, 0x78DDE6E5FD29F054ULL)
KERNEL(4, 0x1715609F7C746C69ULL)
KERNEL(5, 0xB54CDA58FBBEE87EULL)
KERNEL(6, 0x538454127B096493ULL)
KERNEL(7, 0xF1BBCDCBFA53E0A8ULL)

static kernel_fn const KERNELS[8] = {
    checksum0, checksum1, checksum2, checksum3,
    checksum4, checksum5, checksum6, checksum7,
};

EXPORT int32_t rt_kernel_count(void) { return 8; }

/* What kernel k folds for `node`, so the loader can check its Python copy of the formula. */
EXPORT uint64_t rt_kernel_fold(int32_t k, int32_t node) {
    uint64_t checksum = 0;
    KERNELS[k & 7](node, &checksum);
    return checksum;
}

/* ---- sequential: one indirect call per node over a precomputed order ------------------- */

EXPORT int64_t rt_sequential(int64_t n, const int32_t *order, const int32_t *node_kernel,
                             uint64_t *checksum_out) {
    uint64_t checksum = 0;
    int64_t executed = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t node = order[i];
        if (KERNELS[node_kernel[node]](node, &checksum) != 0) break;
        executed++;
    }
    *checksum_out = checksum;
    return executed;
}

/* ---- Kahn: FIFO ring buffer of ready nodes ----------------------------------------------- */

/* queue has capacity mask + 1 (a power of two >= n); the sources (in-degree 0, id order) are
 * copied in at the start of each run. trace, when not NULL, receives the visit order. */
ALWAYS_INLINE int64_t kahn(int64_t n, const int64_t *succ_offsets, const int32_t *succ_targets,
                           const int32_t *in_degree_template, const int32_t *node_kernel,
                           const int32_t *sources, int64_t source_count, int32_t *in_degree,
                           int32_t *queue, uint64_t mask, uint64_t *checksum_out,
                           int32_t *trace) {
    memcpy(in_degree, in_degree_template, (size_t)n * sizeof(int32_t));
    memcpy(queue, sources, (size_t)source_count * sizeof(int32_t));
    uint64_t head = 0, tail = (uint64_t)source_count;
    uint64_t checksum = 0;
    int64_t executed = 0;
    while (head != tail) {
        int32_t node = queue[head & mask];
        head++;
        if (KERNELS[node_kernel[node]](node, &checksum) != 0) break;
        if (trace) trace[executed] = node;
        executed++;
        for (int64_t e = succ_offsets[node], end = succ_offsets[node + 1]; e < end; e++) {
            int32_t target = succ_targets[e];
            if (--in_degree[target] == 0) {
                queue[tail & mask] = target;
                tail++;
            }
        }
    }
    *checksum_out = checksum;
    return executed;
}

EXPORT int64_t rt_kahn(int64_t n, const int64_t *succ_offsets, const int32_t *succ_targets,
                       const int32_t *in_degree_template, const int32_t *node_kernel,
                       const int32_t *sources, int64_t source_count, int32_t *in_degree,
                       int32_t *queue, uint64_t mask, uint64_t *checksum_out) {
    return kahn(n, succ_offsets, succ_targets, in_degree_template, node_kernel, sources,
                source_count, in_degree, queue, mask, checksum_out, NULL);
}

EXPORT int64_t rt_kahn_trace(int64_t n, const int64_t *succ_offsets, const int32_t *succ_targets,
                             const int32_t *in_degree_template, const int32_t *node_kernel,
                             const int32_t *sources, int64_t source_count, int32_t *in_degree,
                             int32_t *queue, uint64_t mask, uint64_t *checksum_out,
                             int32_t *trace) {
    return kahn(n, succ_offsets, succ_targets, in_degree_template, node_kernel, sources,
                source_count, in_degree, queue, mask, checksum_out, trace);
}

/* ---- heap: binary min-heap keyed on (priority << 32 | id) -------------------------------- */

/* The sign bit is flipped so that negative priorities order before positive ones. */
ALWAYS_INLINE uint64_t heap_key(int32_t priority, int32_t node) {
    return ((uint64_t)((uint32_t)priority ^ 0x80000000u) << 32) | (uint32_t)node;
}

ALWAYS_INLINE void heap_push(uint64_t *heap, int64_t *size, uint64_t key) {
    int64_t hole = (*size)++;
    while (hole > 0) {
        int64_t parent = (hole - 1) >> 1;
        if (heap[parent] <= key) break;
        heap[hole] = heap[parent];
        hole = parent;
    }
    heap[hole] = key;
}

ALWAYS_INLINE uint64_t heap_pop(uint64_t *heap, int64_t *size) {
    uint64_t top = heap[0];
    int64_t count = --(*size);
    uint64_t last = heap[count];
    int64_t hole = 0;
    for (;;) {
        int64_t child = 2 * hole + 1;
        if (child >= count) break;
        if (child + 1 < count && heap[child + 1] < heap[child]) child++;
        if (last <= heap[child]) break;
        heap[hole] = heap[child];
        hole = child;
    }
    heap[hole] = last;
    return top;
}

/* source_keys: the sources' keys in ascending order (a sorted array is a valid heap). */
ALWAYS_INLINE int64_t heap_run(int64_t n, const int64_t *succ_offsets, const int32_t *succ_targets,
                               const int32_t *in_degree_template, const int32_t *node_kernel,
                               const int32_t *node_priority, const uint64_t *source_keys,
                               int64_t source_count, int32_t *in_degree, uint64_t *heap,
                               uint64_t *checksum_out, int32_t *trace) {
    memcpy(in_degree, in_degree_template, (size_t)n * sizeof(int32_t));
    memcpy(heap, source_keys, (size_t)source_count * sizeof(uint64_t));
    int64_t size = source_count;
    uint64_t checksum = 0;
    int64_t executed = 0;
    while (size > 0) {
        int32_t node = (int32_t)(uint32_t)heap_pop(heap, &size);
        if (KERNELS[node_kernel[node]](node, &checksum) != 0) break;
        if (trace) trace[executed] = node;
        executed++;
        for (int64_t e = succ_offsets[node], end = succ_offsets[node + 1]; e < end; e++) {
            int32_t target = succ_targets[e];
            if (--in_degree[target] == 0) heap_push(heap, &size, heap_key(node_priority[target], target));
        }
    }
    *checksum_out = checksum;
    return executed;
}

EXPORT int64_t rt_heap(int64_t n, const int64_t *succ_offsets, const int32_t *succ_targets,
                       const int32_t *in_degree_template, const int32_t *node_kernel,
                       const int32_t *node_priority, const uint64_t *source_keys,
                       int64_t source_count, int32_t *in_degree, uint64_t *heap,
                       uint64_t *checksum_out) {
    return heap_run(n, succ_offsets, succ_targets, in_degree_template, node_kernel, node_priority,
                    source_keys, source_count, in_degree, heap, checksum_out, NULL);
}

EXPORT int64_t rt_heap_trace(int64_t n, const int64_t *succ_offsets, const int32_t *succ_targets,
                             const int32_t *in_degree_template, const int32_t *node_kernel,
                             const int32_t *node_priority, const uint64_t *source_keys,
                             int64_t source_count, int32_t *in_degree, uint64_t *heap,
                             uint64_t *checksum_out, int32_t *trace) {
    return heap_run(n, succ_offsets, succ_targets, in_degree_template, node_kernel, node_priority,
                    source_keys, source_count, in_degree, heap, checksum_out, trace);
}
