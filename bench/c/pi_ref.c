/* pi_ref: a native C reference for the Monte Carlo sample stream `aner-mc/philox4x64-10/v1`
 * (docs/contracts.md, section 1), for `make bench` to compare `aner parallel run` with.
 *
 *   pi_ref SAMPLES SEED [THREADS]      prints the hit count of samples [0, SAMPLES)
 *
 * Block b of stream (seed, 0) is Philox4x64-10 (Random123) of counter (b, 0, 0, 0) under key
 * (seed, 0); sample i reads words 2i and 2i+1, so block b serves samples 2b and 2b+1.
 * x = (w >> 11) * 2**-53, a hit iff x*x + y*y < 1.0 in binary64: build with
 * -ffp-contract=off so that no fused multiply-add changes a rounding (the Makefile does).
 * THREADS defaults to the CPUs this process may run on (its affinity mask); each thread
 * counts a contiguous range of blocks, four blocks per iteration as aner's kernel does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef unsigned __int128 u128;

#define M0 UINT64_C(0xD2E7470EE14C6C93)
#define M1 UINT64_C(0xCA5A826395121157)
#define W0 UINT64_C(0x9E3779B97F4A7C15)
#define W1 UINT64_C(0xBB67AE8584CAA73B)

static inline void philox_block(uint64_t b, uint64_t k0, uint64_t w[4]) {
    uint64_t c0 = b, c1 = 0, c2 = 0, c3 = 0, k1 = 0;
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += W0;
            k1 += W1;
        }
        u128 p0 = (u128)M0 * c0, p1 = (u128)M1 * c2;
        uint64_t hi0 = (uint64_t)(p0 >> 64), lo0 = (uint64_t)p0;
        uint64_t hi1 = (uint64_t)(p1 >> 64), lo1 = (uint64_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    w[0] = c0, w[1] = c1, w[2] = c2, w[3] = c3;
}

static inline int is_hit(uint64_t wx, uint64_t wy) {
    double x = (double)(wx >> 11) * 0x1p-53;
    double y = (double)(wy >> 11) * 0x1p-53;
    return x * x + y * y < 1.0;
}

struct range {
    uint64_t seed, first, end; /* blocks [first, end) */
    uint64_t hits;
};

static void *count(void *arg) {
    struct range *r = arg;
    uint64_t hits = 0, b = r->first, w0[4], w1[4], w2[4], w3[4];
    for (; b + 3 < r->end; b += 4) {
        philox_block(b, r->seed, w0);
        philox_block(b + 1, r->seed, w1);
        philox_block(b + 2, r->seed, w2);
        philox_block(b + 3, r->seed, w3);
        hits += is_hit(w0[0], w0[1]) + is_hit(w0[2], w0[3]);
        hits += is_hit(w1[0], w1[1]) + is_hit(w1[2], w1[3]);
        hits += is_hit(w2[0], w2[1]) + is_hit(w2[2], w2[3]);
        hits += is_hit(w3[0], w3[1]) + is_hit(w3[2], w3[3]);
    }
    for (; b < r->end; b++) {
        philox_block(b, r->seed, w0);
        hits += is_hit(w0[0], w0[1]) + is_hit(w0[2], w0[3]);
    }
    r->hits = hits;
    return NULL;
}

static int parse(const char *text, const char *what, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-') {
        fprintf(stderr, "pi_ref: %s must be a non-negative integer below 2**64, got %s\n", what,
                text);
        return 0;
    }
    *out = (uint64_t)value;
    return 1;
}

int main(int argc, char **argv) {
    uint64_t samples, seed, threads = 0;
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: pi_ref SAMPLES SEED [THREADS]\n");
        return 2;
    }
    if (!parse(argv[1], "SAMPLES", &samples) || !parse(argv[2], "SEED", &seed) ||
        (argc == 4 && !parse(argv[3], "THREADS", &threads)))
        return 2;
    if (threads == 0) {
        cpu_set_t mask;
        threads = sched_getaffinity(0, sizeof mask, &mask) == 0 ? (uint64_t)CPU_COUNT(&mask) : 1;
    }
    if (threads > 1024) threads = 1024;

    uint64_t blocks = samples / 2; /* whole blocks; an odd last sample uses half of one more */
    struct range ranges[1024];
    pthread_t ids[1024];
    for (uint64_t t = 0; t < threads; t++) {
        ranges[t] = (struct range){seed, blocks * t / threads, blocks * (t + 1) / threads, 0};
        if (t > 0 && pthread_create(&ids[t], NULL, count, &ranges[t]) != 0) {
            fprintf(stderr, "pi_ref: cannot start thread %" PRIu64 "\n", t);
            return 1;
        }
    }
    count(&ranges[0]);
    uint64_t hits = ranges[0].hits;
    for (uint64_t t = 1; t < threads; t++) {
        pthread_join(ids[t], NULL);
        hits += ranges[t].hits;
    }
    if (samples & 1) {
        uint64_t w[4];
        philox_block(blocks, seed, w);
        hits += is_hit(w[0], w[1]);
    }
    printf("%" PRIu64 "\n", hits);
    return 0;
}
