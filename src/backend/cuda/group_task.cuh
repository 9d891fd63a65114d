// The task of a block in a grouped launch (matvec.cu's matvec_group, matvec_q8.cu's
// matvec_q8_group): the group (n_tasks, first[]) sits in the kernel's parameters, task i owns the
// blocks from first[i] on, and block u belongs to the task with the largest first[i] <= u (a
// binary search over at most kMatvecGroupMax entries). Every task owns at least one block (the
// launchers drop empty tasks), so the search always lands on a task.
#pragma once
#include "backend/cuda/compat.h"

#include <cstdint>

namespace kinfer::cuda::KINFER_CUDA_NS {

template <class Group>
__device__ __forceinline__ int group_task(const Group& g, int64_t u) {
    int lo = 0, hi = g.n_tasks - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (g.first[mid] <= u) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// The tile of a grouped GEMM launch (mmq_group, fused_gemm_grouped) block u computes: task i's
// row tile (u - first[i]) % row_tiles and token tile (u - first[i]) / row_tiles, its first row and
// token, and how many of the tile's kRows rows and kTokens tokens the task has there.
struct TaskTile {
    int task;
    int64_t r0, t0;
    int nr, nt;
};
template <int kRows, int kTokens, class Group>
__device__ __forceinline__ TaskTile task_tile(const Group& g, int64_t u) {
    TaskTile tile;
    tile.task = group_task(g, u);
    const auto& t = g.task[tile.task];
    const int64_t row_tiles = (t.rows + kRows - 1) / kRows, local = u - g.first[tile.task];
    tile.r0 = local % row_tiles * kRows;
    tile.t0 = local / row_tiles * kTokens;
    tile.nr = t.rows - tile.r0 < kRows ? int(t.rows - tile.r0) : kRows;
    tile.nt = t.n - tile.t0 < kTokens ? int(t.n - tile.t0) : kTokens;
    return tile;
}

// The launchers' half (matvec_q8_group, mmq_group): `in` without its empty tasks (no rows or no
// tokens), ldy 0 made rows, and first[i] numbering task i's blocks, blocks_of(task) of them.
// Returns the whole group's block count (0: nothing to launch).
template <class Group, class BlocksOf>
int64_t compact_group(const Group& in, Group& out, BlocksOf blocks_of) {
    out.n_tasks = 0;
    int64_t blocks = 0;
    for (int i = 0; i < in.n_tasks; ++i) {
        auto t = in.task[i];
        if (t.rows <= 0 || t.n <= 0) continue;
        if (t.ldy == 0) t.ldy = t.rows;
        out.first[out.n_tasks] = blocks;
        out.task[out.n_tasks++] = t;
        blocks += blocks_of(t);
    }
    return blocks;
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
